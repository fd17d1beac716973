"""Reading the MODEL argument: an ONNX file, or ``module:factory`` naming a Python function
that returns a PyTorch module and its example arguments."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from popart_unwind.errors import ModelImportError, PopartUnwindError
from popart_unwind.ir import Ir

_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def is_factory(model: str) -> bool:
    """Whether MODEL names ``module:factory`` rather than an ONNX file."""
    if model.lower().endswith(".onnx") or Path(model).exists():
        return False
    return _FACTORY.fullmatch(model) is not None


def load_model(model: str, training: bool) -> Ir:
    """The model as an Ir (shapes inferred), or ModelImportError saying what is wrong."""
    if is_factory(model):
        return _load_factory(model, training)
    if training:
        raise ModelImportError("--training applies to PyTorch models (module:factory); an "
                               "ONNX model is planned as it is")
    return Ir.from_onnx(model)


def _load_factory(spec: str, training: bool) -> Ir:
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
        except Exception as error:  # the user's module failed while importing
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
    except Exception as error:
        raise ModelImportError(f"{spec}() failed: {_first_line(error)}") from None
    if not (isinstance(made, tuple) and len(made) == 2):
        raise ModelImportError(f"{spec}() must return (torch module, example_args tuple), "
                               f"got {type(made).__name__}")
    module_object, example_args = made
    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    try:
        with warnings.catch_warnings():  # torch's own deprecation notices are not the user's
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return Ir.from_torch(module_object, example_args, training=training)
    except PopartUnwindError:
        raise
    except Exception as error:  # torch.export reports unsupported programs in many types
        raise ModelImportError(f"cannot trace {spec}: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
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
