"""The Conv layout rule: a convolution as the grouped matmul of its im2col.

Checked against a 1x1 convolution's matmul, brute-force im2col oracles for the data input's
wanted layout and exchange, the planner, the cost model, the PopART baseline and a tiny
ResNet.
"""

from __future__ import annotations

import itertools
import sys
from math import prod
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from planner_testing import weight
from popart_unwind.transforms import plan_ir

from popart_unwind.baselines import linear_plan, popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.frontends.builder import Builder
from popart_unwind.machine.interface import REARRANGE_ABOVE_DESTINATIONS
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.conv import ConvRule, conv_geometry
from popart_unwind.options import SessionOptions, UnwindValuations
from popart_unwind.target import IpuModel, TileTarget

VALUES = UnwindValuations()
CONV = ConvRule()
TARGETS = {tiles: TileTarget(IpuModel(tiles_per_ipu=tiles)) for tiles in (4, 16, 64)}


def conv_ir(x_shape, w_shape, attributes=None, bias=False, data_weight=False):
    """An Ir with one Conv: data a streamed input (or a weight), weights ``w``."""
    b = Builder()
    x = weight(b, x_shape, "x") if data_weight else b.add_input_tensor("float32", x_shape, "x")
    inputs = [x, weight(b, w_shape, "w")]
    if bias:
        inputs.append(weight(b, (w_shape[0],), "bias"))
    b.add_output_tensor(b.op("Conv", inputs, attributes or {}))
    return b.ir()


def the_op(ir, name="Conv"):
    [op] = [op for op in ir.main_graph.ops if op.type.name == name]
    return op


def random_tiles(rng, shape, tiles):
    return rng.integers(0, tiles, size=prod(shape)).astype(np.int64)


# -- a 1x1 convolution is exactly its matmul --------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 24),
       st.sampled_from([4, 16, 64]), st.integers(0, 2**31))
def test_a_1x1_conv_on_one_position_is_its_gemm(batch, cin, cout, tiles, seed):
    """Layouts, exchange (bytes and regions) and agreement equal the Gemm's x @ w.T + b."""
    target, rng = TARGETS[tiles], np.random.default_rng(seed)
    conv = the_op(conv_ir((batch, cin, 1), (cout, cin, 1), bias=True))
    b = Builder()
    gemm_inputs = [b.add_input_tensor("float32", (batch, cin), "x"),
                   weight(b, (cout, cin), "w"), weight(b, (cout,), "bias")]
    b.add_output_tensor(b.op("Gemm", gemm_inputs, {"transB": 1}))
    gemm = the_op(b.ir(), "Gemm")
    matmul = REGISTRY.layout_rule(gemm)
    for index in (0, 1, 2):
        assert np.array_equal(CONV.wanted_input_tiles(conv, index, target),
                              _gemm_wanted(matmul, gemm, index, target))
    assert np.array_equal(CONV.output_tiles(conv, [None] * 3, target)[0],
                          matmul.output_tiles(gemm, [None] * 3, target)[0])
    layouts = [random_tiles(rng, t.shape, tiles) for t in conv.inputs]
    outputs = CONV.output_tiles(conv, layouts, target)
    ours = CONV.exchange(conv, layouts, outputs, target)
    theirs = matmul.exchange(gemm, layouts, outputs, target)
    assert np.array_equal(ours.received_bytes, theirs.received_bytes)
    assert np.array_equal(ours.regions, theirs.regions)
    assert CONV.agreement(conv, layouts, target, VALUES) == \
        matmul.agreement(gemm, layouts, target, VALUES)


def _gemm_wanted(rule, op, index, target):
    if index < 2:
        return rule.wanted_input_tiles(op, index, target)
    return rule.best_input_tiles(op, 2, rule.output_tiles(op, [None] * 3, target), target)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 8), st.integers(1, 24), st.integers(1, 5),
       st.integers(1, 5), st.sampled_from([4, 16, 64]), st.integers(0, 2**31))
