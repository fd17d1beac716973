"""The layout rules of ScatterND / ScatterElements (an in-place update) and GatherElements:
exchange against brute-force counts, the uniform-destination assumption, the lower bound of
what a plan leaves to save, and what the planner and the baseline make of an embedding's
gradient."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_testing import small_target, weight
from popart_unwind.transforms import plan_ir

from popart_unwind.baselines import popart_baseline
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir.tile_mapping import tile_array
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.coverage import has_layout_rule
from popart_unwind.options import UnwindValuations

TILES = 8
TARGET = small_target(TILES)
SETTINGS = settings(max_examples=40, deadline=None)


def one_op(name, data_shape, indices, updates_shape, attributes, constant_indices=True):
    """An Ir with one op ``name`` over a weight ``data``, indices (a constant, or an input
    of their shape) and an input ``updates`` (None for GatherElements)."""
    b = Builder()
    data = weight(b, data_shape, "data")
    ids = (b.add_constant(indices, "ids") if constant_indices
           else b.add_input_tensor("int64", list(indices.shape), "ids"))
    inputs = [data, ids]
    if updates_shape is not None:
        inputs.append(b.add_input_tensor("float32", list(updates_shape), "updates"))
    b.add_output_tensor(b.op(name, inputs, attributes))
    ir = b.ir()
    [op] = [op for op in ir.main_graph.ops if op.type.name == name]
    return ir, op, REGISTRY.layout_rule(op)


def brute_scatter_nd_bytes(data_shape, indices, out, updates, index_tiles, depth):
    """Bytes received, counted element by element: every update element goes to the tile
    of its destination element, which also reads the index entries naming it; a (tile,
    element) pair is received once."""
    row = int(np.prod(data_shape[depth:]))
    pairs_updates, pairs_indices = set(), set()
    columns = indices.reshape(-1, depth)
    for r, column in enumerate(columns):
        base = int(np.ravel_multi_index(tuple(int(c) % data_shape[k]
                                              for k, c in enumerate(column)),
                                        data_shape[:depth]))
        for c in range(row):
            tile = out[base * row + c]
            if updates[r * row + c] != tile:
                pairs_updates.add((tile, r * row + c))
            for k in range(depth):
                if index_tiles[r * depth + k] != tile:
                    pairs_indices.add((tile, r * depth + k))
    return 4 * len(pairs_updates) + 8 * len(pairs_indices)


@SETTINGS
@given(st.integers(1, 7), st.integers(1, 5), st.integers(1, 9), st.data())
def test_scatter_nd_exchange_equals_a_brute_force_count(entries, size, rows, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    indices = rng.integers(-entries, entries, (rows, 1)).astype(np.int64)  # duplicates too
    _, op, rule = one_op("ScatterND", (entries, size), indices, (rows, size),
                         {"reduction": "add"})
    tiles = [rng.integers(0, TILES, n) for n in (entries * size, rows, rows * size)]
    [out] = rule.output_tiles(op, tiles, TARGET)
    assert np.array_equal(out, tiles[0])  # updated in place: the data's layout
    need = rule.exchange(op, tiles, [out], TARGET)
    expected = brute_scatter_nd_bytes((entries, size), indices, out, tiles[2], tiles[1], 1)
    assert int(need.received_bytes.sum()) == expected


def test_scatter_nd_with_two_index_columns_counts_each_entry():
    indices = np.array([[0, 1], [2, 0], [0, 1]], np.int64)
    _, op, rule = one_op("ScatterND", (3, 2, 4), indices, (3, 4), {"reduction": "add"})
    rng = np.random.default_rng(5)
    tiles = [rng.integers(0, TILES, n) for n in (24, 6, 12)]
    need = rule.exchange(op, tiles, [tiles[0]], TARGET)
    expected = brute_scatter_nd_bytes((3, 2, 4), indices, tiles[0], tiles[2], tiles[1], 2)
    assert int(need.received_bytes.sum()) == expected


def test_unknown_indices_spread_destinations_uniformly():
    """Three update rows into a table of six: rows 0, 2 and 4; nine into three: each row
    three times."""
    ids = np.zeros((3, 1), np.int64)
    _, op, rule = one_op("ScatterND", (6, 2), ids, (3, 2), {"reduction": "add"},
                         constant_indices=False)
    assert rule.destinations(op).tolist() == [0, 1, 4, 5, 8, 9]
    _, op, rule = one_op("ScatterND", (3, 1), np.zeros((9, 1), np.int64), (9, 1),
                         {"reduction": "add"}, constant_indices=False)
    assert rule.destinations(op).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    _, op, rule = one_op("ScatterElements", (2, 6), np.zeros((2, 3), np.int64), (2, 3),
                         {"axis": 1, "reduction": "add"}, constant_indices=False)
    assert rule.destinations(op).tolist() == [0, 2, 4, 6, 8, 10]


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_scatter_elements_exchange_equals_a_brute_force_count(shape, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    axis = data.draw(st.integers(0, len(shape) - 1))
    index_shape = tuple(int(rng.integers(1, d + 1)) for d in shape)
    indices = rng.integers(-shape[axis], shape[axis], index_shape).astype(np.int64)
    _, op, rule = one_op("ScatterElements", tuple(shape), indices, index_shape,
                         {"axis": axis, "reduction": "add"})
    count = int(np.prod(index_shape))
    tiles = [rng.integers(0, TILES, n) for n in (int(np.prod(shape)), count, count)]
    need = rule.exchange(op, tiles, [tiles[0]], TARGET)
    pairs = set()
    for position in np.ndindex(*index_shape):
        k = int(np.ravel_multi_index(position, index_shape))
        target = list(position)
        target[axis] = int(indices[position]) % shape[axis]
        tile = tiles[0][int(np.ravel_multi_index(tuple(target), tuple(shape)))]
        pairs |= {(4, tile, k)} if tiles[2][k] != tile else set()
        pairs |= {(8, tile, k)} if tiles[1][k] != tile else set()
    assert int(need.received_bytes.sum()) == sum(size for size, _, _ in pairs)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 8), st.data())
def test_least_received_bounds_every_layout_of_the_planned_data(entries, size, rows, data):
    """With the data planned, no data layout (the output follows it) makes the scatter
    receive less than ``least_received``."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    indices = rng.integers(0, entries, (rows, 1)).astype(np.int64)
    _, op, rule = one_op("ScatterND", (entries, size), indices, (rows, size),
                         {"reduction": "add"})
    tiles = [rng.integers(0, TILES, n) for n in (entries * size, rows, rows * size)]
    bound = rule.least_received(op, tiles, [tiles[0]], {0}, TARGET)
    for _ in range(5):
        layout = rng.integers(0, TILES, entries * size)
        trial = [layout, tiles[1], tiles[2]]
        assert rule.exchange(op, trial, [layout], TARGET).received_bytes.sum() >= bound
    assert rule.least_received(op, tiles, [tiles[0]], {0, 2}, TARGET) == 0


