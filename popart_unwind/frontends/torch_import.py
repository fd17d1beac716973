"""The PyTorch front end: a module → ``torch.export`` graph → IR.

PopTorch hands PopART a traced PyTorch program; we trace with ``torch.export`` (the whole-
graph capture torch 2.x supports), decomposed to core ATen, and convert each ATen op with
the table in ``aten_ops``. Parameters and buffers become Variable tensors named by their
qualified names (``encoder.layer.0.attention.self.query.weight``), traced constants Const
tensors, user inputs Stream inputs of the main graph.

A training step is traced with its SGD update (``p - lr·g``, the default), or, given an
``Optimizer``, traced to its gradients and given that optimizer's updates in the IR by
``popart_unwind.training.optimizers``: the one home of the update rules, which the ONNX
route's Autodiff transform uses too.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from popart_unwind.errors import ModelImportError
from popart_unwind.frontends.aten_ops import CONVERTERS
from popart_unwind.frontends.torch_values import ATEN_DOMAIN, TorchContext, torch_dtype_name
from popart_unwind.ir import Ir, TensorType
from popart_unwind.ir.weights import is_weight_op, weight_derived, weights_read
from popart_unwind.ops import REGISTRY
from popart_unwind.options import SessionOptions
from popart_unwind.rewrite import Rewriter
from popart_unwind.training import loss_forward_ops
from popart_unwind.training.optimizers import Optimizer, add_updates

__all__ = ["add_optimizer", "exported_program_to_ir", "import_torch"]


def import_torch(module: Any, example_args: tuple, training: bool = False,
                 options: SessionOptions | None = None,
                 blocks: Mapping[str, int] | None = None, optimizer: Optimizer | None = None,
                 **training_options: Any) -> Ir:
    """Trace ``module`` on ``example_args`` and convert the graph (see ``torch_trace``);
    ``blocks`` places submodules on IPUs as PopTorch's ``BeginBlock`` does
    (``place_blocks``). A training step without ``optimizer`` is traced with its SGD
    update; with one, its updates (and states) are built in the IR (``add_optimizer``)."""
    from popart_unwind.frontends import torch_trace

    if optimizer is not None:
        if not training:
            raise ModelImportError(f"optimizer {optimizer.name!r} applies to a training "
                                   f"step; pass training=True")
        for key in ("learning_rate", "update"):
            if key in training_options:
                raise ModelImportError(f"{key} cannot go with an optimizer, which holds "
                                       f"the step's update settings")
        training_options = {**training_options, "update": False}
    if training:
        program = torch_trace.trace_training_step(module, example_args, **training_options)
    else:
        program = torch_trace.trace_forward(module, example_args)
    ir = exported_program_to_ir(program, options=options)
    ir.metadata["source"] = f"torch:{type(module).__name__}"
    ir.metadata["kind"] = "training" if training else "forward"
    if training:  # the step's outputs: the buffers it updates, then its loss (torch_trace)
        ir.final_loss_id = ir.main_graph.output_ids[len(program.graph_signature
                                                        .buffers_to_mutate)]
    if optimizer is not None:
        add_optimizer(ir, list(torch_trace.parameter_gradients(program)),
                      len(program.graph_signature.buffers_to_mutate), optimizer,
                      _tied_names(module))
    if blocks:
        place_blocks(ir, blocks, _tied_names(module))
    return ir


def add_optimizer(ir: Ir, parameters: Sequence[str], buffers: int, optimizer: Optimizer,
                  tied: Mapping[str, tuple[str, ...]] | None = None) -> None:
    """Give a step traced to its gradients (``trace_training_step(update=False)``) the
    updates of ``optimizer``. ``parameters`` names the trained parameters in the order of
    their gradients, the graph outputs after the ``buffers`` mutated buffers and the loss
    (``parameter_gradients``' order); the gradients leave
    the outputs, each weight's new value and states join them after the loss. A tied
    parameter (one tensor under the names ``tied`` gives) has one update, of the Variable
    the graph reads."""
    graph = ir.main_graph
    first = buffers + 1
    if len(graph.output_ids) != first + len(parameters):
        raise ModelImportError(f"the training step has {len(graph.output_ids)} outputs; "
                               f"expected {buffers} buffers, the loss and {len(parameters)} "
                               f"gradients")
    found = {_read_variable(graph, name, (tied or {}).get(name, (name,))): grad
             for name, grad in zip(parameters, graph.outputs[first:], strict=True)}
    rewriter = Rewriter(REGISTRY)
    for index in reversed(range(first, first + len(parameters))):
        rewriter.remove_graph_output(graph, index)
    add_updates(graph, found, rewriter, optimizer)


def _read_variable(graph: Any, name: str, names: tuple[str, ...]) -> str:
    """The Variable of parameter ``name`` the graph reads: under one of its tied names
    (only one is read), else its own (a parameter no op reads is updated all the same)."""
    for candidate in names:
        if graph.has_tensor(candidate) and graph.tensor(candidate).consumers and \
                graph.tensor(candidate).tensor_type is TensorType.VARIABLE:
            return candidate
    if not graph.has_tensor(name) or graph.tensor(name).tensor_type is not TensorType.VARIABLE:
        raise ModelImportError(f"parameter {name!r} has no Variable in the imported graph")
    return name


def _tied_names(module: Any) -> dict[str, tuple[str, ...]]:
    """Each parameter name -> every name of the same tensor (a tied embedding and LM
    head are one tensor under two names; the graph reads it under one)."""
    names: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return {name: tuple(group) for group in names.values() for name in group}


def place_blocks(ir: Ir, blocks: Mapping[str, int],
                 tied: Mapping[str, tuple[str, ...]] | None = None) -> None:
    """Place the forward pass on IPUs by blocks, as PopTorch's ``BeginBlock(module,
    ipu_id=k)`` does: ``blocks`` maps submodules' qualified names (``transformer.h.4``) to
    the IPU of the block each begins, in the order the model runs them (PopTorch asks for
    that order too). Walking the forward pass in schedule order, the next block begins at
    the first op reading a parameter of its submodule, and every op runs on the IPU of
    the block begun last (IPU 0 before the first). PopTorch begins a block when the
    submodule runs; here the graph shows the submodule by the parameters it reads, under
    any of their names (``tied``: a tied LM head reads the embedding's table), so a block
    whose submodule reads no parameter cannot be found. A result made of weights alone
    (a transposed weight, which a schedule may compute early) is the weights it reads, and
    is left unplaced, as is the backward pass: InterIpuCopy puts each with its layer."""
    for name, ipu in blocks.items():
        if isinstance(ipu, bool) or not isinstance(ipu, int) or ipu < 0:
            raise ModelImportError(f"block {name!r}: its IPU must be an int >= 0, got {ipu!r}")
    order = list(blocks)
    graph = ir.main_graph
    forward = _forward_schedule(ir)
    derived = weight_derived(forward)
    begun, ipu = 0, 0
    for op in forward:
        if is_weight_op(op, derived):
            continue  # a transposed weight: InterIpuCopy puts it with its reader
        if begun < len(order) and any(_owned(tensor.id, order[begun], tied)
                                      for tensor in weights_read(op, derived)
                                      if tensor.tensor_type is TensorType.VARIABLE):
            ipu = blocks[order[begun]]
            begun += 1
        op.settings.vgraph_id = ipu
    if begun < len(order):
        raise ModelImportError(
            f"block {order[begun]!r} never begins: no op after block "
            f"{order[begun - 1]!r} reads its parameters" if begun else
            f"block {order[0]!r} never begins: no op of {graph.id or 'the main graph'!r} "
            f"reads its parameters; name submodules whose parameters the model reads, in "
            f"the order it runs them (a qualified name such as 'transformer.h.4')")


def _owned(tensor_id: str, module: str, tied: Mapping[str, tuple[str, ...]] | None) -> bool:
    """Whether a parameter, under any of its names, belongs to ``module``."""
    return any(name == module or name.startswith(module + ".")
               for name in (tied or {}).get(tensor_id, (tensor_id,)))


def _forward_schedule(ir: Ir) -> list[Any]:
    """The main graph's schedule, less what the loss does not depend on (a training
    step's backward pass)."""
    graph = ir.main_graph
    loss = ir.final_loss_id
    if loss is None or not graph.has_tensor(loss):
        return graph.schedule()
    return loss_forward_ops(graph, graph.tensor(loss))


def exported_program_to_ir(program: Any, options: SessionOptions | None = None) -> Ir:
    """Convert a ``torch.export.ExportedProgram`` into an IR (main graph only)."""
    ir = Ir(options)
    ctx = TorchContext(ir.main_graph)
    _add_placeholders(ctx, program)
    for node in program.graph.nodes:
        if node.op == "call_function":
            ctx.values[node.name] = _convert_call(ctx, node)
        elif node.op == "output":
            for value in _flatten(node.args[0]):
                if value is not None:
                    ir.main_graph.mark_output(ctx.tensor(value))
        elif node.op not in ("placeholder", "get_attr"):
            raise ModelImportError(f"unsupported FX node kind {node.op!r} ({node.name})")
    return ir


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, tuple | list):
        return [item for part in value for item in _flatten(part)]
    return [value]


