"""Convolutions under a chosen plan: any pass of any cube of work, checked against
brute-force im2col oracles; and the passes of a convolution layer planned on one partition,
which lets one weight layout serve the forward convolution and the update."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from popart_unwind.transforms import run_pipeline
from popart_unwind.transforms.unwind_layouts import plan_ir
from test_conv_layout import (
    blocks_received,
    conv_ir,
    convolutions,
    copy_oracle,
    im2col_reads,
    part,
    the_op,
)

from popart_unwind.cost import evaluate
from popart_unwind.ir import Ir
from popart_unwind.layers import (
    choose_plans,
    convolution_layers,
    estimated_bytes,
    estimated_cycles,
    joint_plans,
    separate_plans,
)
from popart_unwind.machine.interface import (
    REARRANGE_ABOVE_DESTINATIONS,
    MatmulPartition,
    MatmulPlan,
    plan_operand_tiles,
)
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.conv import ConvRule, conv_geometry
from popart_unwind.ops.linalg import op_key
from popart_unwind.target import IpuModel, TileTarget

torch = pytest.importorskip("torch")

CONV = ConvRule()
AXES = ("mkn", "mnk", "kmn", "knm", "nmk", "nkm")


def cube_of(dims: tuple[int, int, int, int], axes: str) -> tuple[int, int, int, int]:
    """The cube whose pass ``axes`` is the matmul ``dims``."""
    size = dict(zip(axes, dims[1:], strict=True))
    return (dims[0], size["m"], size["k"], size["n"])


def tile_coordinates(tile: int, partition: MatmulPartition) -> dict[str, int]:
    """The (g, m, k, n) block tile ``tile`` computes (the partition's numbering)."""
    _, m, k, n = partition.as_tuple()
    return {"g": tile // (m * n * k), "k": (tile // (m * n)) % k, "n": (tile // m) % n,
            "m": tile % m}


def chosen_block_oracle(geometry, plan: MatmulPlan, tiles, size, num_tiles):
    """Each tile of the cube's partition: the distinct data elements of its block of the
    cube tensor the im2col LHS is that it does not hold, and their runs from one tile."""
    groups, rows, inner, _ = geometry.dims
    row_axis, inner_axis = plan.axes[0], plan.axes[1]
    partition = plan.partition
    blocks: dict[tuple[int, int, int], set[int]] = {}
    for (g, m, k), e in im2col_reads(geometry).items():
        key = (part(g, groups, partition.groups),
               part(m, rows, partition.split(row_axis)),
               part(k, inner, partition.split(inner_axis)))
        blocks.setdefault(key, set()).add(e)
    readers = {t: (at["g"], at[row_axis], at[inner_axis])
               for t in range(partition.tiles_used)
               for at in [tile_coordinates(t, partition)]}
    return blocks_received(blocks, readers, tiles, size, num_tiles)


@settings(max_examples=40, deadline=None)
@given(convolutions(), st.sampled_from(AXES), st.lists(st.integers(1, 4), min_size=4,
                                                       max_size=4), st.integers(0, 2**31))
def test_a_convolution_under_any_pass_of_a_cube_reads_as_the_oracle_says(conv, axes, splits,
                                                                         seed):
    x_shape, w_shape, attributes = conv
    op = the_op(conv_ir(x_shape, w_shape, attributes))
    geometry = conv_geometry(op)
    cube = cube_of(geometry.dims, axes)
    splits = [min(s, size) for s, size in zip(splits, cube, strict=True)]
    partition = MatmulPartition(*splits)
    assume(partition.tiles_used <= 64)
    plan = MatmulPlan(cube, partition, axes)
    target = TileTarget(IpuModel(tiles_per_ipu=64)).with_plans({op_key(op): plan})
    assert CONV.plan(op, target) == plan
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 64, size=int(np.prod(x_shape)))
    need = CONV.data_need(geometry, x, target, plan)
    name, _ = plan.cube_tensor("lhs")
    if partition.broadcast_destinations(name) > REARRANGE_ABOVE_DESTINATIONS:
        wanted = CONV.data_tiles(geometry, target, plan)
        copy = copy_oracle(wanted, x, 4, 64)
        broadcast = chosen_block_oracle(geometry, plan, wanted, 4, 64)
        expected = (copy[0] + broadcast[0], copy[1] + broadcast[1])
    else:
        expected = chosen_block_oracle(geometry, plan, x, 4, 64)
    assert np.array_equal(need.received_bytes, expected[0])
    assert np.array_equal(need.regions, expected[1])
    # the weights and the output are the cube's tensors as this pass holds them
    own_rhs = plan_operand_tiles(target, plan, "rhs", "float32")
    weights = CONV.wanted_input_tiles(op, 1, target)
    assert np.array_equal(weights, own_rhs[CONV.rhs_index(geometry)])
    # each op's work is its own matmul under the partition as it sees it
    work = CONV.work(op, [None, None], CONV.output_tiles(op, [None, None], target), target)
    cost = target.matmul_cost(*geometry.dims, "float32", plan.own_partition)
    assert (work.compute_cycles, work.partials_cycles) == (cost.compute_cycles,
                                                            cost.reduction_cycles)


