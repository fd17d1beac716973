"""The ConvTranspose and pool layout rules against brute force over small shapes.

ConvTranspose is planned as the convolution Poplibs computes for it (input dilation the
stride, flipped weights); its im2col reads are derived here from ONNX's definition alone
(output position o + pad = i·stride + kk·dilation) and the matmul they give is checked to
compute the op's values. A pool's exchange is each output element's tile receiving the
window elements it does not hold, counted by looping over windows.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from planner_testing import weight
from test_conv_layout import TARGETS, copy_oracle, part, random_tiles

from popart_unwind.baselines import popart_baseline
from popart_unwind.frontends.builder import Builder
from popart_unwind.machine.interface import REARRANGE_ABOVE_DESTINATIONS
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.conv import ConvTransposeRule, transpose_geometry
from popart_unwind.ops.coverage import has_layout_rule
from popart_unwind.ops.pools import PoolRule, pool_geometry

TRANSPOSE = ConvTransposeRule()
POOL = PoolRule()


def one_op_ir(name, x_shape, w_shape, attributes):
    b = Builder()
    inputs = [b.add_input_tensor("float32", x_shape, "x")]
    if w_shape is not None:
        inputs.append(weight(b, w_shape, "w"))
    outputs = b.op(name, inputs, attributes, num_outputs=2) if name == "MaxPool" and \
        attributes.pop("indices", False) else [b.op(name, inputs, attributes)]
    for out in outputs:
        b.add_output_tensor(out)
    ir = b.ir()
    [op] = [op for op in ir.main_graph.ops if op.type.name == name]
    return ir, op


# -- ConvTranspose ----------------------------------------------------------------------------
@st.composite
def transposed(draw):
    n = draw(st.sampled_from([1, 2]))
    groups = draw(st.integers(1, 2))
    kernel = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    dilations = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    field = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    pads = draw(st.lists(st.integers(0, 2), min_size=2 * n, max_size=2 * n))
    extra = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilations,
                                                                   strict=True)]
    for a in range(n):
        full = strides[a] * (field[a] - 1) + extra[a] + (kernel[a] - 1) * dilations[a] + 1
        assume(full - pads[a] - pads[a + n] >= 1)
    cin, cols = groups * draw(st.integers(1, 3)), draw(st.integers(1, 6))
    attributes = {"group": groups, "kernel_shape": kernel, "strides": strides,
                  "dilations": dilations, "pads": pads, "output_padding": extra}
    return (draw(st.integers(1, 2)), cin, *field), (cin, cols, *kernel), attributes


def transpose_reads(x_shape, w_shape, attributes, y_shape):
    """(g, m, k) -> flat data element, from ONNX's definition: output o of channel
    g·N + n takes x[b, g·Cg + c, i]·w[g·Cg + c, n, kk] where o + pad = i·stride +
    kk·dilation; the im2col's K runs over (c, flipped kk)."""
    n = len(x_shape) - 2
    groups = attributes["group"]
    per_group = x_shape[1] // groups
    kernel, strides = attributes["kernel_shape"], attributes["strides"]
    dilations, pads = attributes["dilations"], attributes["pads"]
    outs = list(itertools.product(*map(range, y_shape[2:])))
    kernels = list(itertools.product(*map(range, kernel)))
    reads = {}
    for g, b, (oi, o), c, kk in itertools.product(range(groups), range(x_shape[0]),
                                                  enumerate(outs), range(per_group), kernels):
        i = []
        for a in range(n):
            q = o[a] + pads[a] - kk[a] * dilations[a]
            if q < 0 or q % strides[a] or q // strides[a] >= x_shape[2 + a]:
                break
            i.append(q // strides[a])
        else:
            flipped = [k - 1 - v for k, v in zip(kernel, kk, strict=True)]
            k_index = c * prod(kernel) + int(np.ravel_multi_index(flipped, kernel))
            reads[(g, b * len(outs) + oi, k_index)] = int(np.ravel_multi_index(
                (b, g * per_group + c, *i), x_shape))
    return reads


def readers_oracle(reads, dims, plan, tiles, size, num_tiles):
    groups, rows, inner, _ = dims
    blocks = {}
    for (g, m, k), e in reads.items():
        key = (part(g, groups, plan.groups), part(m, rows, plan.rows),
               part(k, inner, plan.inner))
        blocks.setdefault(key, set()).add(e)
    received, regions = np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64)
    for t in range(plan.tiles_used):
        key = (t // (plan.rows * plan.cols * plan.inner), t % plan.rows,
               (t // (plan.rows * plan.cols)) % plan.inner)
        elements = sorted(blocks.get(key, ()))
        received[t] = sum(tiles[e] != t for e in elements) * size
        regions[t] = sum(tiles[e] != t and (i == 0 or e != elements[i - 1] + 1
                                            or tiles[e] != tiles[elements[i - 1]])
                         for i, e in enumerate(elements))
    return received, regions


@settings(max_examples=40, deadline=None)
@given(transposed(), st.sampled_from([4, 16, 64]), st.integers(0, 2**31))
def test_conv_transpose_reads_exchange_and_weights_match_brute_force(conv, tiles, seed):
    x_shape, w_shape, attributes = conv
    target, rng = TARGETS[tiles], np.random.default_rng(seed)
    _, op = one_op_ir("ConvTranspose", x_shape, w_shape, dict(attributes))
    geometry = transpose_geometry(op)
    assert geometry is not None and has_layout_rule(op)
    y_shape = op.output(0).shape
    reads = transpose_reads(x_shape, w_shape, attributes, y_shape)
    # the im2col matmul of those reads, with the weights as the RHS view, is the op
    groups, rows, inner, cols = geometry.dims
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    lhs = np.zeros((groups, rows, inner), np.float64)
    for (g, m, k), e in reads.items():
        lhs[g, m, k] = x.reshape(-1)[e]
    rhs = np.zeros(groups * inner * cols)
    rhs[TRANSPOSE.rhs_index(geometry)] = w.reshape(-1)
    out = lhs @ rhs.reshape(groups, inner, cols)  # [G, (b, o), N]
    y = out.reshape(groups, x_shape[0], -1, cols).transpose(1, 0, 3, 2).reshape(y_shape)
    [expected] = REGISTRY.lookup(op).fold(op, [x, w])
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # what the tiles receive of the data, direct or through the createInput layout
    plan = target.matmul_plan(*geometry.dims, geometry.dtype)
    data = random_tiles(rng, x_shape, tiles)
    need = TRANSPOSE.data_need(geometry, data, target)
    wanted = TRANSPOSE.data_tiles(geometry, target)
    if plan.cols > REARRANGE_ABOVE_DESTINATIONS:
        copy = copy_oracle(wanted, data, 4, tiles)
        broadcast = readers_oracle(reads, geometry.dims, plan, wanted, 4, tiles)
        expected_need = (copy[0] + broadcast[0], copy[1] + broadcast[1])
    else:
        expected_need = readers_oracle(reads, geometry.dims, plan, data, 4, tiles)
    assert np.array_equal(need.received_bytes, expected_need[0])
    assert np.array_equal(need.regions, expected_need[1])
    # createInput: a read element on the LHS tile of its first reader
    lhs_tiles = target.matmul_tiles(*geometry.dims, geometry.dtype, "lhs")
    first = {}
    for (g, m, k), e in sorted(reads.items(), reverse=True):
        first[e] = lhs_tiles[(g * rows + m) * inner + k]
    assert all(wanted[e] == tile for e, tile in first.items())
    # createWeights through the flip: w[g*Cg + c, n, kk] on RHS tile (g, (c, flipped kk), n)
    rhs_tiles = target.matmul_tiles(*geometry.dims, geometry.dtype, "rhs")
    weights = TRANSPOSE.weight_tiles(geometry, target)
    per_group = x_shape[1] // groups
    kernel = attributes["kernel_shape"]
    for ci, n, *kk in itertools.product(*map(range, w_shape)):
        g, c = divmod(ci, per_group)
        flipped = [k - 1 - v for k, v in zip(kernel, kk, strict=True)]
        k_index = c * prod(kernel) + int(np.ravel_multi_index(flipped, kernel))
        assert weights[np.ravel_multi_index((ci, n, *kk), w_shape)] == \
            rhs_tiles[(g * inner + k_index) * cols + n]


def test_conv_transpose_forms_the_rule_does_not_model_are_listed():
    _, op = one_op_ir("ConvTranspose", (1, 2, 4), (2, 3, 3),
                      {"strides": [2], "output_shape": [9]})
    assert transpose_geometry(op) is None and not has_layout_rule(op)
    _, op = one_op_ir("ConvTranspose", (1, 2, 4), (2, 3, 3), {"auto_pad": "SAME_UPPER"})
    assert not has_layout_rule(op)


def test_the_baseline_lets_a_conv_transpose_create_data_and_weights():
    target = TARGETS[16]
    ir, op = one_op_ir("ConvTranspose", (2, 4, 5, 5), (4, 6, 3, 3),
                       {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]})
    plan = popart_baseline(ir, target)
    for name, index in (("x", 0), ("w", 1)):
        method = plan.decision(name).method
        assert method.startswith("created by ConvTranspose") and method.endswith(
            f"input {index}")
    geometry = transpose_geometry(op)
    assert np.array_equal(plan.decision("x").tiles.reshape(-1),
                          TRANSPOSE.data_tiles(geometry, target))
    assert np.array_equal(plan.decision("w").tiles.reshape(-1),
                          TRANSPOSE.weight_tiles(geometry, target))


# -- pools ------------------------------------------------------------------------------------
@st.composite
def pools(draw):
    n = draw(st.sampled_from([1, 2]))
    kernel = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    dilations = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    pads = [draw(st.integers(0, k // 2)) for k in kernel] * 2
    field = [draw(st.integers((k - 1) * d + 1, (k - 1) * d + 6))
             for k, d in zip(kernel, dilations, strict=True)]
    attributes = {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
                  "pads": pads, "ceil_mode": int(draw(st.booleans()))}
    name = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    if name == "AveragePool":
        attributes.pop("dilations")  # dilations entered AveragePool in opset 19
        dilations[:] = [1] * n
    return name, (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *field), attributes


def pool_oracle(x_shape, y_shape, attributes, x_tiles, y_tiles, size, num_tiles):
    """Each output element's window elements (ONNX: o·stride − pad + kk·dilation inside the
    field); per tile the distinct ones it does not hold, and their runs from one tile."""
    n = len(x_shape) - 2
    kernel, strides = attributes["kernel_shape"], attributes["strides"]
    dilations = attributes.get("dilations", [1] * n)
    pads = attributes["pads"]
    needed = {}
    for index in itertools.product(*map(range, y_shape)):
        b, c, o = index[0], index[1], index[2:]
        tile = int(y_tiles[np.ravel_multi_index(index, y_shape)])
        for kk in itertools.product(*map(range, kernel)):
            p = [o[a] * strides[a] - pads[a] + kk[a] * dilations[a] for a in range(n)]
            if all(0 <= p[a] < x_shape[2 + a] for a in range(n)):
                e = int(np.ravel_multi_index((b, c, *p), x_shape))
                if x_tiles[e] != tile:
                    needed.setdefault(tile, set()).add(e)
    received, regions = np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64)
    for tile, elements in needed.items():
        elements = sorted(elements)
        received[tile] = len(elements) * size
        regions[tile] = sum(i == 0 or e != elements[i - 1] + 1
                            or x_tiles[e] != x_tiles[elements[i - 1]]
                            for i, e in enumerate(elements))
    return received, regions


@settings(max_examples=40, deadline=None)
@given(pools(), st.sampled_from([4, 16, 64]), st.integers(0, 2**31))
def test_pool_exchange_matches_brute_force_and_wanted_input_is_best(pool, tiles, seed):
    name, x_shape, attributes = pool
    target, rng = TARGETS[tiles], np.random.default_rng(seed)
    _, op = one_op_ir(name, x_shape, None, dict(attributes))
    assert pool_geometry(op) is not None and has_layout_rule(op)
    y_shape = op.output(0).shape
    outputs = POOL.output_tiles(op, [None], target)
    assert np.array_equal(outputs[0], target.reduction_result_tiles(prod(y_shape), "float32"))
    x = random_tiles(rng, x_shape, tiles)
    need = POOL.exchange(op, [x], outputs, target)
    expected = pool_oracle(x_shape, y_shape, attributes, x, outputs[0], 4, tiles)
    assert np.array_equal(need.received_bytes, expected[0])
    assert np.array_equal(need.regions, expected[1])
    # the wanted layout: every read element on one of its readers' tiles, so each element
    # goes to every other reader tile once — the fewest bytes any layout can receive
    best = POOL.best_input_tiles(op, 0, outputs, target)
    received = int(POOL.exchange(op, [best], outputs, target).received_bytes.sum())
    readers: dict[int, set] = {}
    kernel, strides = attributes["kernel_shape"], attributes["strides"]
    dilations = attributes.get("dilations", [1] * (len(x_shape) - 2))
    for index in itertools.product(*map(range, y_shape)):
        b, c, o = index[0], index[1], index[2:]
        for kk in itertools.product(*map(range, kernel)):
            p = [o[a] * strides[a] - attributes["pads"][a] + kk[a] * dilations[a]
                 for a in range(len(o))]
            if all(0 <= p[a] < x_shape[2 + a] for a in range(len(o))):
                readers.setdefault(int(np.ravel_multi_index((b, c, *p), x_shape)), set()).add(
                    int(outputs[0][np.ravel_multi_index(index, y_shape)]))
    assert received == 4 * sum(len(t) - 1 for t in readers.values())
    assert all(best[e] in t for e, t in readers.items())
    assert received <= int(need.received_bytes.sum())
    assert POOL.least_received(op, [x], outputs, {0}, target) == received


def test_max_pool_indices_lie_with_the_values_and_pools_create_nothing():
    target = TARGETS[16]
    ir, op = one_op_ir("MaxPool", (2, 3, 8, 8), None,
                       {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                        "indices": True})
    values, indices = POOL.output_tiles(op, [None], target)
    assert np.array_equal(values, indices)
    assert POOL.creates_input(op, 0) is None  # popnn pooling Opx: Deadend
    assert popart_baseline(ir, target).decision("x").method == "linear"


def test_global_pools_are_spatial_reductions():
    b = Builder()
    x = b.add_input_tensor("float32", (2, 3, 4, 5), "x")
    b.add_output_tensor(b.op("GlobalAveragePool", [x], {}))
    ir = b.ir()
    [op] = ir.main_graph.ops
    rule = REGISTRY.layout_rule(op)
    assert rule.kind == "reduction" and has_layout_rule(op)
    assert rule._axes(op) == (2, 3)


def test_pool_forms_the_rule_does_not_model_are_listed():
    _, op = one_op_ir("MaxPool", (1, 2, 6, 6), None,
                      {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"})
    assert pool_geometry(op) is None and not has_layout_rule(op)
