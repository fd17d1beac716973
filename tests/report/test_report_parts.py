"""The report's tensor sections without a browser: what a difference is worth, the layout
drawings' cells, the page's data, and the page's bytes whatever the hash seed."""

from __future__ import annotations

import html
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from popart_unwind.cli import main
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.machine import IpuModel
from popart_unwind.report import layout_data
from popart_unwind.report.differences import (
    planned_readers,
    ranked_differences,
    tensor_worths,
)
from popart_unwind.report.progress import StageProgress
from popart_unwind.report.session import plan_session, transform

TILES = 16


def plan_model(model: onnx.ModelProto, tiles: int = TILES):
    ir = import_onnx(model)
    transform(ir)
    with StageProgress(io.StringIO(), enabled=False) as progress:
        return plan_session(ir, IpuModel(tiles_per_ipu=tiles), None, "popart", progress)


def two_biases_model() -> onnx.ModelProto:
    """``(x @ transpose(w) + b1) * b2 + c``: w reaches the matmul through a view only; b1
    and b2 are broadcast operands PopART maps linearly; c is read by one Add alone."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w"),
               numpy_helper.from_array(np.ones(64, np.float32), "b1"),
               numpy_helper.from_array(np.ones(64, np.float32), "b2"),
               numpy_helper.from_array(np.ones((8, 64), np.float32), "c")]
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="view"),
             helper.make_node("MatMul", ["x", "wt"], ["xw"], name="matmul"),
             helper.make_node("Add", ["xw", "b1"], ["s"], name="add_b1"),
             helper.make_node("Mul", ["s", "b2"], ["m"], name="mul_b2"),
             helper.make_node("Add", ["m", "c"], ["y"], name="add_c")]
    graph = helper.make_graph(nodes, "biases",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])],
                              initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def run():
    return plan_model(two_biases_model())


def op_ids(run, *names):
    graph = run.ir.graphs[0]
    return sorted((graph.id, op.id) for op in graph.ops if op.name in names)


def test_readers_follow_views(run):
    readers = planned_readers(run)
    main_graph = run.ir.graphs[0].id
    assert readers[(main_graph, "w")] == op_ids(run, "matmul")  # through the transpose
    assert readers[(main_graph, "b1")] == op_ids(run, "add_b1")
    assert readers[(main_graph, "c")] == op_ids(run, "add_c")
    assert readers[(main_graph, "x")] == op_ids(run, "matmul")


def swapped_readers(run, key):
    """The oracle: our plan costed again in full with only ``key`` laid out as PopART lays
    it out; its readers' exchange bytes and cycles."""
    from popart_unwind.cost.walk import evaluate
    from popart_unwind.machine import TileTarget

    mappings = dict(run.layouts["ours"].held)
    mappings[key] = run.layouts["popart"][key]
    report = evaluate(run.ir, TileTarget(run.model), mappings=mappings,
                      op_plans=run.op_plans["ours"])
    rows = {(r.graph_id, r.op_id): r for r in report.ops}
    ops = planned_readers(run).get(key, [])
    return (sum(rows[op].exchange_bytes for op in ops),
            sum(rows[op].total_cycles for op in ops))


def test_worth_is_what_popart_layout_of_that_tensor_alone_costs_its_readers(run):
    worths = tensor_worths(run)
    rows = {(r.graph_id, r.op_id): r for r in run.costs["ours"].ops}
    main_graph = run.ir.graphs[0].id
    for key, worth in worths.items():
        ops = planned_readers(run).get(key, [])
        assert worth.exchange_bytes["ours"] == sum(rows[op].exchange_bytes for op in ops)
        assert worth.cycles["ours"] == sum(rows[op].total_cycles for op in ops)
        for plan in ("ours", "popart"):
            tiles = run.layouts[plan][key]
            assert worth.tile_bytes[plan] == 4 * int(np.bincount(tiles).max())
        assert worth.on_other_tiles == (not np.array_equal(run.layouts["ours"][key],
                                                           run.layouts["popart"][key]))
        if worth.on_other_tiles:  # no reader here reads a result of the same tensor
            assert (worth.exchange_bytes["popart"], worth.cycles["popart"]) \
                == swapped_readers(run, key)
        else:
            assert worth.saved("exchange_bytes") == worth.saved("cycles") == 0
    # PopART maps the broadcast biases linearly from tile 0; ours spreads them
    b1 = worths[(main_graph, "b1")]
    assert b1.on_other_tiles and b1.saved("tile_bytes") > 0 and b1.differs


