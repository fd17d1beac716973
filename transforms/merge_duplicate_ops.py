"""MergeDuplicateOps: ops that compute the same thing from the same tensors become one."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import ALL_CONDITIONS, Transform
from .conditions import is_inplace
from .registry import register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op
    from popart_unwind.rewrite import Rewriter


@register
@dataclasses.dataclass(frozen=True)
class MergeDuplicateOps(Transform):
    """In every graph, an op is a duplicate of an earlier one when both have the same type,
    equal attributes (numpy values compared by value), equal placement attributes, the
    same input tensors at the same indices and the same output indices; it must have no
    side effects, work in place on nothing, call no graph and draw no random numbers (its
    OpDef says ``random``: PopART tells such ops apart by their seed inputs, which our IR
    does not model; ops the registry does not know count as having side effects).

    Of two duplicates the lowest-id op stays, unless only the other one produces a graph
    output (graph output ids are interfaces and keep their names; if both do, neither
    goes). Walking the schedule, each op is compared after its producers were merged, so
    a chain of duplicates collapses in one application.

    Preserves every condition: no op is created; consumers move to an op with the same
    placement (so NO_IMPLICIT_COPY stays true); the rest is removal.
    """

    id = 4
    name = "MergeDuplicateOps"
    preserves = ALL_CONDITIONS

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        changed = False
        for each in graph.ir.graphs:
            # Keeping a later duplicate (it names a graph output) re-points consumers the
            # walk has already keyed, so walk again until a pass merges nothing.
            while self._merge_in(each, rewriter):
                changed = True
        return changed

    def _merge_in(self, graph: Graph, rewriter: Rewriter) -> bool:
        survivors: dict[tuple, Op] = {}
        changed = False
        for op in graph.schedule():
            key = self._key(op)
            if key is None:
                continue
            earlier = survivors.get(key)
            if earlier is None:
                survivors[key] = op
                continue
            keep, drop = _choose(earlier, op)
            if keep is None:
                continue
            for index, tensor in drop.output_map().items():
                rewriter.replace_all_uses(tensor, keep.output(index))
            rewriter.erase_op(drop)
            survivors[key] = keep
            changed = True
        return changed

    def _key(self, op: Op) -> tuple | None:
        """What makes two ops interchangeable, as a hashable value; None if ``op`` must stay."""
        if not op.outputs or self.op_registry.draws_random(op) or op.called_graphs() \
                or self.op_registry.has_side_effects(op) or is_inplace(op, self.op_registry):
            return None
        attributes = _frozen(op.attributes)
        if attributes is None:
            return None
        return (op.type, attributes, tuple(op.settings.placement().items()),
                tuple((index, t.id) for index, t in op.input_map().items()),
                tuple(op.output_map()))


def _choose(earlier: Op, later: Op) -> tuple[Op | None, Op | None]:
    """(kept, dropped) of two duplicates, or (None, None) when both produce graph outputs."""
    earlier_out = any(t.is_graph_output() for t in earlier.outputs)
    later_out = any(t.is_graph_output() for t in later.outputs)
    if earlier_out and later_out:
        return None, None
    if earlier_out != later_out:
        return (earlier, later) if earlier_out else (later, earlier)
    return (earlier, later) if earlier.id < later.id else (later, earlier)


class _NotComparable(Exception):
    """An attribute value that cannot be compared by value (e.g. a Python object)."""


def _frozen(value: Any) -> tuple | None:
    """A hashable, type-tagged form of an attribute value that is equal exactly when the
    values are (``True`` is not ``1``; NaN equals NaN; arrays by dtype, shape and bytes).
    None if some part cannot be compared by value."""
    try:
        return _freeze(value)
    except _NotComparable:
        return None


def _freeze(value: Any) -> tuple:
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _NotComparable
        contiguous = np.ascontiguousarray(value)
        return ("ndarray", contiguous.dtype.str, value.shape, contiguous.tobytes())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, str | bytes) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, list | tuple):
        return ("seq", tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _freeze(v)) for k, v in value.items())))
    raise _NotComparable
