"""Layout rules of reductions, Softmax, LayerNormalization, Clip and the random-like ops
(ops/reduce.py, ops/elementwise.py, ops/stochastic.py): what each adds to the unwinding
problem, what the cost model charges, and how the PopART baseline treats it."""

from __future__ import annotations

import dataclasses
from math import prod

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_testing import small_target, weight
from popart_unwind.transforms import plan_ir

from popart_unwind.baselines import linear_plan, popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir.tile_mapping import tile_array
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.machine.exchange import reduction_groups
from popart_unwind.machine.interface import MatmulPlan, layout_free_operand
from popart_unwind.ops.coverage import ops_without_rule
from popart_unwind.ops.registry import REGISTRY
from popart_unwind.options import SessionOptions

#: Broadcast operands on the lowest of the tiles reading them most (Poplibs' rule), not
#: spread by load: the tests below hold the planner to that rule.
POPLIBS_RULE = SessionOptions(balance_tile_memory=False)


def tiles_of(ir, tensor_id: str) -> np.ndarray:
    tensor = ir.main_graph.tensor(tensor_id)
    return tile_array(tensor.tile_mapping, tensor.nelms(), len(tensor.tile_mapping))


def op_of(ir, type_name: str):
    [op] = [op for op in ir.main_graph.ops if op.type.name == type_name]
    return op


# -- reductions ---------------------------------------------------------------------------
def reduce_ir(op_name, shape, attributes=None, axes=None, version=18):
    b = Builder()
    x = weight(b, shape, "x")
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    out = b.op(op_name, inputs, attributes or {}, version=version)
    b.add_output_tensor(b.op("Relu", [out]))
    return b.ir()


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[1], [0, 2], [-1], []])
def test_a_reduction_is_a_root_depending_on_its_input(keepdims, axes):
    ir = reduce_ir("ReduceSum", (3, 4, 5), {"keepdims": keepdims}, axes=axes)
    plan = plan_ir(ir, small_target())
    reduce_op = op_of(ir, "ReduceSum")
    assert ops_without_rule(ir) == {}
    graph = plan.unwind_graph
    kinds = {graph.kind(t) for t in graph.tensors()}
    assert "barrier" in kinds  # the result: a root known once the input is
    expected = np.sum(np.zeros((3, 4, 5)), axis=tuple(axes) or None,
                      keepdims=bool(keepdims)).shape
    assert reduce_op.output(0).shape == expected
    # the input gets no pair from the reduction: nothing to satisfy, nothing lost
    assert plan.upper_bound == 0


@pytest.mark.parametrize("op_name,attributes,axes,version", [
    ("ReduceSum", {"keepdims": 0}, [1], 18),            # a unit axis only
    ("ReduceMean", {"axes": [1], "keepdims": 1}, None, 13),  # axes as an attribute
    ("ReduceSum", {"noop_with_empty_axes": 1}, [], 18),  # the identity
])
def test_a_reduction_that_moves_nothing_is_a_reshape(op_name, attributes, axes, version):
    ir = reduce_ir(op_name, (3, 1, 5), attributes, axes=axes, version=version)
    target = small_target()
    plan_ir(ir, target)
    reduce_op = op_of(ir, op_name)
    rule = REGISTRY.layout_rule(reduce_op)
    x = np.arange(15) % 16
    [out] = rule.output_tiles(reduce_op, [x, None], target)
    assert np.array_equal(out, x)  # every result sits on its one input's tile
    need = rule.exchange(reduce_op, [x, None], [out], target)
    assert not need.received_bytes.any()