def test_gather_elements_is_computed_where_its_indices_lie():
    indices = np.array([[2, 0, 1], [1, 1, 0]], np.int64)  # rows of data [3, 3] by column
    _, op, rule = one_op("GatherElements", (3, 3), indices, None, {"axis": 0})
    rng = np.random.default_rng(1)
    data_tiles, index_tiles = rng.integers(0, TILES, 9), rng.integers(0, TILES, 6)
    [out] = rule.output_tiles(op, [data_tiles, index_tiles], TARGET)
    assert np.array_equal(out, index_tiles)
    reads = [indices[i, j] * 3 + j for i in range(2) for j in range(3)]
    assert rule.sources(op).tolist() == reads
    pairs = {(int(out[k]), r) for k, r in enumerate(reads) if data_tiles[r] != out[k]}
    need = rule.exchange(op, [data_tiles, index_tiles], [out], TARGET)
    assert int(need.received_bytes.sum()) == 4 * len(pairs)
    best = rule.best_input_tiles(op, 0, [out], TARGET)
    assert rule.exchange(op, [best, index_tiles], [out], TARGET).received_bytes.sum() \
        == rule.least_received(op, [data_tiles, index_tiles], [out], {0}, TARGET)
    assert rule.creates_input(op, 0) is None and rule.creates_input(op, 1) is None


def test_models_only_the_reductions_onnx_defines():
    _, op, _ = one_op("ScatterND", (4, 2), np.zeros((1, 1), np.int64), (1, 2),
                         {"reduction": "max"})
    assert has_layout_rule(op)
    op.attributes["reduction"] = "median"
    assert not has_layout_rule(op)


