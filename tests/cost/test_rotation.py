"""Where the cost walk's linear mapper stands at each op (``cost.rotation``): the replay
gives the walk's own rotation before every op, and the planner lays out a lookup's result
(mapped linearly) on the tiles the walk gives it, wherever the sinks' own elements left
the planner's rotation."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from popart_unwind.transforms import plan_ir

from popart_unwind.cost import computed_layouts
from popart_unwind.cost.rotation import linear_rotation_starts
from popart_unwind.cost.walk import CostWalk
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir.ir import Ir
from popart_unwind.ops import REGISTRY
from popart_unwind.target import IpuModel, TileTarget

TILES = 16
ROWS, WIDTH, VOCAB = 3, 8, 5
STEPS = ("lookup", "relu", "scale", "matmul", "row_sum", "own")


def small_target() -> TileTarget:
    """Few tiles, few bytes a tile: every linear mapping spreads and moves the rotation."""
    return TileTarget(IpuModel(tiles_per_ipu=TILES, min_bytes_per_tile=16))


def build(steps: list[str]) -> Ir:
    """Token lookups (Gather: its result mapped linearly) between modelled ops."""
    b = Builder()
    ids = b.add_input_tensor("int32", [ROWS], "ids")

    def weight(shape: tuple[int, ...], name: str) -> str:
        return b.add_initialized_input_tensor(np.ones(shape, np.float32), name)

    x = b.op("Gather", [weight((VOCAB, WIDTH), "table"), ids])
    for n, step in enumerate(steps):
        if step == "lookup":
            x = b.op("Add", [x, b.op("Gather", [weight((VOCAB, WIDTH), f"table{n}"), ids])])
        elif step == "relu":
            x = b.op("Relu", [x])
        elif step == "scale":
            x = b.op("Mul", [x, weight((WIDTH,), f"scale{n}")])
        elif step == "matmul":
            x = b.op("MatMul", [x, weight((WIDTH, WIDTH), f"w{n}")])
        elif step == "row_sum":
            x = b.op("Add", [x, b.op("ReduceSum", [x], {"axes": [1], "keepdims": 1})])
        else:  # a weight read by nothing a rule ties it to: its elements are its own
            b.add_output_tensor(b.op("Relu", [weight((VOCAB * WIDTH,), f"own{n}")]))
    b.add_output_tensor(x)
    return b.ir()


class _Watching(CostWalk):
    """The cost walk, noting where its linear mapper stands before each op."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: dict[tuple[str, int], int] = {}

    def run_op(self, op) -> None:
        self.seen[(op.graph.id, op.id)] = self.target.next_start_tile
        super().run_op(op)


def planned(ir: Ir, target: TileTarget):
    plan = plan_ir(ir, target, write=False)
    return {(p.graph_id, p.tensor_id): np.asarray(p.tiles) for p in plan.tensors}, plan


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(STEPS), max_size=8))
def test_the_replay_gives_the_walks_rotation_at_every_op(steps):
    ir = build(steps)
    target = small_target()
    mappings, plan = planned(ir, target)
    walk = _Watching(ir, target.with_plans(plan.op_plans), mappings, REGISTRY,
                     ir.options.unwind_valuations)
    walk.report()
    assert linear_rotation_starts(ir, target) == walk.seen
    # the lookups move the rotation: the law is not about a rotation that stays at 0
    lookups = [op for op in ir.main_graph.schedule() if op.is_type("Gather")]
    assert walk.seen[(ir.main_graph.id, lookups[-1].id)] > 0 or len(lookups) == 1


def test_a_scale_is_planned_where_the_walk_puts_the_lookup_it_multiplies():
    # the weights of its own elements (mapped by the planner's rotation first) no longer
    # shift where the planner thinks the second lookup's result lies
    ir = build(["own", "own", "lookup", "scale"])
    target = small_target()
    mappings, plan = planned(ir, target)
    main = ir.main_graph
    scale = next(t for t in main.tensors if t.id.startswith("scale"))
    product = scale.consumers[0]
    full = next(t for t in product.inputs if t is not scale)
    walk = computed_layouts(ir, target, mappings, {full.id}, plan.op_plans)[full.id]
    readers = walk.reshape(ROWS, WIDTH)
    held = mappings[(main.id, scale.id)].reshape(-1)
    # every element of the scale lies on a tile that reads it in the walk
    assert all(held[c] in set(readers[:, c].tolist()) for c in range(WIDTH))
