"""Plans' start tiles: a start tile relabels the tiles of a plan, so every layout it wants
and every exchange it causes are those of the plan at tile 0 moved round the machine
(checked on matmuls and convolutions of every pass); the planner's rotation starts each
plan where the one before ended and keeps a joint layer's passes together."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from popart_unwind.transforms import plan_ir
from popart_unwind.transforms.unwind_layouts.start_tiles import planner_plans
from test_conv_layout import conv_ir, convolutions, the_op
from test_matmul_plan_choice import training_step

from popart_unwind.cost import evaluate
from popart_unwind.errors import TargetError
from popart_unwind.layers import choose_plans
from popart_unwind.machine.interface import (
    MatmulPartition,
    MatmulPlan,
    plan_operand_readers,
    plan_operand_tiles,
)
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.conv import ConvRule, conv_geometry
from popart_unwind.ops.linalg import op_key
from popart_unwind.target import IpuModel, TileTarget

TILES = 32
TARGET = TileTarget(IpuModel(tiles_per_ipu=TILES))
AXES = ("mkn", "mnk", "kmn", "knm", "nmk", "nkm")


def moved(tiles: np.ndarray, start: int) -> np.ndarray:
    return (np.asarray(tiles, np.int64) + start) % TILES


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=4, max_size=4),
       st.lists(st.integers(1, 3), min_size=4, max_size=4), st.sampled_from(AXES),
       st.integers(1, 3 * TILES), st.integers(0, 2**31))
def test_a_start_tile_moves_layouts_and_exchange_round_the_machine(cube, splits, axes, start,
                                                                   seed):
    splits = [min(s, size) for s, size in zip(splits, cube, strict=True)]
    assume(MatmulPartition(*splits).tiles_used <= TILES)
    plan = MatmulPlan(tuple(cube), MatmulPartition(*splits), axes)
    later = plan.starting_at(start)
    rng = np.random.default_rng(seed)
    for operand in ("lhs", "rhs", "output"):
        at_zero = plan_operand_tiles(TARGET, plan, operand, "float32")
        assert np.array_equal(plan_operand_tiles(TARGET, later, operand, "float32"),
                              moved(at_zero, start))
        # what the tiles receive moves with the plan by whole super tiles (an odd start
        # splits each pair of tiles that shares an exchange bus: compare it with tile 1)
        first = start % 2
        layout = rng.integers(0, TILES, at_zero.size)
        need = plan_operand_readers(TARGET, plan.starting_at(first), operand, "float32",
                                    moved(layout, first))
        need_later = plan_operand_readers(TARGET, later, operand, "float32",
                                          moved(layout, start))
        for values, values_later in zip(need.arrays(), need_later.arrays(), strict=True):
            assert np.array_equal(values_later, np.roll(values, start - first))


def test_an_odd_start_tile_loses_the_shared_exchange_buses():
    """The RHS of an even row split reaches each pair of its readers together only when
    the pairs are super tiles: a plan started on an odd tile receives it in full."""
    plan = MatmulPlan((1, 4, 8, 2), MatmulPartition(1, 2, 1, 1))
    layout = np.full(16, 5)  # the whole RHS on a tile outside the plan
    even = plan_operand_readers(TARGET, plan.starting_at(2), "rhs", "float32", layout)
    odd = plan_operand_readers(TARGET, plan.starting_at(1), "rhs", "float32", layout)
    assert np.array_equal(np.flatnonzero(even.received_bytes), [2, 3])
    assert np.array_equal(np.flatnonzero(odd.received_bytes), [1, 2])
    assert even.received_bytes.sum() * 2 == odd.received_bytes.sum() == 2 * 16 * 4


@settings(max_examples=25, deadline=None)
@given(convolutions(), st.sampled_from(AXES), st.integers(1, 2 * TILES), st.integers(0, 2**31))
def test_a_convolution_started_later_reads_its_data_as_at_tile_0_moved(conv, axes, start, seed):
    x_shape, w_shape, attributes = conv
    op = the_op(conv_ir(x_shape, w_shape, attributes))
    geometry = conv_geometry(op)
    size = dict(zip(axes, geometry.dims[1:], strict=True))
    cube = (geometry.dims[0], size["m"], size["k"], size["n"])
    plan = MatmulPlan(cube, TARGET.matmul_plan(*cube, "float32"), axes)
    rule, later = ConvRule(), plan.starting_at(start)
    x = np.random.default_rng(seed).integers(0, TILES, int(np.prod(x_shape)))
    need = rule.data_need(geometry, x, TARGET, plan)
    need_later = rule.data_need(geometry, moved(x, start), TARGET, later)
    for values, values_later in zip(need.arrays(), need_later.arrays(), strict=True):
        assert np.array_equal(values_later, np.roll(values, start))
    assert np.array_equal(rule.data_tiles(geometry, TARGET, later),
                          moved(rule.data_tiles(geometry, TARGET, plan), start))


def test_a_negative_start_tile_is_refused():
    try:
        MatmulPlan((1, 2, 2, 2), MatmulPartition(1, 1, 1, 1), start_tile=-1)
    except TargetError as error:
        assert "start tile" in str(error)
    else:
        raise AssertionError("a negative start tile was accepted")


def test_rotation_starts_each_plan_where_the_last_ended_and_keeps_layers_together():
    ir = training_step((24, 40, 16, 8))
    target = TileTarget(IpuModel(tiles_per_ipu=1024))  # more tiles than any plan uses
    plans = planner_plans(ir, target, REGISTRY, "with_layouts", rotate=True)
    unrotated = choose_plans(ir, target, REGISTRY, "with_layouts")
    ops = [op for op in ir.main_graph.schedule() if op.type.name == "MatMul"]
    assert set(plans) == {op_key(op) for op in ops}  # every matmul, planned alone or not
    layer_start: dict[tuple, int] = {}
    expected = 0
    for op in ops:
        plan = plans[op_key(op)]
        assert dataclasses.replace(plan, start_tile=0) == unrotated.get(
            op_key(op), dataclasses.replace(plan, start_tile=0))
        layer = op.name[-1]  # fwd0, bwd0, wu0: one layer per index
        if plan.joint and layer in layer_start:
            assert plan.start_tile == layer_start[layer]
            continue
        assert plan.start_tile == expected
        layer_start[layer] = plan.start_tile
        expected = (expected + plan.partition.tiles_used) % target.num_tiles
    assert len({plan.start_tile for plan in plans.values()}) > 1
    assert plans == planner_plans(ir, target, REGISTRY, "with_layouts", rotate=True)


def test_a_rotated_plan_is_costed_as_it_is_laid_out():
    """The cost model follows each op's start tile: planned with rotation, every matmul's
    recorded plan starts where the planner put it, and the weights of a joint layer still
    leave its update nothing to move."""
    ir = training_step((64, 48, 32))
    ir.options = dataclasses.replace(ir.options, rotate_plan_start_tiles=True)
    # the IPU Model's former figures (compute at the peak rate alone, a 90-cycle sync, no
    # shared exchange buses), under which the first layer is planned jointly
    target = TileTarget(IpuModel(tiles_per_ipu=1024, vertex_costs=False, sync_cycles=90,
                                 tiles_per_exchange_bus=1))
    plan = plan_ir(ir, target, write=False)
    assert any(p.start_tile for p in plan.op_plans.values())
    cost = evaluate(ir, target, {(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors},
                    op_plans=plan.op_plans)
    ops = {op.id: op for op in ir.main_graph.ops}
    for row in cost.ops:
        if row.type == "MatMul":
            recorded = REGISTRY.layout_rule(ops[row.op_id]).plan_record(
                ops[row.op_id], target.with_plans(plan.op_plans))
            assert recorded["start_tile"] == plan.op_plans[("", row.op_id)].start_tile
    layers = {index: [plan.op_plans[op_key(op)] for op in ops.values()
                      if op.type.name == "MatMul" and op.name.endswith(str(index))]
              for index in (0, 1)}
    # layer 0's passes share a partition and so a start; its update moves nothing
    assert all(p.joint for p in layers[0]) and len({p.start_tile for p in layers[0]}) == 1
    [update] = [row for row in cost.ops if row.name == "update0"]
    assert update.avoidable_bytes == 0
    # layer 1's passes are planned separately, each from where the one before ended
    assert not any(p.joint for p in layers[1]) and len({p.start_tile for p in layers[1]}) == 3
