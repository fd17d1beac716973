"""Shape logic of operations: the constraints each kind of operation states.

Every logic holds its operand shapes and derives, for a given result shape, constraints with
fresh variables (einsum labels, row templates), so deriving twice never shares variables:
projections rely on that. Broadcasting is an inequality ``result row >= operand row``; the
result side is ``cur`` because an operand may be smaller than expected, a result may not.
"""

from __future__ import annotations

from dataclasses import dataclass

from popart_unwind.errors import ShapeError
from popart_unwind.shapes.einsum import einsum_constraints
from popart_unwind.shapes.row import Constraint, DimLike, RowEq, RowIneq, RowSlice
from popart_unwind.shapes.shape import KINDS, Shape

__all__ = [
    "BatchSlice",
    "Compose",
    "Derived",
    "Einsum",
    "Logic",
    "Permute",
    "PointwiseBin",
    "PointwiseUn",
    "Terminal",
    "Transpose",
    "Update",
]


@dataclass(frozen=True)
class Derived:
    """An operation's constraints, and the axes (of einsum specs) read at a fixed index."""

    constraints: tuple[Constraint, ...]
    fixed_indices: tuple[tuple[DimLike, int], ...] = ()


def _broadcast(
    result: Shape, result_kind: str, operand: Shape, operand_kind: str, origin: str
) -> RowIneq:
    return RowIneq(
        result.row(result_kind),
        operand.row(operand_kind),
        f"{origin}: {result_kind} of {result.describe()} >= {operand_kind} of {operand.describe()}",
    )


@dataclass(frozen=True)
class PointwiseBin:
    """NumPy-style broadcast of two operands, row by row (``a + b``)."""

    left: Shape
    right: Shape

    @property
    def operands(self) -> tuple[Shape, ...]:
        return (self.left, self.right)

    def with_operands(self, left: Shape, right: Shape) -> PointwiseBin:
        return PointwiseBin(left, right)

    def derive(self, result: Shape, origin: str) -> Derived:
        return Derived(
            tuple(
                _broadcast(result, kind, operand, kind, origin)
                for operand in self.operands
                for kind in KINDS
            )
        )


@dataclass(frozen=True)
class PointwiseUn:
    """An elementwise function of one operand: the shape is kept (or broadcast)."""

    operand: Shape

    @property
    def operands(self) -> tuple[Shape, ...]:
        return (self.operand,)

    def with_operands(self, operand: Shape) -> PointwiseUn:
        return PointwiseUn(operand)

    def derive(self, result: Shape, origin: str) -> Derived:
        return Derived(
            tuple(_broadcast(result, kind, self.operand, kind, origin) for kind in KINDS)
        )


@dataclass(frozen=True)
class Compose:
    """``left(right(x))``: the outputs of ``right`` meet the inputs of ``left`` (a matmul).

    The result takes its inputs from ``right`` and its outputs from ``left``; batch axes
    broadcast; the outputs of ``right`` broadcast against the inputs of ``left``.
    """

    left: Shape
    right: Shape

    @property
    def operands(self) -> tuple[Shape, ...]:
        return (self.left, self.right)

    def with_operands(self, left: Shape, right: Shape) -> Compose:
        return Compose(left, right)

    def derive(self, result: Shape, origin: str) -> Derived:
        return Derived(
            (
                _broadcast(result, "batch", self.left, "batch", origin),
                _broadcast(result, "batch", self.right, "batch", origin),
                _broadcast(result, "input", self.right, "input", origin),
                _broadcast(result, "output", self.left, "output", origin),
                _broadcast(self.left, "input", self.right, "output", origin),
            )
        )


