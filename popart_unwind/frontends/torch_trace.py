"""Capture whole PyTorch graphs: a forward pass, or one complete training step.

This is the tracing half of the PyTorch front end; converting the captured graphs into the
popart-unwind IR is a separate step. Graphs are captured with :func:`torch.export.export`,
the supported way to get a whole-model graph in torch 2.x: it yields an
:class:`~torch.export.ExportedProgram` whose graph holds ATen ops only, and whose
``graph_signature`` says which graph inputs are parameters, buffers or user inputs. That is
the information a layout planner needs, since it places the producer-less tensors. (PopTorch,
Graphcore's own PyTorch front end, also traces the module rather than reading its Python.)

torch is an optional dependency (the ``torch`` extra). Nothing here imports it at module
import time, and every entry point raises :class:`~popart_unwind.errors.ModelImportError`
with an install hint when it is missing.

Graph layout, for whoever consumes these programs:

* Forward (:func:`trace_forward`): inputs are ``PARAMETER``, ``BUFFER`` (and, when the
  module builds tensors from Python data, ``CONSTANT_TENSOR``) specs followed by one
  ``USER_INPUT`` per example argument; outputs are the module's outputs (``USER_OUTPUT``).
* Training step (:func:`trace_training_step`): the same inputs. The outputs are, in order:
  one ``BUFFER_MUTATION`` per buffer the step updates (BatchNorm running statistics, its
  batch counter), then ``USER_OUTPUT`` specs: the loss (a scalar) first, then the updated
  value of every trainable parameter, in ``module.named_parameters()`` order.
  :func:`updated_parameters` maps parameter names to those outputs. Traced with
  ``update=False``, the step stops at the gradients: each trainable parameter's gradient
  takes its updated value's place, and :func:`parameter_gradients` maps names to them (the
  front end then adds an optimizer's updates in the IR).
* A tied parameter (one tensor under several names) is lifted as one ``PARAMETER`` input per
  name, all with the same tensor in ``program.state_dict``; the graph reads only one of them.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from popart_unwind.errors import ModelImportError

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

__all__ = [
    "INSTALL_HINT",
    "aten_op_counts",
    "default_loss",
    "parameter_gradients",
    "trace_forward",
    "trace_training_step",
    "transformers_tracing_patch",
    "updated_parameters",
]

INSTALL_HINT = "install the torch extra: pip install '.[torch]'"


def _import_torch() -> Any:
    """Import torch on first use, so that the rest of the package never needs it."""
    try:
        import torch
        import torch.export  # a submodule that "import torch" does not always load
    except ImportError as exc:
        raise ModelImportError(
            f"the PyTorch front end needs torch, which is not installed; {INSTALL_HINT}"
        ) from exc
    return torch


def _as_args(example_args: Any) -> tuple[Any, ...]:
    """Accept one tensor or a sequence of positional arguments."""
    torch = _import_torch()
    if isinstance(example_args, torch.Tensor):
        return (example_args,)
    if isinstance(example_args, Sequence) and not isinstance(example_args, str):
        return tuple(example_args)
    raise ModelImportError(
        f"example_args must be a tensor or a tuple of positional arguments, "
        f"not {type(example_args).__name__}"
    )


def _check_module(module: Any) -> None:
    torch = _import_torch()
    if not isinstance(module, torch.nn.Module):
        raise ModelImportError(
            f"expected a torch.nn.Module, got {type(module).__name__}"
        )


@contextlib.contextmanager
def _training_flags(module: torch.nn.Module, training: bool) -> Iterator[None]:
    """Put every submodule in train or eval mode, and restore each one's own flag after."""
    saved = [(m, m.training) for m in module.modules()]
    module.train(training)
    try:
        yield
    finally:
        for m, flag in saved:
            m.training = flag


def _always_tracing(*_args: Any, **_kwargs: Any) -> bool:
    return True


@contextlib.contextmanager
def transformers_tracing_patch() -> Iterator[None]:
    """Tell transformers' masking code that it is being traced, for the duration only.

    transformers decides whether it may skip building an attention mask by reading the
    mask's values (``torch.all(mask == 1)``), unless its ``is_tracing`` helper says a graph
    is being traced. Under the functional transforms used for training steps that helper
    may not recognise the traced tensors, and reading the values is then a data-dependent
    branch that tracing cannot capture (``GuardOnDataDependentSymNode``: BERT with
    transformers 5.23; GPT-2 and Llama with other versions). Patching ``is_tracing`` to
    return True makes the models always build the mask, which is also what a graph that
    must work for any mask needs. Only modules transformers has already loaded are touched,
    and every patched name is restored on exit. Without transformers this does nothing.
    """
    source = sys.modules.get("transformers.utils.import_utils")
    original = vars(source).get("is_tracing") if source is not None else None
    patched: list[Any] = []
    if original is not None:
        for name, mod in list(sys.modules.items()):
            if mod is None or not (name == "transformers" or name.startswith("transformers.")):
                continue
            # vars(), not getattr(): transformers' lazy modules would import on attribute access
            if vars(mod).get("is_tracing") is original:
                mod.is_tracing = _always_tracing
                patched.append(mod)
    try:
        yield
    finally:
        for mod in patched:
            mod.is_tracing = original


