"""Shape inference over a set of operations, and the one-call ``einsum_shape``."""

from __future__ import annotations

from collections.abc import Callable

from popart_unwind.errors import ShapeError
from popart_unwind.shapes.logic import Einsum, Update
from popart_unwind.shapes.row import Constraint, Row
from popart_unwind.shapes.shape import KINDS, Shape
from popart_unwind.shapes.solver import Solver

__all__ = ["ShapeInference", "einsum_shape"]


class ShapeInference:
    """Collects operations and infers their shapes; the order of :meth:`add` does not matter.

    :meth:`current` shows what is known so far; :meth:`finalise` then settles every variable
    (least upper bound, else 1 / no further axes) and :meth:`final` reads known shapes.
    """

    def __init__(self) -> None:
        self._solver = Solver()
        self._finalised = False

    def add(self, *updates: Update) -> None:
        """State the constraints of ``updates``; solving happens when shapes are read."""
        for update in updates:
            self._solver.add(*update.derive().constraints)
        self._finalised = False

    def require(self, *constraints: Constraint) -> None:
        """Add constraints beyond those of the operations (e.g. a rule stricter than
        broadcasting)."""
        self._solver.add(*constraints)
        self._finalised = False

    def current(self, shape: Shape) -> Shape:
        """``shape`` with everything inferred so far substituted (variables may remain)."""
        self._solver.solve()
        return self._map(shape, self._solver.row)

    def finalise(self) -> None:
        """Give every variable still unsolved a value (see :meth:`Solver.finalise`)."""
        self._solver.finalise()
        self._finalised = True

    def final(self, shape: Shape) -> Shape:
        """The fully known ``shape``, finalising first if needed."""
        if not self._finalised:
            self.finalise()
        return self._map(shape, self._solver.final_row)

    @staticmethod
    def _map(shape: Shape, read: Callable[[Row], Row]) -> Shape:
        rows = {kind: read(shape.row(kind)) for kind in KINDS}
        return Shape(name=shape.name, **rows)


def einsum_shape(spec: str, *shapes: Shape | str) -> Shape:
    """The result shape of einsum ``spec`` ("rhs1;rhs2 => lhs") applied to ``shapes``.

    Operands may be given as :class:`Shape` or as text such as ``"2|3->4"``.
    """
    operands = [s if isinstance(s, Shape) else Shape.parse(s) for s in shapes]
    if not 1 <= len(operands) <= 2:
        raise ShapeError(f"einsum takes one or two operands, {len(operands)} given")
    result = Shape.unknown("einsum")
    inference = ShapeInference()
    inference.add(Update(result, Einsum(spec, *operands), name=spec))
    return inference.final(result)
