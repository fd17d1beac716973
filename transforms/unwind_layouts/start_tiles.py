"""The matmul and convolution plans the planner lays out with, and where each starts.

The layers' plans are chosen in ``popart_unwind.layers``. Every plan starts at tile 0, as
Poplibs starts them without dithering; with ``SessionOptions.rotate_plan_start_tiles`` the
planner starts each where the one before it ended instead, as PopART's linear mapper
rotates its mappings, so that the plans using few tiles, and what is laid out where they
lie, do not all stack on the lowest tiles.
"""

from __future__ import annotations

from popart_unwind.ir import Ir
from popart_unwind.layers import LayerKeys, OpPlans, layer_plans, with_recomputed
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops.linalg import op_key
from popart_unwind.ops.registry import OpRegistry


def planner_plans(ir: Ir, target: TileMachine, registry: OpRegistry,
                  how: str = "with_layouts", rotate: bool = False) -> OpPlans:
    """Each layer's plans chosen as ``how`` says (``layers.choose_plans``). With ``rotate``,
    every matmul and convolution gets a plan, each starting where the one before it ended
    (:func:`rotated_start_tiles`); recomputed ops then take their originals' plans."""
    plans, layers = layer_plans(ir, target, registry, how)
    plans = rotated_start_tiles(ir, target, registry, plans, layers) if rotate else plans
    return with_recomputed(ir, plans)


def rotated_start_tiles(ir: Ir, target: TileMachine, registry: OpRegistry, plans: OpPlans,
                        layers: list[LayerKeys]) -> OpPlans:
    """Every planned op's plan (``plans``, else its plan alone), graph by graph in schedule
    order, starting where the previous plan's tiles ended, as PopART's linear mapper
    rotates its mappings; the passes of one joint layer (each entry of ``layers`` lists
    their keys) share the start of the first, so that their layouts still agree."""
    planned = target.with_plans(plans)
    shared = {op: index for index, keys in enumerate(layers) for op in keys}
    starts: dict[int, int] = {}  # layer index -> its start
    rotated: OpPlans = {}
    next_start = 0
    for graph in ir.graphs:
        for op in graph.schedule():
            rule = registry.layout_rule(op)
            if rule.plan_record(op, planned) is None:
                continue
            plan = rule.plan(op, planned)
            layer = shared.get(op_key(op)) if plan.joint else None
            if layer is not None and layer in starts:
                rotated[op_key(op)] = plan.starting_at(starts[layer])
                continue
            rotated[op_key(op)] = plan.starting_at(next_start)
            if layer is not None:
                starts[layer] = next_start
            next_start = (next_start + plan.partition.tiles_used) % target.num_tiles
    return rotated