def test_gains_and_losses_are_listed_apart_each_ranked(run):
    worths = tensor_worths(run)
    gains, losses = ranked_differences(worths)
    assert gains  # the biases
    for found, sign in ((gains, 1), (losses, -1)):
        assert all(w.differs for w in found)
        for w in found:
            first = next(v for v in (w.saved("exchange_bytes"), w.saved("cycles"),
                                     w.saved("tile_bytes")) if v)
            assert first * sign > 0
        sizes = [abs(w.saved("exchange_bytes")) for w in found]
        assert sizes == sorted(sizes, reverse=True)
    assert {w.key for w in gains + losses} == {k for k, w in worths.items() if w.differs}


def test_a_tensor_whose_tiles_change_no_figure_is_not_laid_out_otherwise():
    """A scalar every tile of its reader receives: wherever it lies, the reader's exchange
    and cycles are the same, so moving it is worth 0."""
    from popart_unwind.machine import TileTarget
    from popart_unwind.report.swap_walk import swapped_figures

    weights = [numpy_helper.from_array(np.array(2.0, np.float32), "s"),
               numpy_helper.from_array(np.ones((16, 64), np.float32), "w")]
    nodes = [helper.make_node("Mul", ["x", "s"], ["xs"], name="scale"),
             helper.make_node("Add", ["xs", "w"], ["y"], name="add_w")]
    graph = helper.make_graph(nodes, "scalar",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])],
                              initializer=weights)
    run = plan_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    s_key = (run.ir.graphs[0].id, "s")
    ours = int(run.layouts["ours"][s_key][0])
    elsewhere = {s_key: np.array([(ours + 5) % TILES])}
    found = swapped_figures(run.ir, TileTarget(run.model), run.layouts["ours"].held,
                            run.op_plans["ours"], elsewhere, [s_key])
    (mine, theirs), = found[s_key].values()
    assert mine == theirs  # the scale op receives the scalar on every tile it uses but one
    rows = {(r.graph_id, r.op_id): r for r in run.costs["ours"].ops}
    (op,) = op_ids(run, "scale")
    assert mine == (rows[op].exchange_bytes, rows[op].total_cycles)
    assert mine[0] > 0
    worth = tensor_worths(run)[s_key]
    assert not worth.differs and worth.saved("exchange_bytes") == 0


def test_each_of_two_tensors_one_op_reads_is_worth_its_own_layout():
    """One Add reads two biases of the same shape, both laid out otherwise than PopART:
    each is priced with only itself in PopART's layout (the oracle: the full walk)."""
    weights = [numpy_helper.from_array(np.ones(64, np.float32), name) for name in ("p", "q")]
    nodes = [helper.make_node("Add", ["p", "q"], ["pq"], name="add"),
             helper.make_node("Add", ["x", "pq"], ["y"], name="add_x")]
    graph = helper.make_graph(nodes, "two",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])],
                              initializer=weights)
    run = plan_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    worths = tensor_worths(run)
    for name in ("p", "q"):
        key = (run.ir.graphs[0].id, name)
        assert worths[key].on_other_tiles and worths[key].readers == 1
        assert (worths[key].exchange_bytes["popart"], worths[key].cycles["popart"]) \
            == swapped_readers(run, key)
    x = worths[(run.ir.graphs[0].id, "x")]
    assert x.readers == 1  # add_x reads pq, computed: no planned tensor


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=300))
def test_run_length_cells_decode_to_themselves(cells):
    text = layout_data.run_length(np.array(cells))
    assert re.fullmatch(r"([a-j]\d*)+", text)
    assert layout_data.decode(text, len(cells)).tolist() == cells


