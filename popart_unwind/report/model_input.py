"""Reading the MODEL argument: an ONNX file, or ``module:factory`` naming a Python function
that returns a PyTorch module and its example arguments."""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popart_unwind.errors import ModelImportError, PopartUnwindError
from popart_unwind.frontends.input_file import describe_unreadable
from popart_unwind.frontends.onnx_import import external_locations, load_light
from popart_unwind.ir import Ir
from popart_unwind.report.output_targets import InputFile
from popart_unwind.unwind.solvers import cyclic_gc_paused

if TYPE_CHECKING:
    from popart_unwind.training.optimizers import Optimizer

_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def is_factory(model: str) -> bool:
    """Whether MODEL names ``module:factory`` rather than an ONNX file."""
    if model.lower().endswith(".onnx") or Path(model).exists():
        return False
    return _FACTORY.fullmatch(model) is not None


def load_model(model: str, training: bool, allow_unknown_ops: bool = False,
               input_shapes: Mapping[str, Sequence[int]] | None = None,
               dims: Mapping[str, int] | None = None,
               optimizer: Optimizer | None = None) -> Ir:
    """The model as an Ir (shapes inferred), or ModelImportError saying what is wrong.
    ``allow_unknown_ops`` plans ONNX op types the registry does not know as barriers (the
    PyTorch front end keeps ATen ops it does not convert as opaque ops in any case);
    ``input_shapes`` (per input) and ``dims`` (per dimension name) fix an ONNX model's
    symbolic input dimensions. ``optimizer`` gives a PyTorch factory's training step its
    updates (without it, the step's traced SGD); an ONNX model's step takes its optimizer
    from the session options, in the Autodiff transform."""
    if is_factory(model):
        for given, flag in ((input_shapes, "--input-shape"), (dims, "--dim")):
            if given:
                raise ModelImportError(f"{flag} applies to ONNX models; a PyTorch factory "
                                       f"gives its example inputs, whose shapes are used")
        return _load_factory(model, training, optimizer)
    # an ONNX model's training step is built by the Autodiff transform (SessionOptions.loss)
    return Ir.from_onnx(model, allow_unknown_ops=allow_unknown_ops,
                        input_shapes=dict(input_shapes or {}), dims=dict(dims or {}))


def input_files(model: str) -> list[InputFile]:
    """The files a run on MODEL reads, which no output may replace: the ONNX file and its
    external data files, or the source file of a factory's module (when it can be found
    without running it). Unreadable models give what is known; loading them says why."""
    if is_factory(model):
        return _module_file(model.split(":", 1)[0])
    path = Path(model)
    if describe_unreadable(path) is not None:
        return []
    files = [InputFile("the input model", path)]
    try:
        proto, _ = load_light(path)  # the large weights' bytes are not read
    except Exception:  # not ONNX: the import reports it in its own words
        return files
    for location in sorted(external_locations(proto.graph)):
        if "\0" in location:
            continue  # no file can be named so; the import refuses it, naming the tensor
        files.append(InputFile("external data of the input model", path.parent / location))
    return files


def _module_file(module_name: str) -> list[InputFile]:
    """The source of a top-level module, found without importing anything."""
    if "." in module_name:
        return []  # finding a submodule would import its package: checked by the import
    import importlib.util

    with _cwd_importable():
        try:
            spec = importlib.util.find_spec(module_name)
        except (ImportError, ValueError):
            return []
    origin = getattr(spec, "origin", None)
    if spec is None or not origin or not os.path.isfile(origin):
        return []
    return [InputFile("the source of the model's module", Path(origin))]


def _load_factory(spec: str, training: bool, optimizer: Optimizer | None = None) -> Ir:
    """The factory's model traced. Importing torch and the model's libraries and tracing
    make hundreds of thousands of objects that live on, over which the cyclic collector
    kept passing as the heap grew (7 full passes, 0.7 s of the tiny GPT-2 training step's
    10 s): it is paused meanwhile, and one full pass after collects what the tracing
    left in cycles. That pass skips what was made before the trace (the libraries, the
    model: frozen, ``gc.freeze``, unless something else froze objects before), which is
    given back to the collector after it."""
    freezing = gc.get_freeze_count() == 0
    with cyclic_gc_paused():
        try:
            ir = _traced(spec, training, optimizer, freezing)
            gc.collect()  # before the collector resumes, which would pass over them young
        finally:
            if freezing:
                gc.unfreeze()
    return ir


def _traced(spec: str, training: bool, optimizer: Optimizer | None, freeze: bool) -> Ir:
    module_name, factory_name = spec.split(":", 1)
    try:
        import torch  # noqa: F401  (the front end needs it; say so plainly if it is absent)
    except ImportError:
        raise ModelImportError(f"MODEL {spec!r} is a PyTorch factory, but torch is not "
                               f"installed (pip install torch)") from None
    with _cwd_importable():
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ModelImportError(f"cannot import module {module_name!r} of MODEL {spec!r}: "
                                   f"{error}") from None
        except (Exception, SystemExit) as error:  # the user's module failed or exited
            raise ModelImportError(f"importing module {module_name!r} failed: "
                                   f"{_first_line(error)}") from None
    factory: Any = module
    for part in factory_name.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise ModelImportError(f"module {module_name!r} has no {factory_name!r}")
    if not callable(factory):
        raise ModelImportError(f"{spec} is not callable")
    try:
        made = factory()
    except (Exception, SystemExit) as error:  # sys.exit in a factory ends no run silently
        raise ModelImportError(f"{spec}() failed: {_first_line(error)}") from None
    if not (isinstance(made, tuple) and len(made) in (2, 3)) or (
            len(made) == 3 and not isinstance(made[2], dict)):
        raise ModelImportError(f"{spec}() must return (torch module, example_args tuple) or "
                               f"(torch module, example_args, blocks dict), got "
                               f"{type(made).__name__}")
    module_object, example_args = made[:2]
    blocks = made[2] if len(made) == 3 else None
    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    if freeze:
        gc.freeze()
    try:  # torch's own deprecation notices are left out by the command (cli.main)
        return Ir.from_torch(module_object, example_args, training=training, blocks=blocks,
                             optimizer=optimizer if training else None)
    except PopartUnwindError:
        raise
    except (Exception, SystemExit) as error:  # torch.export raises many types; a forward
        # may even exit
        raise ModelImportError(f"cannot trace {spec}: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r})"
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


@contextlib.contextmanager
def _cwd_importable() -> Iterator[None]:
    """Modules in the current folder import as they would with ``python -m``."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(cwd)
