"""NumPy/ONNX shape rules computed by the shape solver: broadcasting, matmul, projections.

A plain NumPy shape becomes a :class:`Shape` with every axis in the output row, so NumPy
broadcasting is exactly the solver's row inequality. For matmul the stacked leading axes go
to the batch row and the last two to the output row (rows) and the input row (columns): the
memory order batch, output, input is then NumPy's order and a matmul is :class:`Compose`,
the columns of the left operand meeting the rows of the right one.
"""

from __future__ import annotations

from collections.abc import Sequence

from popart_unwind.errors import ShapeError
from popart_unwind.shapes.inference import ShapeInference
from popart_unwind.shapes.logic import Compose, PointwiseUn, Update
from popart_unwind.shapes.projections import derive_projections
from popart_unwind.shapes.row import RowEq
from popart_unwind.shapes.shape import Shape

__all__ = ["broadcast_projections", "broadcast_shapes", "matmul_shape"]

NumpyShape = Sequence[int] | int


def _dims(shape: NumpyShape) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def broadcast_shapes(*shapes: NumpyShape) -> tuple[int, ...]:
    """``numpy.broadcast_shapes``: the result row must be >= every operand's row."""
    result = Shape.unknown("broadcast result")
    inference = ShapeInference()
    for position, shape in enumerate(shapes):
        operand = Shape(output=_dims(shape), name=f"operand {position}")
        inference.add(Update(result, PointwiseUn(operand), name="broadcast_shapes"))
    return inference.final(result).sizes


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """``numpy.matmul``'s result shape; 1-D operands lose their promoted axis as in NumPy."""
    a, b = tuple(a), tuple(b)
    for position, dims in enumerate((a, b)):
        if not dims:
            raise ShapeError(f"matmul: operand {position} is a scalar, it needs an axis")
    left = Shape(batch=a[:-2], input=a[-1:], output=a[-2:-1], name="left")
    right = (
        Shape(output=b, name="right")
        if len(b) == 1
        else Shape(batch=b[:-2], input=b[-1:], output=b[-2:-1], name="right")
    )
    result = Shape.unknown("matmul result")
    inference = ShapeInference()
    inference.add(Update(result, Compose(left, right), name="matmul"))
    inference.require(
        RowEq(
            left.input, right.output, "matmul: NumPy contracts equal sizes only (no broadcasting)"
        )
    )
    return inference.final(result).sizes


def broadcast_projections(
    out_shape: Sequence[int], *in_shapes: NumpyShape
) -> list[tuple[int | None, ...]]:
    """For each input broadcast to ``out_shape``: per axis, the output axis it follows, or
    None if it is broadcast (read at index 0). E.g. ``(20, 20, 6, 3), (6, 1)`` gives
    ``[(2, None)]``."""
    out = Shape(output=tuple(out_shape), name="output")
    found = []
    for position, shape in enumerate(in_shapes):
        operand = Shape(output=_dims(shape), name=f"input {position}")
        projections = derive_projections(Update(out, PointwiseUn(operand), name="broadcast"))
        axis_of = {axis.iterator: k for k, axis in enumerate(projections.result)}
        found.append(
            tuple(
                None if axis.iterator is None else axis_of[axis.iterator]
                for axis in projections.operands[0]
            )
        )
    return found
