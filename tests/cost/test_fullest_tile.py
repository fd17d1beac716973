"""The fullest tile (CostReport.fullest_tile): which tile, its peak, the op at which the
peak is first reached and what fills the tile then — by hand on small graphs, and against a
brute-force replay of the schedule on random ones."""

from __future__ import annotations

import numpy as np
from cost_rules import RULES, small_target
from hypothesis import given, settings
from test_liveness import BYTES, SHAPE, call_ir, on, random_chains, replay

from popart_unwind.cost import evaluate
from popart_unwind.cost.liveness import FULLEST_TILE_TOP
from popart_unwind.ir import Builder
from popart_unwind.report.summary import fullest_tile_line
from popart_unwind.target import IpuModel, TileTarget


def two_chains_ir():
    """b = neg(a = relu(x)) with x on tile 0; d = neg(c = relu(w)) with w, twice x's size,
    on tile 1: tile 1 is fullest (w, c and d at once, at op d). a and c are outputs too, so
    no negation overwrites them."""
    builder = Builder()
    x = builder.add_input_tensor("float32", SHAPE, "x")
    w = builder.add_initialized_input_tensor(np.zeros((8, 8), np.float32), "w")
    a = builder.ai_onnx.relu([x], name="a")
    c = builder.ai_onnx.relu([w], name="c")
    builder.add_output_tensor(builder.ai_onnx.neg([a], name="b"))
    builder.add_output_tensor(builder.ai_onnx.neg([c], name="d"))
    builder.add_output_tensor(a)
    builder.add_output_tensor(c)
    return builder.ir()


def test_the_fullest_tile_by_hand():
    report = evaluate(two_chains_ir(), small_target(4),
                      {("", "x"): on(0), ("", "w"): on(1, 64)})
    fullest = report.fullest_tile
    # tile 0: x, a, b = 3 × 128 B; tile 1: w, c, d = 3 × 256 B, all live at op d
    assert report.peak_bytes_per_tile.tolist() == [3 * BYTES, 6 * BYTES, 0, 0]
    assert (fullest.tile, fullest.bytes, fullest.always_live_bytes) == (1, 6 * BYTES,
                                                                       2 * BYTES)
    assert (fullest.op, fullest.graph) == ("d", "")
    assert fullest.largest == (("c:0", 2 * BYTES), ("d:0", 2 * BYTES), ("w", 2 * BYTES))


def test_the_summary_line_names_tile_op_tensors_and_the_overshoot():
    target = TileTarget(IpuModel(tiles_per_ipu=4, bytes_per_tile=4 * BYTES))
    report = evaluate(two_chains_ir(), target, {("", "x"): on(0), ("", "w"): on(1, 64)})
    line = fullest_tile_line(report.fullest_tile, report.bytes_per_tile)
    assert line == ("fullest tile 1: 768 B of 512 B at op d (largest: c:0 256 B, d:0 256 B, "
                    "w 256 B); over the budget by 256 B (50.0%)")
    roomy = fullest_tile_line(report.fullest_tile, 2 ** 20)
    assert roomy.startswith("fullest tile 1: 768 B of 1,024 KiB at op d")
    assert "over" not in roomy


def test_a_call_counts_its_subgraph_peak_on_the_tile():
    ir = call_ir()
    report = evaluate(ir, small_target(4), {("", "x"): on(0), ("sub", "s"): on(1)},
                      registry=RULES)
    call = next(op for op in ir.main_graph.ops if op.called_graphs())
    fullest = report.fullest_tile
    # at the call: its output and the callee's own peak: its input s (the call's copy in)
    # with the first relu, then the two relus
    assert (fullest.tile, fullest.bytes) == (1, 3 * BYTES)
    assert fullest.op == (call.name or call.debug_name())
    output = call.output(0).id
    assert fullest.largest == (("sub (subgraph peak)", 2 * BYTES), (output, BYTES))


def test_without_ops_the_fullest_tile_holds_the_most_always_live_bytes():
    builder = Builder()
    x = builder.add_input_tensor("float32", SHAPE, "x")
    builder.add_output_tensor(x)
    report = evaluate(builder.ir(), small_target(4), {("", "x"): on(2)})
    fullest = report.fullest_tile
    assert (fullest.tile, fullest.bytes, fullest.op, fullest.largest) == (
        2, BYTES, None, (("x", BYTES),))


@settings(max_examples=40, deadline=None)
@given(random_chains())
def test_the_fullest_tile_matches_a_replay_of_the_schedule(case):
    ir, plan = case
    report = evaluate(ir, small_target(8), plan)
    fullest = report.fullest_tile
    _, steps, _ = replay(ir, small_target(8), plan)
    most = max(int(total.max()) for _, total, _ in steps)
    assert fullest.bytes == most == report.peak_tile_bytes
    # the first step reaching it, the lowest tile at that step reaching it
    op, total, holdings = next(s for s in steps if int(s[1].max()) == most)
    tile = int(np.argmax(total))
    assert (fullest.tile, fullest.op) == (tile, op.name or op.debug_name())
    ranked = sorted(((name, int(held[tile])) for name, held in holdings.items()
                     if held[tile] > 0), key=lambda item: (-item[1], item[0]))
    assert fullest.largest == tuple(ranked[:FULLEST_TILE_TOP])
    assert sum(held for _, held in fullest.largest) <= fullest.bytes
