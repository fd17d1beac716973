"""The plainest plan: every producer-less tensor mapped linearly, as if nothing could create it.

This is what PopART does for a tensor its creator search finds no creator for, applied to
all of them: a reference point below which no planner should fall.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.ir.ir import Ir
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops.layout_rule import planned_shape


def linear_plan(ir: Ir, target: TileMachine) -> dict[tuple[str, str], np.ndarray]:
    """(graph id, tensor id) -> tiles of every producer-less tensor, from PopART's rotating
    linear mapper restarted at tile 0, in graph order then tensor creation order."""
    target.reset()
    plan: dict[tuple[str, str], np.ndarray] = {}
    for graph in ir.graphs:
        for tensor in graph.producerless_tensors():
            plan[(graph.id, tensor.id)] = target.linear_tiles(planned_shape(tensor),
                                                              tensor.dtype)
    return plan
