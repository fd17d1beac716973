"""The backward pass of a loss, built in the IR from each op family's gradient rule.

After PopART's ``Autodiff`` (``Ir::constructBackwards``): walking the ops the loss depends
on from the last to the first, each op whose result reaches the loss and whose inputs a
trainable weight reaches asks its family's rule (``OpDef.gradient``) for its inputs'
gradients; a tensor read by several ops gets one partial from each, and its gradient is
their ``Sum`` (PopART's grad sum, which DecomposeGradSum then turns into a chain of
additions when asked). The loss's own gradient, the seed, is the loss scaling factor
(PopART's ``lossScaling``: 1 unless set), a constant of the loss's shape.

Trainable weights are the main graph's Variable tensors of a floating-point type that the
loss depends on (PopART trains every ONNX initializer it holds as a Variable); the
Autodiff transform leaves out those of one element (``min_elements``). What the
walk refuses, naming the op: an op on a path from a weight to the loss whose family states
no gradient rule (a control-flow op among them), and a rule's gradient whose shape or type
is not its input's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popart_unwind.errors import TransformError
from popart_unwind.ir import Graph, Op, Tensor, TensorType
from popart_unwind.ir.dtypes import numpy_dtype
from popart_unwind.ir.op import DEFAULT_ONNX_OPSET, ONNX_DOMAIN, OpType
from popart_unwind.ops import REGISTRY, OpRegistry
from popart_unwind.ops.gradient import is_differentiable
from popart_unwind.rewrite import Rewriter

__all__ = ["AutodiffError", "RewriterGradientBuilder", "build_backward", "loss_forward_ops",
           "trainable_weights"]


class AutodiffError(TransformError):
    """The backward pass cannot be built: an op without a gradient rule on a weight's path
    to the loss, a rule giving a gradient of the wrong type, or a loss that is no scalar."""


class RewriterGradientBuilder:
    """The :class:`~popart_unwind.ops.gradient.GradientBuilder` the walk hands the rules:
    every op and constant goes through the rewriter, each op placed as ``like``."""

    def __init__(self, graph: Graph, rewriter: Rewriter, like: Op | None = None) -> None:
        self.graph, self.rewriter, self.like = graph, rewriter, like

    def op(self, op_type: str, inputs: Sequence[Tensor | None],
           attributes: dict[str, Any] | None = None, *, num_outputs: int = 1) -> list[Tensor]:
        made = self.rewriter.create_op(self.graph, OpType(ONNX_DOMAIN, op_type, DEFAULT_ONNX_OPSET),
                                       list(inputs), attributes, like=self.like,
                                       num_outputs=num_outputs)
        return list(made.outputs)

    def constant(self, value: Any, dtype: str) -> Tensor:
        return self.rewriter.constant(self.graph, np.asarray(value, dtype=numpy_dtype(dtype)),
                                      dtype=dtype)


def loss_forward_ops(graph: Graph, loss: Tensor) -> list[Op]:
    """The ops ``loss`` depends on, in schedule order (PopART's ``PathToLoss::Yes``)."""
    needed: set[int] = set()
    stack = [loss.producer] if loss.producer is not None else []
    while stack:
        op = stack.pop()
        if op.id in needed:
            continue
        needed.add(op.id)
        stack.extend(t.producer for t in op.inputs if t.producer is not None)
    return [op for op in graph.schedule() if op.id in needed]


def trainable_weights(graph: Graph, forward: Sequence[Op],
                      min_elements: int = 0) -> list[Tensor]:
    """The floating-point Variables of at least ``min_elements`` elements the forward ops
    read, in the order first read."""
    found: dict[str, Tensor] = {}
    for op in forward:
        for tensor in op.inputs:
            if tensor.tensor_type is TensorType.VARIABLE and is_differentiable(tensor) \
                    and tensor.producer is None and tensor.shape is not None \
                    and int(np.prod(tensor.shape)) >= min_elements:
                found.setdefault(tensor.id, tensor)
    return list(found.values())


def build_backward(graph: Graph, loss: Tensor, rewriter: Rewriter, *,
                   loss_scaling: float = 1.0, min_elements: int = 0,
                   registry: OpRegistry = REGISTRY) -> dict[str, Tensor]:
    """Build the gradient of ``loss`` for every trainable weight (module docstring) of at
    least ``min_elements`` elements. Returns weight id -> its gradient tensor, in the
    order the weights are first read."""
    if not is_differentiable(loss) or loss.shape is None or int(np.prod(loss.shape)) != 1:
        raise AutodiffError(f"the loss {loss.id!r} must be a floating-point tensor of one "
                            f"element; it is {loss.dtype} of shape {loss.shape}")
    forward = loss_forward_ops(graph, loss)
    weights = trainable_weights(graph, forward, min_elements)
    if not weights:
        raise AutodiffError(f"the loss {loss.id!r} depends on no trainable weight (a "
                            f"floating-point initializer): there is nothing to train")
    reached = _reached_by_weights(forward, {w.id for w in weights})
    partials: dict[str, list[Tensor]] = {loss.id: [
        RewriterGradientBuilder(graph, rewriter, loss.producer).constant(
            np.full(loss.shape, loss_scaling), loss.dtype)]}
    for op in reversed(forward):
        if not any(t.id in reached for t in op.inputs):
            continue
        out_grads = [_total(partials.pop(t.id, []), op, graph, rewriter) for t in op.outputs]
        if all(g is None for g in out_grads):
            continue
        rule = registry.gradient_rule(op)
        if rule is None:
            raise AutodiffError(
                f"op {op.debug_name()} ({op.type.name}) has no gradient rule, and the "
                f"gradient of a weight passes through it; its inputs "
                f"{[t.id for t in op.inputs if t.id in reached]} depend on trainable weights")
        builder = RewriterGradientBuilder(graph, rewriter, op)
        in_grads = list(rule(builder, op, out_grads))
        for index, tensor in op.input_map().items():
            grad = in_grads[index] if index < len(in_grads) else None
            if grad is None or tensor.id not in reached:
                continue
            _check_gradient(op, index, tensor, grad)
            partials.setdefault(tensor.id, []).append(grad)
    gradients = {}
    for weight in weights:
        total = _total(partials.get(weight.id, []), None, graph, rewriter)
        if total is not None:
            gradients[weight.id] = total
    return gradients


def _reached_by_weights(forward: Sequence[Op], weights: set[str]) -> set[str]:
    """The ids of the weights and of every differentiable tensor computed from them."""
    reached = set(weights)
    for op in forward:
        if any(t.id in reached for t in op.inputs):
            reached.update(t.id for t in op.outputs if is_differentiable(t))
    return reached


def _total(parts: list[Tensor], op: Op | None, graph: Graph,
           rewriter: Rewriter) -> Tensor | None:
    """One gradient from its partials: the partial itself, or their ``Sum`` (placed as the
    op whose output it is the gradient of, or as the first partial's producer)."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    like = op if op is not None else parts[0].producer
    return RewriterGradientBuilder(graph, rewriter, like).op("Sum", parts)[0]


def _check_gradient(op: Op, index: int, tensor: Tensor, grad: Tensor) -> None:
    if grad.shape != tensor.shape or grad.dtype != tensor.dtype:
        raise AutodiffError(
            f"the gradient rule of op {op.debug_name()} ({op.type.name}) gives input {index} "
            f"({tensor.id!r}, {tensor.dtype} {tensor.shape}) a gradient of "
            f"{grad.dtype} {grad.shape}")