@dataclass(frozen=True)
class Einsum:
    """An einsum spec over one or two operands, e.g. ``"i->o; o->k => i->k"``."""

    spec: str
    left: Shape
    right: Shape | None = None

    @property
    def operands(self) -> tuple[Shape, ...]:
        return (self.left,) if self.right is None else (self.left, self.right)

    def with_operands(self, left: Shape, right: Shape | None = None) -> Einsum:
        return Einsum(self.spec, left, right)

    def derive(self, result: Shape, origin: str) -> Derived:
        return Derived(*einsum_constraints(self.spec, result, self.operands, origin))


@dataclass(frozen=True)
class Permute:
    """Rearranges the axes of one operand by a one-operand einsum spec, e.g. ``"ij => ji"``."""

    spec: str
    operand: Shape

    @property
    def operands(self) -> tuple[Shape, ...]:
        return (self.operand,)

    def with_operands(self, operand: Shape) -> Permute:
        return Permute(self.spec, operand)

    def derive(self, result: Shape, origin: str) -> Derived:
        if ";" in self.spec:
            raise ShapeError(f"permute spec {self.spec!r} must have a single operand ({origin})")
        return Einsum(self.spec, self.operand).derive(result, origin)


@dataclass(frozen=True)
class Transpose:
    """Swaps the input and output rows; batch axes are kept."""

    operand: Shape

    @property
    def operands(self) -> tuple[Shape, ...]:
        return (self.operand,)

    def with_operands(self, operand: Shape) -> Transpose:
        return Transpose(operand)

    def derive(self, result: Shape, origin: str) -> Derived:
        return Derived(
            (
                _broadcast(result, "batch", self.operand, "batch", origin),
                _broadcast(result, "input", self.operand, "output", origin),
                _broadcast(result, "output", self.operand, "input", origin),
            )
        )


@dataclass(frozen=True)
class BatchSlice:
    """Takes index ``index`` of the leftmost batch axis, which disappears from the result."""

    operand: Shape
    index: int = 0

    @property
    def operands(self) -> tuple[Shape, ...]:
        return (self.operand,)

    def with_operands(self, operand: Shape) -> BatchSlice:
        return BatchSlice(operand, self.index)

    def derive(self, result: Shape, origin: str) -> Derived:
        sliced = RowSlice(
            self.operand.batch,
            result.batch,
            f"{origin}: batch of {result.describe()} is the batch of "
            f"{self.operand.describe()} without its leftmost axis",
        )
        batch = self.operand.batch
        leftmost = ((batch.dims[0], self.index),) if batch.dims and not batch.is_open else ()
        return Derived(
            (
                sliced,
                _broadcast(result, "input", self.operand, "input", origin),
                _broadcast(result, "output", self.operand, "output", origin),
            ),
            leftmost,
        )


@dataclass(frozen=True)
class Terminal:
    """A tensor with no operands whose shape is fixed (or constrained) by how it is made.

    ``shape`` may hold variables and ``Total_elems`` constraints, e.g. data of known length
    but unknown layout: ``Terminal(Shape(output=Row((), RowVar.fresh(), total_elems=24)))``.
    """

    shape: Shape

    @property
    def operands(self) -> tuple[Shape, ...]:
        return ()

    def with_operands(self) -> Terminal:
        return self

    def derive(self, result: Shape, origin: str) -> Derived:
        return Derived(
            tuple(
                RowEq(
                    result.row(kind),
                    self.shape.row(kind),
                    f"{origin}: {kind} of {result.describe()} is fixed",
                )
                for kind in KINDS
            )
        )


Logic = PointwiseBin | PointwiseUn | Compose | Einsum | Permute | Transpose | BatchSlice | Terminal


@dataclass(frozen=True)
class Update:
    """One operation instance: its result shape and the logic tying it to its operands."""

    result: Shape
    logic: Logic
    name: str = ""

    @property
    def origin(self) -> str:
        """How messages name this operation."""
        who = self.name or self.result.name or str(self.result)
        return f"{type(self.logic).__name__} '{who}'"

    def derive(self) -> Derived:
        return self.logic.derive(self.result, self.origin)