def test_the_reduction_exchange_on_a_hand_checked_layout():
    """x[2, 4] float32 on 4 tiles: row 0 on tiles 0,0,1,1, row 1 on tile 2. Row 0 has
    partials on two tiles, so popops::reduce maps both sums linearly from tile 0 (2
    elements: one grain on tile 0); tile 0 receives row 0's partial from tile 1 and row 1's
    from tile 2: 8 bytes, two regions (two source tiles)."""
    b = Builder()
    x = weight(b, (2, 4), "x")
    b.add_output_tensor(b.op("ReduceSum", [x, np.array([1], np.int64)], {"keepdims": 0}))
    ir = b.ir()
    target = small_target(4)
    mappings = dict(linear_plan(ir, target))
    mappings[("", "x")] = np.array([0, 0, 1, 1, 2, 2, 2, 2])
    report = evaluate(ir, target, mappings=mappings)
    row = report.op(op_of(ir, "ReduceSum").id)
    assert (row.exchange_bytes, row.regions, row.busiest_tile_bytes) == (8, 2, 8)
    assert row.avoidable_bytes == 8  # x on one tile per row would receive nothing
    mappings[("", "x")] = np.array([3, 3, 3, 3, 1, 1, 1, 1])
    row = evaluate(ir, target, mappings=mappings).op(op_of(ir, "ReduceSum").id)
    assert (row.exchange_bytes, row.avoidable_bytes) == (0, 0)


# -- Softmax --------------------------------------------------------------------------------
def test_softmax_exchange_by_hand_and_its_layout_flows_through():
    """Softmax over rows of x[2, 4] laid out as above: the max and the sum each send two
    partials to tile 0 (8 bytes) and broadcast back one value to tile 1 (row 0) and one to
    tile 2 (row 1) (8 bytes): 32 bytes in all. The result is a clone of x."""
    b = Builder()
    x = weight(b, (2, 4), "x")
    b.add_output_tensor(b.op("Softmax", [x], {"axis": 1}))
    ir = b.ir()
    target = small_target(4)
    mappings = {("", "x"): np.array([0, 0, 1, 1, 2, 2, 2, 2])}
    softmax = op_of(ir, "Softmax")
    row = evaluate(ir, target, mappings=mappings).op(softmax.id)
    assert row.exchange_bytes == 32
    assert row.avoidable_bytes == 32  # rows on one tile each would exchange nothing
    rule = REGISTRY.layout_rule(softmax)
    [out] = rule.output_tiles(softmax, [mappings[("", "x")]], target)
    assert np.array_equal(out, mappings[("", "x")])


def test_a_softmax_before_a_matmul_lets_the_weight_take_the_matmul_layout():
    """Softmax is elementwise on its input for the planner (a 1-input sum_like) and for
    PopART's creator search (SoftmaxOpx is an ElementWiseUnaryOpx: CanUnwind)."""
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    w = weight(b, (32, 24), "w")
    b.add_output_tensor(b.op("MatMul", [x, b.op("Softmax", [w], {"axis": 0})]))
    ir = b.ir()
    target = small_target()
    plan = plan_ir(ir, target)
    rhs = small_target().matmul_tiles(1, 16, 32, 24, "float32", "rhs")
    assert np.array_equal(tiles_of(ir, "w"), rhs)
    assert plan.tensor("", "w").method == "unwound"
    decision = popart_baseline(ir, small_target()).decision("w")
    assert decision.method.startswith("created by") and "Softmax" in decision.explanation
    assert np.array_equal(decision.tiles, rhs)


# -- LayerNormalization ---------------------------------------------------------------------
def norm_ir(hidden: int = 24, rows: int = 16, with_bias: bool = True):
    b = Builder()
    x = b.add_input_tensor("float32", (rows, 32), "x")
    h = b.op("MatMul", [x, weight(b, (32, hidden), "w")])
    inputs = [h, weight(b, (hidden,), "scale")] + ([weight(b, (hidden,), "bias")]
                                                   if with_bias else [])
    y = b.op("LayerNormalization", inputs, {"axis": -1}, num_outputs=3)[0]
    b.add_output_tensor(b.op("Softmax", [y], {"axis": -1}))
    return b.ir()


