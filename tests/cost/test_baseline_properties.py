"""Laws of the baseline and the cost model on random view chains into matmuls."""

from __future__ import annotations

import numpy as np
from cost_rules import RULES, const, small_target, weight
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.baselines import linear_plan, popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.ir import Builder
from popart_unwind.ir.tile_mapping import tile_array, tile_mapping

TILES = 32


@st.composite
def weight_chains(draw):
    """A weight reaching a matmul's rhs [K, N] through reshape, maybe transpose, maybe a
    slice of the inner axis; returns the IR and what each op did, for the oracle."""
    inner, cols = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    transposed = draw(st.booleans())
    extra = draw(st.integers(0, 3))  # rows of the weight the matmul never reads
    stored = (cols, inner + extra) if transposed else (inner + extra, cols)
    numel = stored[0] * stored[1]
    divisors = [d for d in range(1, numel + 1) if numel % d == 0]
    first = draw(st.sampled_from(divisors))
    shape = (first, numel // first)
    b = Builder()
    rows = draw(st.integers(1, 8))
    x = b.add_input_tensor("float32", (rows, inner), "x")
    w = weight(b, shape, "w")
    value = b.ai_onnx.reshape([w, const(b, list(stored), "stored")])
    if transposed:
        value = b.ai_onnx.transpose([value], perm=[1, 0])
    if extra:
        value = b.ai_onnx.slice([value, const(b, [0], "s"), const(b, [inner], "e"),
                                 const(b, [0], "a")])
    b.add_output_tensor(b.ai_onnx.matmul([x, value]))
    return b.ir(), (rows, inner, cols, transposed, extra, shape)


@settings(max_examples=60, deadline=None)
@given(weight_chains())
def test_every_baseline_mapping_covers_each_element_once_with_tiles_in_range(case):
    ir, _ = case
    target = small_target(TILES)
    plan = popart_baseline(ir, target, registry=RULES)
    assert [key for key in plan.mappings] == [
        (g.id, t.id) for g in ir.graphs for t in g.producerless_tensors()]
    for (graph_id, tensor_id), tiles in plan.mappings.items():
        tensor = ir.graph(graph_id).tensor(tensor_id)
        assert tiles.shape == (tensor.nelms(),)
        assert tiles.size == 0 or (tiles.min() >= 0 and tiles.max() < TILES)
        # Poplar's format round-trips: each element on exactly one tile
        assert np.array_equal(tile_array(tile_mapping(tiles, TILES), tiles.size, TILES),
                              tiles)


@settings(max_examples=60, deadline=None)
@given(weight_chains())
def test_the_unwound_weight_viewed_through_the_chain_is_the_creator_layout(case):
    ir, (rows, inner, cols, transposed, extra, _) = case
    target = small_target(TILES)
    tiles = popart_baseline(ir, target, registry=RULES).decision("w").tiles
    view = tiles.reshape((cols, inner + extra) if transposed else (inner + extra, cols))
    if transposed:
        view = view.T
    wanted = target.matmul_tiles(1, rows, inner, cols, "float32", "rhs").reshape(inner, cols)
    assert np.array_equal(view[:inner], wanted)


@settings(max_examples=30, deadline=None)
@given(weight_chains())
def test_cost_report_invariants(case):
    ir, _ = case
    target = small_target(TILES)
    for plan in (popart_baseline(ir, target, registry=RULES).mappings,
                 linear_plan(ir, target)):
        report = evaluate(ir, target, plan, registry=RULES)
        assert report.received_bytes_per_tile.sum() == report.exchange_bytes
        assert sum(row.exchange_bytes for row in report.ops) == report.exchange_bytes
        assert 0 <= report.objective <= report.upper_bound
        parameters = sum(t.nelms() * target.dtype_size(t.dtype)
                         for g in ir.graphs for t in g.producerless_tensors())
        assert report.resident_bytes_per_tile.sum() >= parameters
        assert report.max_tile_bytes == report.resident_bytes_per_tile.max()
