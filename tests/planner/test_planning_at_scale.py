"""What keeps planning linear in the model's size: each guard fails if its cause comes back
(a search started where nothing can be gained, a per-op scan of the graph's inputs, a list
per empty tile in the plan file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from planner_testing import small_target
from popart_unwind.transforms import plan_ir

from popart_unwind.ir import Ir
from popart_unwind.ir.graph import TensorIds
from popart_unwind.ir.tile_mapping import TileIntervals
from popart_unwind.machine import IpuModel
from popart_unwind.ops import shape_folding
from popart_unwind.report.plan_file import TensorDecision, build_plan_document, dumps_plan
from popart_unwind.unwind import exact
from popart_unwind.unwind.random_graphs import random_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from memory_at_size import nested_if_model


def _no_search(*args, **kwargs):
    raise AssertionError("the exact search was started")


def test_nested_ifs_plan_at_the_upper_bound_without_a_search(monkeypatch):
    """Twelve nested Ifs: deferral satisfies every pair, so the exact program (whose root
    HiGHS did not finish in 100 s at 15 levels) is never built, and the plan is proven."""
    monkeypatch.setattr(exact, "solve_exact", _no_search)
    result = plan_ir(Ir.from_onnx(nested_if_model(12)), small_target(8))
    assert result.proven_optimal
    assert result.solver == "hybrid"


def test_hybrid_skips_the_search_exactly_when_the_heuristic_reaches_the_bound(monkeypatch):
    """On random graphs: wherever deferral scores the upper bound, hybrid returns deferral's
    paths, proven, without searching; elsewhere it searches as before."""
    at_bound = searched = 0
    for seed in range(40):
        graph = random_graph(np.random.default_rng(seed), 2)
        deferral = graph.solve("deferral")
        if deferral.score() >= deferral.upper_bound():
            at_bound += 1
            with monkeypatch.context() as patch:
                patch.setattr(exact, "solve_exact", _no_search)
                hybrid = graph.solve("hybrid")
            assert hybrid.proven_optimal
            assert hybrid.stats["finish"] == "upper bound"
            assert repr(hybrid.sink_paths()) == repr(deferral.sink_paths())
        elif graph.valued_pairs():
            searched += 1
            assert graph.solve("hybrid").stats["finish"] != "upper bound"
    assert at_bound and searched  # both branches were exercised


def test_layout_check_lists_the_graph_inputs_only_once_reached(monkeypatch):
    """``value_dependent_layout`` follows each op's value-read operands back; it once
    listed every graph input per op (quadratic for many small inputs)."""
    count = 300
    nodes = [helper.make_node("Add", [f"a{i}", f"b{i}"], [f"y{i}"]) for i in range(count)]
    inputs = [helper.make_tensor_value_info(f"{side}{i}", TensorProto.FLOAT, [4])
              for i in range(count) for side in "ab"]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [4])
               for i in range(count)]
    model = helper.make_model(helper.make_graph(nodes, "adds", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    ir = Ir.from_onnx(model)
    watched = ir.main_graph.input_ids
    listed = []
    iterate = TensorIds.__iter__

    def counted(ids):
        if ids is watched:
            listed.append(1)
        return iterate(ids)

    monkeypatch.setattr(TensorIds, "__iter__", counted)
    assert shape_folding.value_dependent_layout(ir) is None
    assert len(listed) <= 2


def test_empty_tiles_share_one_list_in_the_plan_document():
    tiles = 1472
    decisions = [TensorDecision("", f"t{i}", (4, 8), "float32",
                                TileIntervals.from_tiles(np.full(32, i, np.int16), tiles),
                                "linear", "-") for i in range(20)]
    document = build_plan_document(IpuModel(tiles_per_ipu=tiles), decisions, {}, {}, {}, {})
    empties = {id(runs) for entry in document["tensors"].values()
               for runs in entry["tile_mapping"].lists() if not runs}
    assert len(empties) == 1
    parsed = json.loads(dumps_plan(document))
    for i in range(20):
        expected = [[] for _ in range(tiles)]
        expected[i] = [[0, 32]]
        assert parsed["tensors"][f"t{i}"]["tile_mapping"] == expected


def test_eight_nested_ifs_plan_within_a_minute(tmp_path):
    """Eight nested Ifs took 166 s (a search stopped at its time limit, then a HiGHS
    thread the process waited for at exit); now about a second. The bound is generous."""
    path = tmp_path / "nested.onnx"
    onnx.save(nested_if_model(8), str(path))
    code = "import sys; from popart_unwind.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", code, "plan", str(path), "--out",
                           str(tmp_path / "p.json"), "--quiet"], timeout=60,
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "p.json").read_text())["planner"]["proven_optimal"]