# -- a layer's passes on one partition ----------------------------------------------------------
class PatchEmbedding(torch.nn.Module):
    """A ViT's patch embedding (kernel = stride) and a pointwise convolution after it."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 16, 4, stride=4)
        self.point = torch.nn.Conv2d(16, 24, 1)

    def forward(self, x):
        return self.point(self.patch(x))


@pytest.fixture(scope="module")
def step() -> Ir:
    torch.manual_seed(0)
    ir = Ir.from_torch(PatchEmbedding(), (torch.randn(2, 3, 16, 16),), training=True)
    run_pipeline(ir)
    return ir


def test_poplibs_plans_every_convolution_alone_and_ours_may_share_a_cube(step):
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    layers = convolution_layers(step)
    assert len(layers) == 2
    assert choose_plans(step, target, REGISTRY, "poplibs") == {}
    assert choose_plans(step, target, REGISTRY, "alone") == {}
    chosen = choose_plans(step, target, REGISTRY, "with_layouts")
    assert set(chosen) <= {op_key(op) for layer in layers for op in layer.ops()}
    for layer in layers:
        plans = [chosen.get(op_key(op)) for op in layer.ops()]
        assert all(plan is not None for plan in plans)
        assert all(plan.joint for plan in plans) or not any(plan.joint for plan in plans)


def test_a_joint_layer_lays_the_gradient_out_where_the_weights_lie(step):
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    for layer in convolution_layers(step):
        options = {op_key(op): MatmulPlan(layer.cube, partition, layer.axes_of(op),
                                          joint=True)
                   for op in layer.ops()
                   for partition in [target.matmul_candidates(
                       layer.cube, "float32", [layer.axes_of(o) for o in layer.ops()])[0]]}
        planned = target.with_plans(options)
        weights = CONV.wanted_input_tiles(layer.fwd, 1, planned)
        gradient = CONV.output_tiles(layer.wu, [None, None], planned)[0]
        out_channels, in_channels = layer.fwd.input(1).shape[:2]
        # the weight gradient comes out as [Cin, Cout, *kernel], transposed into the weights
        assert np.array_equal(gradient.reshape(in_channels, out_channels, -1)
                              .transpose(1, 0, 2).reshape(-1), weights)
        if layer.bwd is not None:  # the pointwise data gradient reads them where they lie
            assert np.array_equal(
                REGISTRY.layout_rule(layer.bwd).wanted_input_tiles(layer.bwd, 1, planned),
                weights)


@pytest.mark.parametrize("how", ["with_layouts", "alone"])
def test_the_updates_of_joint_layers_move_nothing(step, how):
    # without shared exchange buses, under which these layers' joint plans are chosen
    target = TileTarget(IpuModel(tiles_per_ipu=64, tiles_per_exchange_bus=1))
    ir_options = step.options
    step.options = dataclasses.replace(ir_options, matmul_plans=how)
    try:
        plan = plan_ir(step, target, write=False)
    finally:
        step.options = ir_options
    mappings = {(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors}
    cost = evaluate(step, target, mappings, op_plans=plan.op_plans)
    ops = {op.id: op for op in step.main_graph.ops}
    updates = [row for row in cost.ops  # the weights' updates (the biases' are 1-D)
               if row.type == "Sub" and len(ops[row.op_id].output(0).shape) == 4]
    assert len(updates) == 2
    joint = {key for key, chosen in plan.op_plans.items() if chosen.joint}
    if how == "alone":
        assert not joint
        assert sum(row.avoidable_bytes for row in updates) > 0
    else:
        assert joint
        assert sum(row.avoidable_bytes for row in updates) == 0


def test_a_joint_plan_that_would_exchange_more_than_poplibs_plans_is_not_taken():
    """A patch embedding whose joint plan takes fewer estimated cycles than the passes
    planned alone, as Poplibs plans them, but receives more bytes: the choice keeps
    Poplibs' plans, and the cost model agrees the joint plan exchanges more."""
    torch.manual_seed(0)
    ir = Ir.from_torch(torch.nn.Conv2d(4, 16, 4, stride=4), (torch.randn(2, 4, 16, 16),),
                       training=True)
    run_pipeline(ir)
    # the IPU Model's former figures (compute at the peak rate alone, a 90-cycle sync, no
    # shared exchange buses), under which this layer's joint plan is estimated quicker than
    # the separate plans
    target = TileTarget(IpuModel(tiles_per_ipu=64, partial_bytes_per_element=2,
                                 vertex_costs=False, sync_cycles=90, tiles_per_exchange_bus=1))
    [layer] = convolution_layers(ir)
    ops, passes = layer.passes()
    [joint] = joint_plans(target, layer.cube, "float32", passes,
                          over=[each.axes for each in passes])
    separate = separate_plans(target, layer.cube, "float32", passes, charged=False)
    assert estimated_cycles(target, layer, joint) < estimated_cycles(target, layer, separate)
    assert estimated_bytes(target, layer, joint) > estimated_bytes(target, layer, separate)
    chosen = choose_plans(ir, target, REGISTRY, "with_layouts")
    assert [chosen[op_key(op)] for op in ops] == list(separate.plans)
    measured = {}
    for name, option in (("joint", joint), ("separate", separate)):
        op_plans = {op_key(op): plan for op, plan in zip(ops, option.plans, strict=True)}
        plan = plan_ir(ir, target, write=False, op_plans=op_plans)
        mappings = {(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors}
        measured[name] = evaluate(ir, target, mappings, op_plans=plan.op_plans)
    assert measured["joint"].exchange_bytes > measured["separate"].exchange_bytes
