"""Projections: for one operation, which iteration index each axis of each tensor follows.

An operation is a loop nest over a *product space* of iterators; every axis of the result
and of each operand either follows one iterator or is fixed (at 0 when it broadcasts, at d
for an einsum digit). To derive them, every axis of the operation's final shapes gets a fresh
projection id, the operation's constraints are solved once more on their own, and the ground
pairs the solver meets say which axes iterate together and which broadcast. Since only this
operation's constraints take part, axes that other operations merely proved to be of equal
size never share an iterator here.
"""

from __future__ import annotations

from dataclasses import dataclass

from popart_unwind.errors import ShapeError
from popart_unwind.shapes.inference import ShapeInference
from popart_unwind.shapes.logic import Update
from popart_unwind.shapes.row import Dim, Row, fresh_id
from popart_unwind.shapes.shape import KINDS, Shape
from popart_unwind.shapes.solver import Solver

__all__ = ["AxisIndex", "Projections", "derive_projections"]


@dataclass(frozen=True)
class AxisIndex:
    """How one axis is indexed: by ``iterator``, or (when it is None) at index ``fixed``."""

    iterator: int | None
    fixed: int = 0

    def __str__(self) -> str:
        return f"i{self.iterator}" if self.iterator is not None else str(self.fixed)


@dataclass(frozen=True)
class Projections:
    """The loop nest of one operation; axes are listed in memory order (batch, output, input)."""

    product_space: tuple[int, ...]
    result: tuple[AxisIndex, ...]
    operands: tuple[tuple[AxisIndex, ...], ...]

    @property
    def reduced(self) -> tuple[int, ...]:
        """Iterators the result does not follow: the operation sums over them."""
        kept = {axis.iterator for axis in self.result}
        return tuple(i for i in range(len(self.product_space)) if i not in kept)


class _Classes:
    """Union-find over projection ids."""

    def __init__(self) -> None:
        self._parent: dict[int, int] = {}

    def find(self, p: int) -> int:
        root = p
        while self._parent.get(root, root) != root:
            root = self._parent[root]
        self._parent[p] = root
        return root

    def union(self, p: int, q: int) -> None:
        p, q = self.find(p), self.find(q)
        if p != q:
            self._parent[max(p, q)] = min(p, q)


def _tag(shape: Shape) -> Shape:
    """A copy of a known shape whose every axis carries a fresh projection id."""
    rows = {
        kind: Row(
            tuple(
                Dim(d.size, d.label, fresh_id())  # type: ignore[union-attr]
                for d in shape.row(kind).dims
            )
        )
        for kind in KINDS
    }
    return Shape(name=shape.name, **rows)


def derive_projections(update: Update, inference: ShapeInference | None = None) -> Projections:
    """The projections of ``update``; its shapes are read from ``inference`` when given,
    otherwise they must already be fully known."""
    shapes = (update.result, *update.logic.operands)
    if inference is not None:
        shapes = tuple(inference.final(s) for s in shapes)
    for shape in shapes:
        if not shape.is_known:
            raise ShapeError(
                f"{update.origin}: projections need known shapes, "
                f"{shape.describe()} is not (pass the ShapeInference)"
            )
    result, *operands = (_tag(s) for s in shapes)
    derived = update.logic.with_operands(*operands).derive(result, update.origin)
    solver = Solver()
    solver.add(*derived.constraints)
    solver.finalise()

    classes = _Classes()
    for p, q in solver.projection_pairs:
        classes.union(p, q)
    broadcast = {classes.find(p) for p in solver.broadcast_projs}
    fixed: dict[int, int] = {}
    for var, index in derived.fixed_indices:
        dim = solver.dim(var)
        assert isinstance(dim, Dim) and dim.proj_id is not None
        if index >= dim.size:
            raise ShapeError(
                f"{update.origin}: fixed index {index} is out of range for an "
                f"axis of size {dim.size}"
            )
        fixed[classes.find(dim.proj_id)] = index

    iterators: dict[int, int] = {}
    sizes: list[int] = []

    def index_of(d: Dim) -> AxisIndex:
        assert d.proj_id is not None
        group = classes.find(d.proj_id)
        if group in fixed:
            return AxisIndex(None, fixed[group])
        if group in broadcast:
            return AxisIndex(None, 0)
        if group not in iterators:
            iterators[group] = len(sizes)
            sizes.append(d.size)
        return AxisIndex(iterators[group])

    def indices(shape: Shape) -> tuple[AxisIndex, ...]:
        return tuple(index_of(d) for d in shape.memory_dims)  # type: ignore[arg-type]

    result_indices = indices(result)
    operand_indices = tuple(indices(s) for s in operands)
    return Projections(tuple(sizes), result_indices, operand_indices)