def test_layer_norm_scale_and_bias_follow_the_normalised_tensor_like_a_bias():
    ir = norm_ir()
    target = small_target()
    plan = plan_ir(ir, target, options=POPLIBS_RULE)
    fresh = small_target()
    out = fresh.matmul_tiles(1, 16, 32, 24, "float32", "output")
    wanted = fresh.broadcast_operand_tiles(out, (16, 24), (24,))
    assert len(set(wanted.tolist())) > 1  # the test means something
    assert np.array_equal(tiles_of(ir, "scale"), wanted)
    assert np.array_equal(tiles_of(ir, "bias"), wanted)
    assert plan.objective == plan.upper_bound
    # the pairs' bound: matmul pairs of x (w is broadcast to super-tile pairs, its layout
    # worth nothing to the matmul) and two bias pairs of 24 elements
    mm = fresh.matmul_plan(1, 16, 32, 24, "float32")
    assert layout_free_operand(fresh, MatmulPlan((1, 16, 32, 24), mm), "rhs")
    valuations = ir.options.unwind_valuations
    assert plan.upper_bound == valuations.matmul * 16 * 32 + 2 * valuations.bias * 24
    # the cost model scores the same pairs on tiles, and nothing is left to save there
    report = evaluate(ir, small_target())
    assert report.objective == report.upper_bound == plan.upper_bound
    norm = op_of(ir, "LayerNormalization")
    assert report.op(norm.id).avoidable_bytes == 0
    linear = evaluate(ir, small_target(), mappings=dict(linear_plan(ir, small_target())))
    assert linear.op(norm.id).avoidable_bytes > 0
    assert linear.op(norm.id).exchange_bytes > report.op(norm.id).exchange_bytes


def test_layer_norm_plans_as_the_exact_solver_does():
    ir = norm_ir(hidden=8, rows=4)
    ours = plan_ir(ir, small_target())
    exact = plan_ir(norm_ir(hidden=8, rows=4), small_target(),
                    options=dataclasses.replace(SessionOptions(), unwind_algorithm="exact"))
    assert exact.proven_optimal
    assert ours.objective == exact.objective


def test_layer_norm_statistics_exchange_by_hand():
    """X[2, 4] normalised over its last axis, laid out as in the softmax case, Scale and B
    on tile 3: the mean and the inverse standard deviation cost what the softmax's max and
    sum did (32 bytes), and Scale and B are read by tiles 0, 1 and 2: 4 elements each to
    each of 3 tiles, 2 × 48 bytes."""
    b = Builder()
    x = weight(b, (2, 4), "x")
    outs = b.op("LayerNormalization", [x, weight(b, (4,), "scale"), weight(b, (4,), "bias")],
                {"axis": -1}, num_outputs=3)
    b.add_output_tensor(outs[0])
    ir = b.ir()
    target = small_target(4)
    mappings = {("", "x"): np.array([0, 0, 1, 1, 2, 2, 2, 2]),
                ("", "scale"): np.full(4, 3), ("", "bias"): np.full(4, 3)}
    norm = op_of(ir, "LayerNormalization")
    report = evaluate(ir, target, mappings=mappings)
    row = report.op(norm.id)
    # Y's tiles 0,0,1,1 | 2,2,2,2 read scale/bias elements 0..3: tile 0 reads 0,1; tile 1
    # reads 2,3; tile 2 reads 0..3: 8 distinct (tile, element) pairs per operand.
    assert row.exchange_bytes == 32 + 2 * 8 * 4
    rule = REGISTRY.layout_rule(norm)
    outputs = rule.output_tiles(norm, [mappings[("", "x")], None, None], target)
    assert np.array_equal(outputs[0], mappings[("", "x")])
    assert outputs[1].tolist() == outputs[2].tolist() == [0, 0]  # as popops::reduce's


def test_layer_norm_is_a_dead_end_for_popart_and_where_too():
    """PopART reaches a layer norm through GroupNormOpx, and BaseWhereOpx answers Deadend
    for every input: a weight behind either is not laid out by the matmul after it."""
    for op_name in ("LayerNormalization", "Where"):
        b = Builder()
        x = b.add_input_tensor("float32", (16, 32), "x")
        w = weight(b, (32, 24), "w")
        if op_name == "Where":
            mask = b.add_input_tensor("bool", (32, 24), "mask")
            hidden = b.op("Where", [mask, w, weight(b, (32, 24), "other")])
        else:
            hidden = b.op(op_name, [w, weight(b, (24,), "scale")], {"axis": -1},
                          num_outputs=3)[0]
        b.add_output_tensor(b.op("MatMul", [x, hidden]))
        ir = b.ir()
        decision = popart_baseline(ir, small_target()).decision("w")
        assert decision.method == "linear", (op_name, decision.explanation)
        plan_ir(ir, small_target())  # ours does unwind through both
        rhs = small_target().matmul_tiles(1, 16, 32, 24, "float32", "rhs")
        assert np.array_equal(tiles_of(ir, "w"), rhs), op_name


