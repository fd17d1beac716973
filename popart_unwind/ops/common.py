"""Small helpers every op family's rules share: reading inputs, constants and axes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popart_unwind.errors import ShapeError, ShapeUndecided
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor, TensorType

#: Folds that compute (matmuls, reductions, gathers, tiling, random values) give up above
#: this many elements, so canonicalizing stays cheap. Folds that only fill, copy or map values
#: (ConstantOfShape, Range, Expand, Concat, elementwise ops) have no cap: their result is as
#: large as the constant the model itself states.
FOLD_MAX_ELEMENTS = 1 << 16


def constant_value(tensor: Tensor) -> np.ndarray | None:
    """The value of a Const tensor, or None (variables can change, so they never count)."""
    return tensor.data if tensor.tensor_type is TensorType.CONST else None


def input_shape(op: Op, index: int) -> tuple[int, ...]:
    """The known shape of input ``index``, or ShapeError naming the op and the input."""
    if not op.has_input(index):
        raise ShapeError(f"op {op.debug_name()} needs input {index}")
    tensor = op.input(index)
    if tensor.shape is None:
        raise ShapeError(f"op {op.debug_name()}: input {index} ({tensor.id!r}) has no shape yet")
    return tensor.shape


def constant_input(op: Op, index: int, what: str) -> np.ndarray:
    """The constant value of input ``index`` (e.g. Reshape's target shape), or ShapeError."""
    if not op.has_input(index):
        raise ShapeError(f"op {op.debug_name()} needs input {index} ({what})")
    value = constant_value(op.input(index))
    if value is None:
        raise ShapeUndecided(f"op {op.debug_name()}: {what} (input {index}, "
                             f"{op.input(index).id!r}) must be a constant to know the shape",
                             needs=op.input(index).id)
    return value


def normalize_axis(op: Op, axis: int, rank: int) -> int:
    """``axis`` in [0, rank), accepting ONNX's negative axes; ShapeError if out of range."""
    if not -rank <= axis < rank:
        raise ShapeError(f"op {op.debug_name()}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def unchanged(op: Op, source: Tensor) -> list[Tensor] | None:
    """A fold's answer for an op that changes nothing: ``[source]`` when output 0 is exactly
    ``source`` in dtype and shape (as inference set it), else None."""
    out = op.output(0)
    if out.shape is None or (out.dtype, out.shape) != (source.dtype, source.shape):
        return None
    return [source]


def operands_constant(op: Op, constants: Sequence[np.ndarray | None]) -> bool:
    """Every input after the data (shapes, axes, starts...) is present only as a constant."""
    return all(constants[i] is not None for i in op.input_map() if i > 0)


def ints(values: Sequence[int] | np.ndarray) -> list[int]:
    """An attribute's or a constant's values as a flat list of Python ints."""
    return [int(v) for v in np.asarray(values).reshape(-1)]


def small_constants(*arrays: np.ndarray | None) -> bool:
    """Every array is a known constant within ``FOLD_MAX_ELEMENTS``: a fold that computes
    may go ahead."""
    return all(a is not None and a.size <= FOLD_MAX_ELEMENTS for a in arrays)