def embedding_step(reduction: str = "add"):
    """An embedding's SGD step: rows = table[ids]; d = ScatterND(zeros, ids, grad) (torch's
    embedding_dense_backward); table - 0.1 * d."""
    b = Builder()
    table = weight(b, (40, 16), "table")
    ids = b.add_input_tensor("int64", [6], "ids")
    grad = b.add_input_tensor("float32", [6, 16], "grad")
    b.add_output_tensor(b.op("Gather", [table, ids], {"axis": 0}))
    zeros = b.add_constant(np.zeros((40, 16), np.float32), "zeros")
    column = b.op("Unsqueeze", [ids, np.array([1], np.int64)])
    d = b.op("ScatterND", [zeros, column, grad], {"reduction": reduction})
    step = b.op("Mul", [d, np.array(0.1, np.float32)])
    b.add_output_tensor(b.op("Sub", [table, step]))
    return b.ir()


def test_planner_gives_the_zeros_the_layout_the_weight_update_wants():
    ir = embedding_step()
    plan_ir(ir, small_target(16))
    zeros, table = (ir.main_graph.tensor(name) for name in ("zeros", "table"))
    zeros, table = (tile_array(t.tile_mapping, t.nelms(), len(t.tile_mapping))
                    for t in (zeros, table))
    assert np.array_equal(zeros, table)
    assert np.array_equal(table, small_target(16).sliceable_tiles(40, 16, "float32"))


def test_baseline_makes_the_zeros_the_sliceable_output_popart_creates():
    ir = embedding_step()
    target = small_target(16)
    plan = popart_baseline(ir, target)
    decision = plan.decision("zeros")
    assert decision.method.startswith("created by ScatterND")
    assert np.array_equal(decision.tiles, target.sliceable_tiles(40, 16, "float32"))
    grad = plan.decision("grad")
    assert grad.method.startswith("created by ScatterND")
    assert np.array_equal(grad.tiles, target.sliceable_tiles(6, 16, "float32"))


def test_scatter_elements_creates_along_its_axis():
    _, op, rule = one_op("ScatterElements", (3, 5), np.zeros((3, 2), np.int64), (3, 2),
                         {"axis": 1})
    wanted = rule.wanted_input_tiles(op, 0, TARGET)
    moved = TARGET.sliceable_tiles(5, 3, "float32").reshape(5, 3)
    assert np.array_equal(wanted, moved.T.reshape(-1))
    assert rule.creates_input(op, 1) is None


def test_gather_elements_has_no_valued_pair_so_no_agreement():
    _, op, rule = one_op("GatherElements", (4, 2), np.zeros((4, 2), np.int64), None, {})
    assert rule.agreement(op, [None, None], TARGET, UnwindValuations()) == (0.0, 0.0)


def test_a_scatter_scores_its_planned_data_against_the_sliceable_layout():
    _, op, rule = one_op("ScatterND", (4, 2), np.zeros((1, 1), np.int64), (1, 2), {})
    values = UnwindValuations()
    bound = values.scatter_data * 8
    assert rule.agreement(op, [None, None, None], TARGET, values) == (0.0, bound)
    wanted = rule.wanted_input_tiles(op, 0, TARGET)
    assert rule.agreement(op, [wanted, None, None], TARGET, values) == (bound, bound)


def test_the_zeros_a_scatter_fills_are_planned_sliceable_when_nothing_else_wants_them():
    """ScatterElements into a zero table, then a Relu: the zeros (and so the result) take
    popops' sliceable layout, as PopART's scatter makes its result (the embedding step
    above shows a weight update's pair winning over it)."""
    b = Builder()
    zeros = b.add_constant(np.zeros((16, 32), np.float32), "zeros")
    indices = b.add_input_tensor("int64", (4, 32), "i")
    updates = b.add_input_tensor("float32", (4, 32), "u")
    b.add_output_tensor(b.op("Relu", [b.op("ScatterElements", [zeros, indices, updates],
                                           {"axis": 0})]))
    ir = b.ir()
    target = small_target(16)
    plan = plan_ir(ir, target)
    op = next(op for op in ir.main_graph.ops if op.type.name == "ScatterElements")
    tensor = ir.main_graph.tensor("zeros")
    laid = tile_array(tensor.tile_mapping, tensor.nelms(), len(tensor.tile_mapping))
    wanted = REGISTRY.layout_rule(op).wanted_input_tiles(op, 0, target)
    assert np.array_equal(laid, wanted)
    assert plan.objective == plan.upper_bound