# -- Clip, RandomUniformLike ------------------------------------------------------------------
def test_clip_is_elementwise_with_scalar_bounds_and_popart_passes_through():
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    w = weight(b, (32, 24), "w")
    low = b.add_initialized_input_tensor(np.array(-1.0, np.float32), "low")
    clipped = b.op("Clip", [w, low, None])
    b.add_output_tensor(b.op("MatMul", [x, clipped]))
    ir = b.ir()
    clip = op_of(ir, "Clip")
    assert clip.output(0).shape == (32, 24) and not clip.has_input(2)
    plan = plan_ir(ir, small_target())
    rhs = small_target().matmul_tiles(1, 16, 32, 24, "float32", "rhs")
    assert np.array_equal(tiles_of(ir, "w"), rhs)
    assert plan.objective == plan.upper_bound  # the bound sits where most readers are
    decision = popart_baseline(ir, small_target()).decision("w")
    assert np.array_equal(decision.tiles, rhs) and "Clip" in decision.explanation


def test_random_uniform_like_reads_nothing_and_is_laid_out_linearly():
    b = Builder()
    x = weight(b, (8, 40), "x")
    draw = b.op("RandomUniformLike", [x])
    b.add_output_tensor(b.op("Add", [draw, b.op("Relu", [x])]))
    ir = b.ir()
    assert ops_without_rule(ir) == {}
    op = op_of(ir, "RandomUniformLike")
    assert op.output(0).shape == (8, 40) and op.output(0).dtype == "float32"
    target = small_target()
    rule = REGISTRY.layout_rule(op)
    assert not rule.exchange(op, [np.zeros(320, np.int16)], [np.zeros(320)],
                             target).received_bytes.any()
    fresh = small_target()
    [out] = rule.output_tiles(op, [np.zeros(320, np.int16)], target)
    assert np.array_equal(out, fresh.linear_tiles((8, 40), "float32"))


# -- laws over random layouts ---------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_any_layout_costs_at_least_the_bound_and_no_more_than_the_oracle(shape, data):
    """For random layouts: the avoidable exchange is never negative (evaluate checks it),
    and a reduction's exchange is exactly the partials not on their result's tile."""
    shape = tuple(shape)
    axes = sorted(data.draw(st.sets(st.sampled_from(range(len(shape))), min_size=1)))
    b = Builder()
    x = weight(b, shape, "x")
    total = b.op("ReduceSum", [x, np.array(axes, np.int64)], {"keepdims": 1})
    probs = b.op("Softmax", [x], {"axis": -1})
    norm = b.op("LayerNormalization", [x, weight(b, shape[-1:], "scale")], {"axis": -1},
                num_outputs=3)[0]
    b.add_output_tensor(b.op("Add", [b.op("Add", [probs, norm]), total]))
    ir = b.ir()
    target = small_target(6)
    layout = np.array(data.draw(st.lists(st.integers(0, 5), min_size=prod(shape),
                                         max_size=prod(shape))))
    scale = np.array(data.draw(st.lists(st.integers(0, 5), min_size=shape[-1],
                                        max_size=shape[-1])))
    mappings = dict(linear_plan(ir, small_target(6)))  # the axes constant
    mappings.update({("", "x"): layout, ("", "scale"): scale})
    report = evaluate(ir, target, mappings=mappings)
    reduce_op = op_of(ir, "ReduceSum")
    [result] = REGISTRY.layout_rule(reduce_op).output_tiles(reduce_op, [layout, None],
                                                             small_target(6))
    groups = reduction_groups(shape, tuple(axes))
    partials = {(int(t), int(g)) for t, g in zip(layout, groups, strict=True)}
    expected = 4 * sum(1 for t, g in partials if result[g] != t)
    if all(shape[a] == 1 for a in axes):
        expected = 0
    assert report.op(reduce_op.id).exchange_bytes == expected
    for row in report.ops:
        assert 0 <= row.avoidable_bytes <= row.exchange_bytes