def test_a_1x1_stride_1_conv_is_the_matmul_of_its_transposed_data(batch, cin, cout, h, w,
                                                                   tiles, seed):
    """Weights, output and bytes received equal MatMul(x as [B*H*W, Cin], w as [Cin, Cout]);
    regions are counted in each operand's own order, so they may differ."""
    target, rng = TARGETS[tiles], np.random.default_rng(seed)
    conv = the_op(conv_ir((batch, cin, h, w), (cout, cin, 1, 1)))
    b = Builder()
    b.add_output_tensor(b.op("MatMul", [b.add_input_tensor("float32", (batch * h * w, cin), "x"),
                                        weight(b, (cin, cout), "w")]))
    matmul_op = the_op(b.ir(), "MatMul")
    matmul = REGISTRY.layout_rule(matmul_op)
    wanted = matmul.wanted_input_tiles(matmul_op, 1, target)
    assert np.array_equal(CONV.wanted_input_tiles(conv, 1, target),
                          wanted.reshape(cin, cout).T.reshape(-1))
    out = CONV.output_tiles(conv, [None, None], target)[0]
    product = matmul.output_tiles(matmul_op, [None, None], target)[0]
    assert np.array_equal(out, product.reshape(batch, h, w, cout).transpose(0, 3, 1, 2)
                          .reshape(-1))
    lhs = matmul.wanted_input_tiles(matmul_op, 0, target)
    assert np.array_equal(CONV.wanted_input_tiles(conv, 0, target),
                          lhs.reshape(batch, h, w, cin).transpose(0, 3, 1, 2).reshape(-1))
    x = random_tiles(rng, (batch, cin, h, w), tiles)
    weights = random_tiles(rng, (cout, cin), tiles)
    ours = CONV.exchange(conv, [x, weights], [out], target)
    theirs = matmul.exchange(
        matmul_op, [x.reshape(batch, cin, h * w).transpose(0, 2, 1).reshape(-1),
                    weights.reshape(cout, cin).T.reshape(-1)], [product], target)
    assert np.array_equal(ours.received_bytes, theirs.received_bytes)


# -- the data input against brute-force im2col --------------------------------------------------
def im2col_reads(geometry):
    """(g, m, k) -> flat data element, for every im2col position reading one (not padding)."""
    groups, _, _, _ = geometry.dims
    per_group = geometry.in_channels // groups
    n = len(geometry.field)
    outs = list(itertools.product(*map(range, geometry.out_field)))
    kernel = list(itertools.product(*map(range, geometry.kernel)))
    reads = {}
    for g, b, (oi, o), ci, (ki, kk) in itertools.product(
            range(groups), range(geometry.batch), enumerate(outs), range(per_group),
            enumerate(kernel)):
        p = [o[a] * geometry.strides[a] - geometry.pads[a] + kk[a] * geometry.dilations[a]
             for a in range(n)]
        if all(0 <= p[a] < geometry.field[a] for a in range(n)):
            reads[(g, b * len(outs) + oi, ci * len(kernel) + ki)] = int(np.ravel_multi_index(
                (b, g * per_group + ci, *p), geometry.input_shape))
    return reads