def _add_placeholders(ctx: TorchContext, program: Any) -> None:
    from torch.export.graph_signature import InputKind

    graph = ctx.graph
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs
             if hasattr(spec.arg, "name")}
    for node in program.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = specs.get(node.name)
        kind = spec.kind if spec is not None else InputKind.USER_INPUT
        traced = node.meta.get("val")
        if kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = program.state_dict.get(spec.target)
            if value is None:
                value = program.constants.get(spec.target)
            array = _to_numpy(value, spec.target)
            tensor_id = graph.unique_id(spec.target)
            tensor = (graph.add_constant(tensor_id, array) if kind is InputKind.CONSTANT_TENSOR
                      else graph.add_variable(tensor_id, array))
        elif hasattr(traced, "shape"):
            tensor = graph.add_input(graph.unique_id(node.name), torch_dtype_name(traced.dtype),
                                     tuple(int(d) for d in traced.shape), TensorType.STREAM)
        else:
            ctx.values[node.name] = traced  # a non-tensor user input (a traced constant)
            continue
        ctx.values[node.name] = tensor


def _to_numpy(value: Any, name: str) -> np.ndarray:
    if value is None or not hasattr(value, "detach"):
        raise ModelImportError(f"no value for parameter, buffer or constant {name!r}")
    tensor = value.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":
        tensor = tensor.float()
    return np.asarray(tensor.numpy(), order="C")  # keeps 0-d arrays 0-d