# -- BatchNormalization -----------------------------------------------------------------------
def batch_norm_ir(training: bool = False):
    b = Builder()
    x = b.add_input_tensor("float32", (2, 3, 8, 8), "x")
    conv = b.op("Conv", [x, weight(b, (16, 3, 3, 3), "w")], {"pads": [1, 1, 1, 1]})
    params = [weight(b, (16,), name) for name in ("gamma", "beta", "mean", "var")]
    attributes = {"training_mode": 1} if training else {}
    outs = b.op("BatchNormalization", [conv, *params], attributes,
                num_outputs=3 if training else 1)
    y = outs[0] if training else outs
    b.add_output_tensor(b.op("Relu", [y]))
    return b.ir()


def spread_target() -> TileTarget:
    """The small IPU under the IPU Model's former figures (compute at the peak rate alone, a
    90-cycle sync, no shared exchange buses), whose convolution plan spreads this layer's 16
    channels over several tiles; under Poplibs' vertex estimates it keeps them on one,
    leaving nothing to test."""
    return TileTarget(IpuModel(tiles_per_ipu=16, min_bytes_per_tile=16, vertex_costs=False,
                               sync_cycles=90, tiles_per_exchange_bus=1))


def test_batch_norm_operands_sit_with_their_channels_like_a_conv_bias():
    ir = batch_norm_ir()
    plan = plan_ir(ir, spread_target(), options=POPLIBS_RULE)
    norm = op_of(ir, "BatchNormalization")
    fresh = spread_target()
    conv = op_of(ir, "Conv")
    [conv_out] = REGISTRY.layout_rule(conv).output_tiles(
        conv, [tiles_of(ir, "x"), tiles_of(ir, "w")], fresh)
    wanted = fresh.broadcast_operand_tiles(conv_out, (2, 16, 8, 8), (1, 16, 1, 1))
    assert len(set(wanted.tolist())) > 1  # the test means something
    for name in ("gamma", "beta", "mean", "var"):
        assert np.array_equal(tiles_of(ir, name), wanted), name
    assert plan.objective == plan.upper_bound
    report = evaluate(ir, spread_target())
    assert report.objective == plan.objective
    # a channel spans several tiles, so some still receive its values, but no layout of
    # the operands would receive less
    assert report.op(norm.id).avoidable_bytes == 0 < report.op(norm.id).exchange_bytes
    linear = evaluate(ir, spread_target(), mappings=dict(linear_plan(ir, spread_target())))
    assert linear.op(norm.id).avoidable_bytes > 0
    assert linear.op(norm.id).exchange_bytes > report.op(norm.id).exchange_bytes
    # PopART's BatchNormOpx creates nothing and passes nothing: the operands are linear
    baseline = popart_baseline(ir, spread_target())
    assert {baseline.decision(n).method for n in ("gamma", "beta", "mean", "var")} == \
        {"linear"}


def test_a_training_batch_norm_also_pays_for_its_batch_statistics():
    inference, training = batch_norm_ir(), batch_norm_ir(training=True)
    plan_ir(inference, small_target())
    plan_ir(training, small_target())
    rows = [evaluate(ir, small_target()).op(op_of(ir, "BatchNormalization").id)
            for ir in (inference, training)]
    norm = op_of(training, "BatchNormalization")
    rule = REGISTRY.layout_rule(norm)
    x_tiles = evaluate_input_tiles(training, norm)
    outputs = rule.output_tiles(norm, [x_tiles] + [None] * 4, small_target())
    assert np.array_equal(outputs[0], x_tiles)
    assert outputs[1].shape == outputs[2].shape == (16,)
    from popart_unwind.ops.reduce import statistics_need

    extra = statistics_need((2, 16, 8, 8), (0, 2, 3), x_tiles, "float32", 2, small_target())
    assert rows[1].exchange_bytes == rows[0].exchange_bytes + int(extra.received_bytes.sum())
    assert int(extra.received_bytes.sum()) > 0


