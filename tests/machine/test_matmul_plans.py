"""Matmul plans as decisions: each partition's cost against the documented terms, candidates
against brute force over every partition, the passes of a layer sharing one cube, and
Poplibs' choice between a joint plan and separate ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import all_partitions, cost_models, cost_oracle, cycles_oracle

from popart_unwind.errors import TargetError
from popart_unwind.layers.plan_options import (
    CANONICAL_AXES,
    PassOp,
    joint_plans,
    poplibs_plans,
    separate_plans,
)
from popart_unwind.machine import MatmulCost, MatmulPartition, MatmulPlan, TileTarget

sizes = st.integers(1, 7)
AXES = ("mkn", "mnk", "knm", "kmn", "nmk", "nkm")


def pass_dims(cube, axes):
    size = dict(zip("mkn", cube[1:], strict=True))
    return (cube[0], *(size[a] for a in axes))


def pass_partition(partition: MatmulPartition, axes: str) -> MatmulPartition:
    split = {"m": partition.rows, "k": partition.inner, "n": partition.cols}
    return MatmulPartition(partition.groups, *(split[a] for a in axes))


@settings(max_examples=120, deadline=None)
@given(G=sizes, M=sizes, K=sizes, N=sizes, data=st.data())
def test_partition_cost_is_the_documented_sum(G, M, K, N, data):
    tiles = data.draw(st.integers(1, 30))
    model = data.draw(cost_models(tiles))
    partition = data.draw(st.sampled_from(list(all_partitions(G, M, K, N, tiles))))
    shared = data.draw(st.sampled_from(["lhs", "rhs", "none"]))
    cost = TileTarget(model).matmul_cost(G, M, K, N, "t", partition, shared)
    assert (cost.compute_cycles, cost.exchange_cycles, cost.reduction_cycles,
            cost.temp_bytes, cost.serial) == cost_oracle(G, M, K, N, partition, model, shared)
    assert cost.cycles == cycles_oracle(G, M, K, N, partition, model, shared)


@settings(max_examples=80, deadline=None)
@given(G=sizes, M=sizes, K=sizes, N=sizes, data=st.data())
def test_candidates_are_the_cheapest_partitions_for_their_passes(G, M, K, N, data):
    tiles = data.draw(st.integers(1, 24))
    model = data.draw(cost_models(tiles))
    passes = data.draw(st.lists(st.sampled_from(AXES), min_size=1, max_size=3, unique=True))
    count = data.draw(st.integers(1, 5))
    cube = (G, M, K, N)

    def summed(partition):
        return sum(cycles_oracle(*pass_dims(cube, axes), pass_partition(partition, axes),
                                 model, MatmulPlan(cube, partition, axes).shared_operand)
                   for axes in passes)

    expected = sorted(all_partitions(*cube, tiles),
                      key=lambda p: (summed(p), p.tiles_used, p.as_tuple()))[:count]
    assert TileTarget(model).matmul_candidates(cube, "t", passes, count) == expected


def test_the_cheapest_candidate_of_the_own_pass_is_the_plan():
    target = TileTarget()
    for dims in ((1, 512, 768, 768), (12, 128, 64, 128), (1, 7, 3, 5)):
        assert target.matmul_candidates(dims, "float16")[0] == \
            target.matmul_plan(*dims, "float16")


def test_a_plan_names_the_cube_tensor_of_each_operand():
    partition = MatmulPartition(1, 2, 3, 4)
    forward = MatmulPlan((1, 8, 6, 4), partition)
    assert forward.dims == (1, 8, 6, 4) and forward.own_partition == partition
    assert [forward.cube_tensor(o) for o in ("lhs", "rhs", "output")] == \
        [("lhs", False), ("rhs", False), ("output", False)]
    backward = MatmulPlan((1, 8, 6, 4), partition, "mnk")  # dY [M,N] x W^T [N,K] -> dX
    assert backward.dims == (1, 8, 4, 6)
    assert backward.own_partition == MatmulPartition(1, 2, 4, 3)
    assert [backward.cube_tensor(o) for o in ("lhs", "rhs", "output")] == \
        [("output", False), ("rhs", True), ("lhs", False)]
    torch_update = MatmulPlan((1, 8, 6, 4), partition, "nmk")  # dY^T [N,M] x X [M,K]
    assert torch_update.dims == (1, 4, 8, 6)
    assert [torch_update.cube_tensor(o) for o in ("lhs", "rhs", "output")] == \
        [("output", True), ("lhs", False), ("rhs", True)]
    assert backward.describe()["partition"] == {"groups": 1, "rows": 2, "inner": 3, "cols": 4}


@pytest.mark.parametrize("axes, fc_pass", [("mkk", "NONE"), ("mk", "NONE"),
                                           ("mkn", "TRAINING")])
def test_a_bad_plan_is_refused(axes, fc_pass):
    with pytest.raises(TargetError):
        MatmulPlan((1, 2, 2, 2), MatmulPartition(1, 1, 1, 1), axes, fc_pass)


def test_a_separate_plan_is_each_pass_planned_alone():
    target = TileTarget()
    cube = (1, 64, 96, 32)
    ops = [PassOp("TRAINING_FWD", "mkn"), PassOp("TRAINING_WU", "nmk")]
    separate = separate_plans(target, cube, "float32", ops)
    for op, plan in zip(ops, separate.plans, strict=True):
        own = pass_dims(cube, op.axes)
        assert plan.cube == plan.dims == own and plan.axes == "mkn" and not plan.joint
        assert plan.partition == target.matmul_plan(*own, "float32")
        assert plan.fc_pass == op.fc_pass
    assert separate.cost.cycles == sum(
        target.matmul_cost(*plan.dims, "float32", plan.partition).cycles
        for plan in separate.plans)
    # Poplibs charges the weight update's output (dW, K x N) rearranged over its tiles
    assert separate.rearrangement_cycles == target.rearrangement_cycles(
        96 * 32, "float32", separate.plans[1].partition.tiles_used)


def test_rearrangement_cycles_are_poplibs_transform_estimate():
    target = TileTarget()  # 4 bytes per cycle
    # 1000 float16 over 10 tiles: 200 bytes a tile, 50 cycles of exchange, 200*5/8 of copy
    assert target.rearrangement_cycles(1000, "float16", 10) == 50 + 125
    assert target.rearrangement_cycles(0, "float16", 10) == 0


@pytest.mark.parametrize("cube", [(1, 512, 768, 768), (1, 128, 768, 3072), (4, 16, 32, 16),
                                  (1, 32, 128, 128), (12, 128, 64, 128)])
def test_poplibs_keeps_the_joint_plan_unless_separate_plans_take_fewer_cycles(cube):
    target = TileTarget()
    every_pass = [PassOp(name, axes) for name, axes in CANONICAL_AXES.items()]
    [joint] = joint_plans(target, cube, "float16", every_pass)
    separate = separate_plans(target, cube, "float16", every_pass)
    # only the forward pass and the weight update are computed (a first layer); Poplibs
    # still costs all three
    ops = [every_pass[0], every_pass[2]]
    chosen = poplibs_plans(target, cube, "float16", ops)
    assert len(chosen.plans) == 2
    if separate.cycles < joint.cycles:
        assert not chosen.joint
        assert chosen.plans == separate_plans(target, cube, "float16", ops).plans
    else:
        assert chosen.joint
        assert {plan.partition for plan in chosen.plans} == {joint.plans[0].partition}


def test_summed_cost_keeps_the_largest_temporary_memory():
    total = MatmulCost(1, 2, 3, 40) + MatmulCost(10, 20, 30, 4)
    assert (total.cycles, total.temp_bytes) == (66, 40)
