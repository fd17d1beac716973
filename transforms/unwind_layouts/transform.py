"""UnwindLayouts: the layout planner as a transform of the pipeline (docs/planner.md)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.machine import TileMachine, TileTarget

from ..base import ALL_CONDITIONS, Transform
from ..conditions import Condition
from ..registry import register
from .plan import plan_ir

if TYPE_CHECKING:
    from popart_unwind.ir import Graph
    from popart_unwind.rewrite import Rewriter


def default_target() -> TileMachine:
    """The IPU Model with its defaults (a Mk2 GC200)."""
    return TileTarget()


@register
@dataclasses.dataclass(frozen=True)
class UnwindLayouts(Transform):
    """Plans the whole Ir's layouts once and writes them back as tile mappings.

    Whatever graph it is handed, it plans every graph of that graph's Ir (layouts cross call
    boundaries). It only writes ``tile_mapping`` on producer-less tensors and call outputs,
    so it preserves every condition; it needs every shape. True iff a mapping changed.
    """

    id = 5
    name = "UnwindLayouts"
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = ALL_CONDITIONS

    #: The machine planned for.
    target: TileMachine = dataclasses.field(default_factory=default_target)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        return plan_ir(graph.ir, self.target, registry=self.op_registry,
                       rewriter=rewriter).changed