def trace_forward(module: torch.nn.Module, example_args: Any, *,
                  decompose: bool = True) -> ExportedProgram:
    """Capture ``module``'s forward pass, in eval mode, as an ExportedProgram.

    ``example_args`` is one tensor or a tuple of positional arguments; their shapes are baked
    into the graph (no dynamic shapes). With ``decompose`` (the default) the program is
    lowered to the core ATen op set by ``run_decompositions()``: a small, closed set of ops
    (``addmm``, ``view``, ``permute``, ``native_layer_norm``, ...) for the converter to
    handle, instead of the hundreds of composite ops (``linear``, ``matmul``, ``dropout``)
    that a module may call. Each submodule's train/eval flag is restored afterwards.
    """
    _check_module(module)
    torch = _import_torch()
    args = _as_args(example_args)
    with _training_flags(module, False), transformers_tracing_patch():
        try:
            program = torch.export.export(module, args)
            if decompose:
                program = program.run_decompositions()
        except Exception as exc:
            raise ModelImportError(
                f"torch.export could not capture the forward pass of "
                f"{type(module).__name__}: {type(exc).__name__}: {exc}"
            ) from exc
    return program


def default_loss(output: Any) -> torch.Tensor:
    """The default training loss: the sum of the module's first output.

    The first output is the tensor itself, element 0 of a tuple or list, or the first value
    of a dict or a transformers ``ModelOutput``. A sum seeds the backward pass with ones, so
    the gradient graph is exactly the model's own backward and nothing else.
    """
    torch = _import_torch()
    first = output
    while not isinstance(first, torch.Tensor):
        if isinstance(first, dict) and first:  # ModelOutput is an OrderedDict
            first = next(iter(first.values()))
        elif isinstance(first, (tuple, list)) and first:
            first = first[0]
        else:
            raise ModelImportError(
                f"the default loss needs a tensor as the module's first output, got "
                f"{type(first).__name__}; pass loss_fn"
            )
    if not first.is_floating_point():
        raise ModelImportError(
            f"the default loss needs a floating-point first output, got {first.dtype}; "
            f"pass loss_fn"
        )
    return first.sum()