def test_levels_draw_a_linear_mapping_as_a_staircase():
    tiles = np.repeat(np.arange(8), 16)  # 128 elements, 16 per tile, tiles 0..7
    first, end, element_bins, tile_bins = layout_data.frame({"ours": tiles}, 128, 1472)
    assert (first, end, element_bins, tile_bins) == (0, 8, 64, 8)
    cells = layout_data.levels(tiles, first, end, element_bins, tile_bins)
    assert cells.shape == (64, 8)
    assert (cells.argmax(axis=1) == np.arange(64) // 8).all()  # the staircase
    assert (cells.max(axis=1) == layout_data.LEVELS).all()  # each bin on one tile, all of it


def test_a_scattered_layout_stays_within_the_drawing_budget():
    rng = np.random.default_rng(0)
    ours, theirs = rng.integers(0, 1472, 200_000), rng.integers(0, 1472, 200_000)
    drawn = layout_data.encoded_layouts({"ours": ours, "popart": theirs}, 200_000, 1472)
    first, end, element_bins, tile_bins, numel = drawn["frame"]
    assert numel == 200_000 and (first, end) == (0, 1472)
    assert sum(len(cells) for _, cells in drawn["plans"].values()) \
        <= layout_data.DRAWING_BUDGET
    for used, cells in drawn["plans"].values():
        assert used == 1472
        layout_data.decode(cells, element_bins * tile_bins)


def odd_names_model() -> onnx.ModelProto:
    """A weight whose name could end the page's script or break its markup."""
    name = 'w</script><b>"&'
    weight = numpy_helper.from_array(np.ones((8, 8), np.float32), name)
    nodes = [helper.make_node("MatMul", ["x", name], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "odd",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                              initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_page_data_holds_every_tensor_and_no_name_escapes_it(tmp_path):
    model = tmp_path / "odd.onnx"
    onnx.save(odd_names_model(), str(model))
    status = main(["plan", str(model), "--tiles", str(TILES), "--quiet", "--report",
                   str(tmp_path / "report"), "--out", str(tmp_path / "plan.json")],
                  stdout=io.StringIO(), stderr=io.StringIO())
    assert status == 0
    page = (tmp_path / "report" / "index.html").read_text()
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert page.count("</script>") == 2  # the data's and the script's own
    found = re.search(r'<script type="application/json" id="tensor-data">(.*?)</script>',
                      page, re.S)
    data = json.loads(found.group(1))
    assert sorted(t[0] for t in data["tensors"]) == sorted(plan["tensors"])
    assert [t[1] for t in data["tensors"]] == [plan["tensors"][t[0]]["explanation"]
                                               for t in data["tensors"]]
    assert data["plans"] == ["ours", "popart"] and data["tiles"] == TILES
    assert "<code>odd.onnx</code>" in page and html.escape('w</script><b>"&') in page
    rows = re.findall(r'<tr id="tensor-(\d+)"', page)
    assert [int(i) for i in rows] == list(range(len(plan["tensors"])))


def test_the_page_is_the_same_bytes_whatever_the_hash_seed(tmp_path):
    pages = []
    for seed in ("1", "2"):
        folder = tmp_path / f"report{seed}"
        subprocess.run([sys.executable, "-m", "popart_unwind.cli", "demo", "--tiles", "32",
                        "--report", str(folder), "--quiet"], check=True, timeout=300,
                       env={**os.environ, "PYTHONHASHSEED": seed},
                       cwd=tmp_path)  # the installed package, not the source tree
        pages.append(sorted((p.name, p.read_bytes()) for p in Path(folder).iterdir()
                            if not p.name.startswith(".")))
    assert pages[0] == pages[1]


def test_without_popart_the_page_says_no_comparison_was_made(tmp_path):
    model = tmp_path / "odd.onnx"
    onnx.save(odd_names_model(), str(model))
    status = main(["plan", str(model), "--tiles", str(TILES), "--quiet", "--baseline",
                   "linear", "--report", str(tmp_path / "report")],
                  stdout=io.StringIO(), stderr=io.StringIO())
    assert status == 0
    page = (tmp_path / "report" / "index.html").read_text()
    assert "No comparison: PopART's plan was not made" in page
    assert 'id="differs-filter"' not in page and 'id="method-filter"' in page
    found = re.search(r'id="tensor-data">(.*?)</script>', page, re.S)
    assert json.loads(found.group(1))["plans"] == ["ours"]


def test_ops_planned_otherwise_rank_by_cycles_then_bytes_saved():
    """With rotated start tiles ours plans every matmul from another tile than PopART."""
    from transformer_block import transformer_block_ir

    from popart_unwind.options import with_options
    from popart_unwind.report.differences import differing_ops

    ir = transformer_block_ir()
    ir.options = with_options(ir.options, ["rotate_plan_start_tiles=true"])
    transform(ir)
    with StageProgress(io.StringIO(), enabled=False) as progress:
        run = plan_session(ir, IpuModel(), None, "popart", progress)
    ops = differing_ops(run)
    assert ops and all(op.plans["ours"] != op.plans["popart"] for op in ops)
    assert len(ops) == sum(op.plans.get("ours") != op.plans.get("popart")
                           for op in run.planned_ops)
    received = {plan: {(r.graph_id, r.op_id): r.exchange_bytes for r in run.costs[plan].ops}
                for plan in ("ours", "popart")}
    ranks = [(op.cycles["ours"] - op.cycles["popart"],
              received["ours"][(op.graph_id, op.op_id)]
              - received["popart"][(op.graph_id, op.op_id)]) for op in ops]
    assert ranks == sorted(ranks)
