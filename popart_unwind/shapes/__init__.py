"""Shape inference: three-row shapes, a declarative constraint solver, einsum, projections.

Entry points: :func:`einsum_shape`, :func:`broadcast_shapes`, :func:`matmul_shape`,
:func:`broadcast_projections`; behind them :class:`ShapeInference` over :class:`Update`
(an operation's result shape and logic), the :class:`Solver`, and :func:`derive_projections`.
See docs/shapes.md.
"""

from popart_unwind.shapes.inference import ShapeInference, einsum_shape
from popart_unwind.shapes.logic import (
    BatchSlice,
    Compose,
    Derived,
    Einsum,
    Logic,
    Permute,
    PointwiseBin,
    PointwiseUn,
    Terminal,
    Transpose,
    Update,
)
from popart_unwind.shapes.numpy_compat import (
    broadcast_projections,
    broadcast_shapes,
    matmul_shape,
)
from popart_unwind.shapes.projections import AxisIndex, Projections, derive_projections
from popart_unwind.shapes.row import (
    Constraint,
    Dim,
    DimEq,
    DimIneq,
    DimVar,
    Row,
    RowEq,
    RowIneq,
    RowSlice,
    RowVar,
    TotalElems,
)
from popart_unwind.shapes.shape import KINDS, Shape
from popart_unwind.shapes.solver import Solver

__all__ = [
    "KINDS",
    "AxisIndex",
    "BatchSlice",
    "Compose",
    "Constraint",
    "Derived",
    "Dim",
    "DimEq",
    "DimIneq",
    "DimVar",
    "Einsum",
    "Logic",
    "Permute",
    "PointwiseBin",
    "PointwiseUn",
    "Projections",
    "Row",
    "RowEq",
    "RowIneq",
    "RowSlice",
    "RowVar",
    "Shape",
    "ShapeInference",
    "Solver",
    "Terminal",
    "TotalElems",
    "Transpose",
    "Update",
    "broadcast_projections",
    "broadcast_shapes",
    "derive_projections",
    "einsum_shape",
    "matmul_shape",
]