def trace_training_step(module: torch.nn.Module, example_args: Any,
                        loss_fn: Callable[[Any], torch.Tensor] | None = None,
                        learning_rate: float = 0.01, *, train_mode: bool = True,
                        decompose: bool = True, update: bool = True) -> ExportedProgram:
    """Capture one SGD training step of ``module`` as a single ExportedProgram.

    The graph computes the forward pass, ``loss = loss_fn(output)`` (default:
    :func:`default_loss`, the sum of the first output), the backward pass, and
    ``p - learning_rate * grad`` for every parameter with ``requires_grad``. Parameters
    and buffers are graph inputs; the loss and the updated parameters are outputs (see
    the module docstring for the order). ``train_mode`` traces with dropout and BatchNorm
    in training behaviour; flags are restored afterwards. With ``update=False`` the
    outputs are the loss and each parameter's gradient (``learning_rate`` is unused): the
    step an optimizer's updates are added to in the IR (``torch_import``).

    Why this route: ``torch.export`` cannot trace through ``torch.func`` transforms
    directly, so the step is first traced with ``make_fx`` over a functionalized function
    (``functional_call`` + ``grad_and_value`` on fake tensors), which gives a flat graph
    with anonymous inputs; that graph is then exported through a module sharing the
    original's parameters and buffers, so the result is an ExportedProgram like
    :func:`trace_forward`'s, with parameter, buffer and user inputs told apart by name.
    """
    _check_module(module)
    torch = _import_torch()
    from torch.func import functional_call, functionalize, grad_and_value
    from torch.fx.experimental.proxy_tensor import make_fx

    args = _as_args(example_args)
    loss_of = default_loss if loss_fn is None else loss_fn
    named_params = list(module.named_parameters())
    trainable = [n for n, p in named_params if p.requires_grad]
    state_names = [n for n, p in named_params if not p.requires_grad]
    state_names += [n for n, _ in module.named_buffers()]
    if not trainable:
        raise ModelImportError(f"{type(module).__name__} has no trainable parameter to update")
    n_train, n_state = len(trainable), len(state_names)
    lr = float(learning_rate)

    def objective(params: dict[str, Any], state: dict[str, Any], *inputs: Any) -> Any:
        loss = loss_of(functional_call(module, (params, state), inputs))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ModelImportError("the loss must be a tensor with a single element")
        return loss.reshape(())

    def step(*flat: Any) -> tuple[Any, ...]:
        params = dict(zip(trainable, flat[:n_train], strict=True))
        state = dict(zip(state_names, flat[n_train:n_train + n_state], strict=True))
        # the state goes in as an argument (not differentiated) so that in-place buffer
        # updates such as BatchNorm's are allowed by the grad transform
        grads, loss = grad_and_value(objective)(params, state, *flat[n_train + n_state:])
        if not update:
            return (loss, *(grads[n] for n in trainable))
        return (loss, *(params[n] - lr * grads[n] for n in trainable))

    def tensor(name: str) -> Any:
        try:
            return module.get_parameter(name)
        except AttributeError:
            return module.get_buffer(name)

    with _training_flags(module, train_mode), transformers_tracing_patch():
        try:
            flat = [tensor(n) for n in (*trainable, *state_names)]
            graph = make_fx(functionalize(step), tracing_mode="fake")(*flat, *args)
            wrapper = _step_module(module, graph, trainable + state_names)
            program = torch.export.export(wrapper, args)
            if decompose:
                program = program.run_decompositions()
        except ModelImportError:
            raise
        except Exception as exc:
            raise ModelImportError(
                f"could not capture a training step of {type(module).__name__}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    return program


def _step_module(module: Any, graph: Any, names: list[str]) -> Any:
    """Wrap the traced step in a module that owns ``module``'s parameters and buffers."""
    torch = _import_torch()

    class StepModule(torch.nn.Module):
        """Holds the original's parameters and buffers under their own names; runs the step.

        torch.export lifts what a module owns into ``PARAMETER`` / ``BUFFER`` inputs named
        after it, so the exported training step keeps the original module's names.
        """

        def __init__(self, module: Any, graph: Any, names: list[str]) -> None:
            super().__init__()
            for name, child in module.named_children():
                self.add_module(name, child)
            for name, param in module._parameters.items():
                self.register_parameter(name, param)
            for name, buf in module._buffers.items():
                self.register_buffer(
                    name, buf, persistent=name not in module._non_persistent_buffers_set
                )
            self._popart_unwind_step = graph  # its constants become lifted constants
            self._names = names

        def forward(self, *inputs: Any) -> Any:
            flat = []
            for name in self._names:
                try:
                    flat.append(self.get_parameter(name))
                except AttributeError:
                    flat.append(self.get_buffer(name))
            return self._popart_unwind_step(*flat, *inputs)

    return StepModule(module, graph, names)


def updated_parameters(program: ExportedProgram) -> dict[str, str]:
    """Map each trained parameter's name to the graph output that carries its new value.

    For programs from :func:`trace_training_step`: the first user output is the loss and
    the rest are the updated parameters, in the order of the program's parameter inputs
    restricted to those that require grad. A tied parameter (T5's shared embedding) has one
    ``PARAMETER`` input per name, all holding the same tensor, of which the graph reads one
    (in practice the last); it has one update, listed under its first name.
    """
    return _per_parameter_outputs(program)


def parameter_gradients(program: ExportedProgram) -> dict[str, str]:
    """Map each trained parameter's name to the graph output that carries its gradient,
    for programs traced with ``update=False``; the outputs and tied parameters are as
    :func:`updated_parameters` has them."""
    return _per_parameter_outputs(program)


def _per_parameter_outputs(program: ExportedProgram) -> dict[str, str]:
    """The user outputs after the loss, one per trained tensor under its first name."""
    _import_torch()
    from torch.export.graph_signature import InputKind

    signature = program.graph_signature
    trained: list[str] = []
    seen: set[int] = set()
    for spec in signature.input_specs:
        if spec.kind != InputKind.PARAMETER:
            continue
        tensor = program.state_dict[spec.target]
        # a tied parameter is lifted once per name it has; only its first name is listed
        if tensor.requires_grad and id(tensor) not in seen:
            seen.add(id(tensor))
            trained.append(spec.target)
    outputs = list(signature.user_outputs)
    if len(outputs) != len(trained) + 1:
        raise ModelImportError(
            f"not a training-step program: {len(outputs)} user outputs for "
            f"{len(trained)} trainable parameters (expected the loss and one per parameter)"
        )
    return dict(zip(trained, outputs[1:], strict=True))


def aten_op_counts(program: ExportedProgram) -> Counter[str]:
    """Count a program's call_function nodes by target, e.g. ``aten.view.default``."""
    torch = _import_torch()
    counts: Counter[str] = Counter()
    for node in program.graph.nodes:
        if node.op == "call_function":
            target = node.target
            if isinstance(target, torch._ops.OpOverload):
                counts[str(target)] += 1  # "aten.view.default"
            else:
                counts[getattr(target, "__name__", str(target))] += 1  # "getitem"
    return counts
