"""What an op family's gradient rule is given, and what the rules share.

PopART builds a training step's backward pass in its IR (``Autodiff``): each forward op
contributes gradient ops for its inputs from the gradients of its outputs. Here each op
family states that rule beside its shape and layout rules (``OpDef.gradient``), as ONNX ops
with rules of their own, so the backward pass is planned, costed and laid out like the
forward. The walk over the graph, the sums of a tensor's gradient partials and the checks
of what a rule returns live in ``popart_unwind.training.autodiff``; a rule only builds ops
through the :class:`GradientBuilder` it is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from popart_unwind.ir.dtypes import ONNX_DTYPES, numpy_dtype
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor, TensorType

#: The element types a gradient flows through; integer and boolean tensors have none.
DIFFERENTIABLE_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


class GradientBuilder(Protocol):
    """Makes the ops and constants of one forward op's gradient (after PopART's grad ops,
    built as ONNX ops at the opset the front ends use). Each op inherits the forward op's
    placement (IPU, pipeline stage) as PopART's grad ops do."""

    def op(self, op_type: str, inputs: Sequence[Tensor | None],
           attributes: dict[str, Any] | None = None, *, num_outputs: int = 1) -> list[Tensor]:
        """A new ``ai.onnx`` op; its outputs, typed by its shape rule."""
        ...

    def constant(self, value: Any, dtype: str) -> Tensor:
        """A constant tensor holding ``value`` as ``dtype``."""
        ...


#: A gradient rule: from the builder, the forward op and the gradient of each of its
#: outputs (None where no gradient reaches an output), the gradient of each input, in input
#: order (None where the input has none: an integer input, an index, a shape). Each given
#: gradient has its input's shape and dtype; the autodiff walk checks it.
GradientRule = Callable[[GradientBuilder, Op, Sequence[Tensor | None]], Sequence[Tensor | None]]


def is_differentiable(tensor: Tensor | None) -> bool:
    return tensor is not None and tensor.dtype in DIFFERENTIABLE_DTYPES


def gets_gradient(tensor: Tensor | None) -> bool:
    """Whether a rule builds ``tensor``'s gradient: a floating-point tensor that is no
    constant (no weight reaches a constant, so its gradient would be dead ops: a constant
    exponent's ``log`` of the base, say)."""
    return is_differentiable(tensor) and tensor.tensor_type is not TensorType.CONST


def one(builder: GradientBuilder, op_type: str, inputs: Sequence[Tensor | None],
        attributes: dict[str, Any] | None = None) -> Tensor:
    """The single output of a new op."""
    return builder.op(op_type, inputs, attributes)[0]


def scalar(builder: GradientBuilder, value: float, like: Tensor) -> Tensor:
    """A 0-d constant of ``like``'s dtype."""
    return builder.constant(np.array(value, dtype=numpy_dtype(like.dtype)), like.dtype)


def int64s(builder: GradientBuilder, values: Sequence[int]) -> Tensor:
    """A 1-d int64 constant (axes, shapes, starts and ends of the ops that take them as
    inputs)."""
    return builder.constant(np.array(list(values), dtype=np.int64), "int64")


def zeros(builder: GradientBuilder, shape: Sequence[int], like: Tensor) -> Tensor:
    """Zeros of ``shape`` and ``like``'s dtype: a 0-d zero expanded (a broadcast, not a
    constant of the whole shape)."""
    return one(builder, "Expand", [scalar(builder, 0.0, like), int64s(builder, shape)])


def reshape(builder: GradientBuilder, tensor: Tensor, shape: Sequence[int]) -> Tensor:
    if tuple(tensor.shape) == tuple(shape):
        return tensor
    return one(builder, "Reshape", [tensor, int64s(builder, shape)])


def sum_to_shape(builder: GradientBuilder, grad: Tensor, shape: Sequence[int]) -> Tensor:
    """The gradient of a tensor of ``shape`` broadcast to ``grad``'s shape (numpy rules):
    ``grad`` summed over the axes the broadcast added or stretched, then reshaped."""
    shape = tuple(shape)
    grad_shape = tuple(grad.shape)
    if grad_shape == shape:
        return grad
    lead = len(grad_shape) - len(shape)
    axes = [a for a in range(len(grad_shape))
            if a < lead or (shape[a - lead] == 1 and grad_shape[a] != 1)]
    if axes:
        grad = one(builder, "ReduceSum", [grad, int64s(builder, axes)], {"keepdims": 1})
    return reshape(builder, grad, shape)


def transpose(builder: GradientBuilder, tensor: Tensor, perm: Sequence[int]) -> Tensor:
    if list(perm) == list(range(len(perm))):
        return tensor
    return one(builder, "Transpose", [tensor], {"perm": list(perm)})


def swap_last_two(builder: GradientBuilder, tensor: Tensor) -> Tensor:
    """``tensor`` with its last two axes swapped (a matmul operand's transpose)."""
    rank = len(tensor.shape)
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return transpose(builder, tensor, perm)


def shared_among_maxima(builder: GradientBuilder, x: Tensor, kept_max: Tensor,
                        kept_grad: Tensor, axes: Sequence[int]) -> Tensor:
    """The gradient of a maximum (or minimum) over ``axes`` of ``x``: ``kept_grad`` (the
    result's gradient, reduced axes kept as 1) routed to the elements equal to
    ``kept_max``, split evenly among elements tied for it (so the sum is kept)."""
    mask = one(builder, "Cast", [one(builder, "Equal", [x, kept_max])],
               {"to": ONNX_DTYPES[x.dtype]})
    count = one(builder, "ReduceSum", [mask, int64s(builder, axes)], {"keepdims": 1})
    return one(builder, "Mul", [one(builder, "Div", [mask, count]), kept_grad])