def _convert_call(ctx: TorchContext, node: Any) -> Any:
    if node.target is operator.getitem:
        container, index = node.args
        return ctx.values[container.name][index]
    args = _resolve(ctx, node.args)
    kwargs = _resolve(ctx, node.kwargs)
    name = str(node.target).removeprefix("aten.")
    converter = CONVERTERS.get(name)
    result = NotImplemented if converter is None else converter(ctx, node, args, kwargs)
    return _opaque(ctx, node, args, kwargs) if result is NotImplemented else result


def _resolve(ctx: TorchContext, value: Any) -> Any:
    """FX arguments with node references replaced by what they were converted to."""
    if hasattr(value, "op") and hasattr(value, "name"):
        resolved = ctx.values.get(value.name)
        return resolved if not isinstance(resolved, list | tuple) else value
    if isinstance(value, tuple | list):
        return type(value)(_resolve(ctx, v) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(ctx, v) for k, v in value.items()}
    return value


def _opaque(ctx: TorchContext, node: Any, args: tuple, kwargs: dict) -> Any:
    """An ATen op with no ONNX form here: kept whole, with its tensor operands as inputs,
    its other arguments as attributes and torch's output shapes."""
    tensors = [v for v in _flatten(list(args) + list(kwargs.values())) if ctx.is_tensor(v)]
    attributes = {"aten": str(node.target)}
    traced = node.meta.get("val")
    outputs = traced if isinstance(traced, tuple | list) else [traced]
    result = ctx.op(node, str(node.target).removeprefix("aten.").split(".")[0], tensors,
                    attributes, num_outputs=len(outputs), domain=ATEN_DOMAIN)
    if not isinstance(traced, tuple | list):
        return result
    results = result if isinstance(result, list) else [result]
    for index, value in enumerate(outputs):
        if value is None:  # an output torch did not compute (e.g. an unneeded gradient)
            op = results[index].producer
            ctx.graph.disconnect_output(op, index)
            ctx.graph.remove_tensor(results[index])
            results[index] = None
    return results