def evaluate_input_tiles(ir, op) -> np.ndarray:
    """The layout the cost model derives for ``op``'s input 0 (a convolution's result)."""
    conv = op.input(0).producer
    [tiles] = REGISTRY.layout_rule(conv).output_tiles(
        conv, [tiles_of(ir, "x"), tiles_of(ir, "w")], small_target())
    return tiles


def small_mixed_ir():
    """A weight through Softmax into a matmul, a bias added after a ReduceSum of the
    product, and a layer norm whose Scale is also a weight: every rule of this family."""
    b = Builder()
    x = b.add_input_tensor("float32", (4, 6), "x")
    w = weight(b, (6, 5), "w")
    product = b.op("MatMul", [x, b.op("Softmax", [w], {"axis": 0})])
    total = b.op("ReduceSum", [product, np.array([0], np.int64)], {"keepdims": 1})
    shifted = b.op("Add", [b.op("Sub", [product, total]), weight(b, (5,), "bias")])
    norm = b.op("LayerNormalization", [shifted, weight(b, (5,), "scale")], {"axis": -1},
                num_outputs=3)[0]
    b.add_output_tensor(norm)
    return b.ir()


@pytest.mark.parametrize("tiles", [4, 16])
def test_the_default_plan_of_every_rule_here_is_the_exact_optimum(tiles):
    ours = plan_ir(small_mixed_ir(), small_target(tiles))
    exact = plan_ir(small_mixed_ir(), small_target(tiles),
                    options=dataclasses.replace(SessionOptions(), unwind_algorithm="exact"))
    assert exact.proven_optimal
    assert ours.objective == exact.objective
    assert 0 < ours.objective <= ours.upper_bound


# -- a producer-less partner of a normalised result ------------------------------------------
def embedded_then(next_op: str):
    """x @ w (computed) plus a position table p of the same shape, then ``next_op``: the
    partner p is tied to the product unless a norm reads the sum."""
    b = Builder()
    x = b.add_input_tensor("float32", (1, 16, 8), "x")
    product = b.op("MatMul", [x, weight(b, (8, 32), "w")])
    summed = b.op("Add", [product, weight(b, (1, 16, 32), "p")])
    if next_op == "LayerNormalization":
        out = b.op(next_op, [summed, weight(b, (32,), "scale"), weight(b, (32,), "shift")],
                   {"axis": -1})
    else:
        out = b.op(next_op, [summed])
    b.add_output_tensor(out)
    return b.ir()


def scattered_then(next_op: str):
    """x @ w (computed) plus updates scattered into a zero table z, then ``next_op``: z,
    which lays the scatter's result out, is tied to the product unless a norm reads the
    sum (a pooling's gradient scattered into zeros, then a batch norm's reductions)."""
    b = Builder()
    x = b.add_input_tensor("float32", (1, 16, 8), "x")
    product = b.op("MatMul", [x, weight(b, (8, 32), "w")])
    indices = b.add_input_tensor("int64", (1, 16, 4), "i")
    updates = b.add_input_tensor("float32", (1, 16, 4), "u")
    scattered = b.op("ScatterElements", [weight(b, (1, 16, 32), "z"), indices, updates],
                     {"axis": 2})
    out = b.op(next_op, [b.op("Add", [product, scattered])])
    b.add_output_tensor(out)
    return b.ir()


@pytest.mark.parametrize("build, free, next_op, tied", [
    (embedded_then, "p", "Relu", True), (embedded_then, "p", "LayerNormalization", False),
    (embedded_then, "p", "Softmax", False),
    (scattered_then, "z", "Relu", True), (scattered_then, "z", "Softmax", False)])
def test_a_producer_less_partner_of_a_normalised_result_is_left_free(build, free, next_op,
                                                                     tied):
    """Tied to the product unless a norm reads the sum: a producer-less partner, or one
    laid out as a producer-less tensor (a scatter into one)."""
    ir = build(next_op)
    plan = plan_ir(ir, small_target())
    matmul = op_of(ir, "MatMul")
    wanted = REGISTRY.layout_rule(matmul).output_tiles(matmul, [None, None],
                                                       small_target().with_plans(plan.op_plans))
    laid = tiles_of(ir, free)
    assert np.array_equal(laid, np.asarray(wanted[0]).reshape(-1)) == tied