def part(index, size, count):
    return next(i for i in range(count)
                if i * size // count <= index < (i + 1) * size // count)


def block_readers_oracle(geometry, plan, tiles, size, num_tiles):
    """Each tile of the partition: its LHS block's distinct elements it does not hold, and
    the runs of consecutive ones from one other tile."""
    groups, rows, inner, _ = geometry.dims
    blocks = {}
    for (g, m, k), e in im2col_reads(geometry).items():
        key = (part(g, groups, plan.groups), part(m, rows, plan.rows),
               part(k, inner, plan.inner))
        blocks.setdefault(key, set()).add(e)
    readers = {t: (t // (plan.rows * plan.cols * plan.inner), t % plan.rows,
                   (t // (plan.rows * plan.cols)) % plan.inner)
               for t in range(plan.tiles_used)}
    return blocks_received(blocks, readers, tiles, size, num_tiles)


def blocks_received(blocks, readers, tiles, size, num_tiles):
    """Each reading tile t receives the elements of block ``readers[t]`` it does not hold,
    in runs of consecutive elements from one other tile."""
    received, regions = np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64)
    for t, key in readers.items():
        elements = sorted(blocks.get(key, ()))
        received[t] = sum(tiles[e] != t for e in elements) * size
        regions[t] = sum(tiles[e] != t and (i == 0 or e != elements[i - 1] + 1
                                            or tiles[e] != tiles[elements[i - 1]])
                         for i, e in enumerate(elements))
    return received, regions


def copy_oracle(wanted, tiles, size, num_tiles):
    """Copying every element to its wanted tile: runs of consecutive elements between one
    pair of tiles."""
    received, regions = np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64)
    for e in range(wanted.size):
        if wanted[e] != tiles[e]:
            received[wanted[e]] += size
            if not (e and wanted[e - 1] != tiles[e - 1] and wanted[e - 1] == wanted[e]
                    and tiles[e - 1] == tiles[e]):
                regions[wanted[e]] += 1
    return received, regions


@st.composite
def convolutions(draw):
    """Small N-d (1-D and 2-D) grouped, strided, padded, dilated convolutions."""
    n = draw(st.sampled_from([1, 2]))
    groups = draw(st.integers(1, 2))
    kernel = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    dilations = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    pads = draw(st.lists(st.integers(0, 2), min_size=2 * n, max_size=2 * n))
    field = draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    for axis in range(n):
        assume(field[axis] + pads[axis] + pads[axis + n] >= (kernel[axis] - 1)
               * dilations[axis] + 1)
    attributes = {"group": groups, "kernel_shape": kernel, "dilations": dilations,
                  "pads": pads, "strides": draw(st.lists(st.integers(1, 3), min_size=n,
                                                         max_size=n))}
    cin = groups * draw(st.integers(1, 3))
    cout = groups * draw(st.integers(1, 12))
    batch = draw(st.integers(1, 2))
    return (batch, cin, *field), (cout, cin // groups, *kernel), attributes


DENSE = ((1, 4, 3, 3), (64, 4, 3, 3), {"pads": [1, 1, 1, 1]})  # 16 channel parts on 64 tiles
THREE_D = ((1, 2, 4, 3, 5), (4, 1, 2, 2, 2), {"group": 2, "strides": [2, 1, 2],
                                              "pads": [0, 1, 0, 1, 0, 1]})


@settings(max_examples=40, deadline=None)
@given(convolutions(), st.sampled_from([4, 16, 64]), st.integers(0, 2**31))
@example(DENSE, 64, 0)
@example(THREE_D, 16, 1)
def test_data_exchange_and_layout_match_the_im2col_oracle(conv, tiles, seed):
    x_shape, w_shape, attributes = conv
    target, rng = TARGETS[tiles], np.random.default_rng(seed)
    op = the_op(conv_ir(x_shape, w_shape, attributes))
    geometry = conv_geometry(op)
    assert geometry is not None
    plan = target.matmul_plan(*geometry.dims, geometry.dtype)
    x = random_tiles(rng, x_shape, tiles)
    need = CONV.data_need(geometry, x, target)
    wanted = CONV.data_tiles(geometry, target)
    if plan.cols > REARRANGE_ABOVE_DESTINATIONS:
        copy = copy_oracle(wanted, x, 4, tiles)
        broadcast = block_readers_oracle(geometry, plan, wanted, 4, tiles)
        expected = (copy[0] + broadcast[0], copy[1] + broadcast[1])
    else:
        expected = block_readers_oracle(geometry, plan, x, 4, tiles)
    assert np.array_equal(need.received_bytes, expected[0])
    assert np.array_equal(need.regions, expected[1])
    # createInput, approximated: a read element on the LHS tile of its first reader.
    lhs = target.matmul_tiles(*geometry.dims, geometry.dtype, "lhs")
    _, rows, inner, _ = geometry.dims
    first = {}
    for (g, m, k), e in sorted(im2col_reads(geometry).items(), reverse=True):
        first[e] = lhs[(g * rows + m) * inner + k]
    assert all(wanted[e] == tile for e, tile in first.items())
    assert wanted.min() >= 0 and wanted.max() < tiles


@settings(max_examples=30, deadline=None)
@given(convolutions(), st.sampled_from([4, 16, 64]), st.integers(0, 2**31))
@example(DENSE, 64, 0)
def test_wanted_data_costs_no_more_than_linear_or_random(conv, tiles, seed):
    x_shape, w_shape, attributes = conv
    target, rng = TARGETS[tiles], np.random.default_rng(seed)
    op = the_op(conv_ir(x_shape, w_shape, attributes))
    wanted = [CONV.wanted_input_tiles(op, i, target) for i in (0, 1)]
    outputs = CONV.output_tiles(op, wanted, target)

    def received(layouts):
        return int(CONV.exchange(op, layouts, outputs, target).received_bytes.sum())

    target.reset()
    linear = [target.linear_tiles(t.shape, t.dtype) for t in op.inputs]
    best = received(wanted)
    assert best <= received([linear[0], wanted[1]])
    assert best <= received([random_tiles(rng, x_shape, tiles), wanted[1]])
    assert best <= received(linear)
    assert CONV.least_received(op, linear, outputs, {0, 1}, target) == best


# -- planner, cost model, baseline ------------------------------------------------------------
def test_a_weight_behind_a_view_gets_the_unwound_create_weights_layout():
    b = Builder()
    x = b.add_input_tensor("float32", (2, 6, 9, 8), "x")
    w = weight(b, (3, 10, 3, 2), "w")  # seen as [10, 3, 3, 2] by the conv
    y = b.op("Conv", [x, b.op("Transpose", [w], {"perm": [1, 0, 2, 3]}),
                      weight(b, (10,), "bias")],
             {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]})
    b.add_output_tensor(b.op("Relu", [y]))
    ir = b.ir()
    target = TileTarget(IpuModel(tiles_per_ipu=16))
    # Poplibs' rule for the bias (the lowest of its most-read tiles), not spread by load
    plan = plan_ir(ir, target, options=SessionOptions(balance_tile_memory=False))
    op = the_op(ir)
    wanted = CONV.wanted_input_tiles(op, 1, target)
    assert np.array_equal(plan.tensor("", "w").tiles.reshape(-1),
                          wanted.reshape(10, 3, 3, 2).transpose(1, 0, 2, 3).reshape(-1))
    assert np.array_equal(plan.tensor("", "x").tiles.reshape(-1),
                          CONV.wanted_input_tiles(op, 0, target))
    assert np.array_equal(plan.tensor("", "bias").tiles.reshape(-1),
                          CONV.wanted_input_tiles(op, 2, target))
    assert {p.tensor_id: p.method for p in plan.tensors}["w"] == "unwound"
    assert plan.objective == plan.upper_bound > 0
    cost = evaluate(ir, target)  # the mappings plan_ir wrote
    assert cost.objective == cost.upper_bound == plan.upper_bound
    [row] = [r for r in cost.ops if r.type == "Conv"]
    assert row.avoidable_bytes == 0


def small_conv_net():
    b = Builder()
    x = b.add_input_tensor("float32", (2, 3, 12, 12), "x")
    y = b.op("Conv", [x, weight(b, (8, 3, 3, 3), "w1")],
             {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    y = b.op("Conv", [b.op("Relu", [y]), weight(b, (16, 8, 1, 1), "w2"),
                      weight(b, (16,), "b2")])
    y = b.op("Conv", [y, weight(b, (16, 4, 3, 3), "w3")], {"group": 4, "pads": [1, 1, 1, 1]})
    b.add_output_tensor(y)
    return b.ir()


def test_costing_a_small_conv_net_ours_popart_and_linear():
    ir = small_conv_net()
    target = TileTarget(IpuModel(tiles_per_ipu=32))
    ours = {(p.graph_id, p.tensor_id): p.tiles for p in plan_ir(ir, target, write=False).tensors}
    plans = {"ours": ours, "popart": popart_baseline(ir, target).mappings,
             "linear": linear_plan(ir, target)}
    costs = {name: evaluate(ir, target, mappings) for name, mappings in plans.items()}
    summaries = {name: cost.summary() for name, cost in costs.items()}
    assert summaries == {name: evaluate(ir, target, plans[name]).summary() for name in plans}
    assert all(0 < s["objective"] <= s["upper_bound"] for s in summaries.values())
    assert summaries["ours"]["upper_bound"] == summaries["linear"]["upper_bound"]
    assert summaries["ours"]["exchange_bytes"] < summaries["linear"]["exchange_bytes"]
    assert summaries["ours"]["objective"] >= summaries["linear"]["objective"]
    assert sum(row.type == "Conv" and row.exchange_bytes > 0
               for row in costs["linear"].ops) == 3


def test_the_baseline_lets_the_conv_create_data_weights_and_bias():
    ir = conv_ir((1, 4, 6, 6), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}, bias=True,
                 data_weight=True)
    target = TileTarget(IpuModel(tiles_per_ipu=16))
    plan = popart_baseline(ir, target)
    op = the_op(ir)
    for index, name in enumerate(("x", "w", "bias")):
        decision = plan.decision(name)
        assert decision.method == f"created by {op.debug_name()} input {index}"
        assert np.array_equal(decision.tiles, CONV.wanted_input_tiles(op, index, target))
    assert [CONV.creates_input(op, i) for i in range(4)] == [0, 0, 0, None]


def test_what_the_rule_cannot_model_stays_a_barrier():
    target = TARGETS[16]
    for attributes in ({"auto_pad": "SAME_UPPER"}, {"auto_pad": "VALID"}):
        op = the_op(conv_ir((1, 2, 5, 5), (4, 2, 3, 3), attributes))
        assert conv_geometry(op) is None and CONV.creates_input(op, 0) is None
        layouts = [np.zeros(prod(t.shape), np.int64) for t in op.inputs]
        assert CONV.agreement(op, layouts, target, VALUES) == (0.0, 0.0)
        assert not CONV.exchange(op, layouts, [np.zeros(100, np.int64)],
                                 target).received_bytes.any()
        assert CONV.wanted_input_tiles(op, 1, target) is None
        plan = plan_ir(op.graph.ir, target, write=False)
        assert plan.upper_bound == 0


# -- a tiny ResNet ----------------------------------------------------------------------------
def test_the_tiny_resnet_plans_its_convolutions():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    import make_models
    from popart_unwind.transforms import run_pipeline

    from popart_unwind.ir import Ir

    ir = Ir.from_onnx(make_models.build("resnet", kind="forward"),
                      options=SessionOptions(enable_unwind_layouts=False))
    run_pipeline(ir)
    convs = [op for op in ir.all_ops() if op.type.name == "Conv"]
    assert convs and all(conv_geometry(op) is not None for op in convs)
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    plan = plan_ir(ir, target, write=False)
    assert 0 < plan.objective <= plan.upper_bound
    ours = evaluate(ir, target, {(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors})
    linear = evaluate(ir, target, linear_plan(ir, target))
    assert ours.upper_bound == linear.upper_bound > 0
    assert ours.objective > linear.objective
    assert ours.exchange_bytes < linear.exchange_bytes
