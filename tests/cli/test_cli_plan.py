"""``popart-unwind plan`` on a tiny ONNX model: the plan file, the annotated model and the
report, run in-process through ``main``."""

from __future__ import annotations

import json
import re
from math import prod
from pathlib import Path

import numpy as np
import onnx
from cli_runner import run

from popart_unwind.ir import Ir
from popart_unwind.report.onnx_annotate import PLAN_KEY, VERSION_KEY
from popart_unwind.report.output_targets import MARKER_HEADER, REPORT_MARKER
from popart_unwind.report.plan_file import SUMMARY_KEYS, TENSOR_FIELDS, validate_plan
from popart_unwind.report.session import transform

TILES = 16



def producerless_keys(model_path: Path) -> set[str]:
    """What the plan must cover: the producer-less tensors after the session's transforms."""
    ir = Ir.from_onnx(model_path)
    transform(ir)
    return {t.id for t in ir.main_graph.producerless_tensors()}


def covered_once(mapping: list, numel: int, tiles: int) -> bool:
    hits = np.zeros(numel, int)
    for tile, intervals in enumerate(mapping):
        assert tile < tiles
        for begin, end in intervals:
            assert 0 <= begin < end <= numel
            hits[begin:end] += 1
    return bool((hits == 1).all())


def test_plan_file_covers_every_producerless_tensor_exactly_once(model_path, out_dir):
    plan = out_dir / "plan.json"
    status, _, err = run("plan", str(model_path), "--out", str(plan), "--tiles", str(TILES),
                         "--quiet")
    assert (status, err) == (0, "")
    document = json.loads(plan.read_text())
    validate_plan(document)
    assert document["version"] == 1
    assert document["target"]["name"] == "IpuModel"
    assert document["target"]["tiles"] == TILES
    assert document["target"]["bytes_per_tile"] == 624 * 1024
    assert set(document["tensors"]) == producerless_keys(model_path)
    for key, entry in document["tensors"].items():
        assert set(entry) == set(TENSOR_FIELDS), key
        assert entry["graph"] == ""
        assert len(entry["tile_mapping"]) == TILES
        assert covered_once(entry["tile_mapping"], prod(entry["shape"]), TILES), key
        assert entry["method"] in ("unwound", "linear", "partly unwound")
        assert entry["explanation"]
    assert document["tensors"]["w"]["shape"] == [16, 8]
    assert set(document["summary"]) == {"ours", "popart", "linear"}
    assert document["ops_without_rule"] == {}  # every op of the linear layer is modelled
    for summary in document["summary"].values():
        assert set(SUMMARY_KEYS) <= set(summary)
        assert summary["fits"] is (summary["peak_tile_bytes"] <= 624 * 1024)
        assert summary["peak_tile_bytes"] >= summary["always_live_max_tile_bytes"] > 0


def test_plan_bytes_are_identical_across_runs(model_path, out_dir):
    first, second = out_dir / "first.json", out_dir / "second.json"
    for path in (first, second):
        assert run("plan", str(model_path), "--out", str(path), "--tiles", str(TILES),
                   "--quiet")[0] == 0
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes().endswith(b"}\n")


def test_baseline_option_chooses_the_compared_plans(model_path, out_dir):
    for baseline, expected in (("linear", {"ours", "linear"}), ("none", {"ours"})):
        plan = out_dir / f"{baseline}.json"
        status, out, _ = run("plan", str(model_path), "--out", str(plan), "--tiles",
                             str(TILES), "--baseline", baseline)
        assert status == 0
        assert set(json.loads(plan.read_text())["summary"]) == expected
        assert ("PopART baseline" in out) is False


def test_summary_table_lists_each_figure_for_each_plan(model_path):
    status, out, err = run("plan", str(model_path), "--tiles", str(TILES))
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("Against PopART's heuristic, ours ")  # the sentence first
    header = lines[2]  # under the title
    assert re.search(r"ours\s+PopART baseline\s+linear", header)
    for label in ("objective", "upper bound", "exchange bytes", "exchange cycles",
                  "max tile memory", "peak tile memory", "always-live tile memory",
                  "regions"):
        row = next(line for line in out.splitlines() if line.startswith(label))
        assert len(re.findall(r"\d", row)) >= 3, row
    fits = next(line for line in out.splitlines() if line.startswith("fits"))
    assert fits.split()[1:] == ["yes"] * 3  # a small linear layer fits every plan
    assert "% " in out or "%)" in out


def test_quiet_prints_nothing(model_path):
    assert run("plan", str(model_path), "--tiles", str(TILES), "--quiet") == (0, "", "")


def test_annotated_onnx_holds_the_plan_in_its_metadata(model_path, out_dir):
    plan, annotated = out_dir / "plan.json", out_dir / "annotated.onnx"
    status, _, err = run("plan", str(model_path), "--out", str(plan), "--onnx-out",
                         str(annotated), "--tiles", str(TILES), "--quiet")
    assert (status, err) == (0, "")
    model = onnx.load(str(annotated))
    onnx.checker.check_model(model)
    metadata = {entry.key: entry.value for entry in model.metadata_props}
    assert json.loads(metadata[PLAN_KEY]) == json.loads(plan.read_text())
    assert metadata[VERSION_KEY]
    original = onnx.load(str(model_path))
    assert model.graph == original.graph


def test_report_is_one_self_contained_page(model_path, out_dir):
    report = out_dir / "report"
    status, _, err = run("plan", str(model_path), "--report", str(report), "--tiles",
                         str(TILES), "--quiet")
    assert (status, err) == (0, "")
    page = (report / "index.html").read_text()
    images = re.findall(r'<img src="([^"]*)"', page)
    assert len(images) >= 5  # memory (resident, peak) and exchange bars, the memory map,
    # the unwind diagram
    assert all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r"(https?:)?//[\w.-]+\.\w", page.replace("data:image", ""))
    scripts = re.findall(r"<script[^>]*>", page)  # inline only: the data and the script
    assert scripts == ['<script type="application/json" id="tensor-data">', "<script>"]
    assert "<link" not in page
    assert "<title>linear.onnx</title>" in page and str(model_path.parent) not in page
    for text in ("Where ours differs from PopART", "Summary", "Per tile", "Exchange by op",
                 "Tensors", "w", "peak tile memory", "Peak tile memory",
                 "peak memory per tile"):
        assert text in page
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".")]  # no staging left


def test_report_replaces_an_earlier_report_only_with_force(model_path, out_dir):
    report = out_dir / "report"
    options = ("--report", str(report), "--tiles", str(TILES), "--quiet", "--baseline", "none")
    assert run("plan", str(model_path), *options)[0] == 0
    listed = (report / REPORT_MARKER).read_text().splitlines()
    assert listed[0] == MARKER_HEADER and "index.html" in listed[1:]
    assert sorted(listed[1:]) == sorted(p.name for p in report.iterdir()
                                        if p.name != REPORT_MARKER)
    (report / "index.html").write_text("old")
    status, _, err = run("plan", str(model_path), *options)
    assert status == 2 and "--force" in err
    assert (report / "index.html").read_text() == "old"
    assert run("plan", str(model_path), *options, "--force")[0] == 0
    assert (report / "index.html").read_text() != "old"
    assert sorted(p.name for p in out_dir.iterdir()) == ["report"]  # nothing retired left


def test_outputs_named_inside_the_report_folder_land_with_it(model_path, out_dir):
    report = out_dir / "report"
    status, _, err = run("plan", str(model_path), "--report", str(report), "--out",
                         str(report / "plan.json"), "--onnx-out", str(report / "model.onnx"),
                         "--tiles", str(TILES), "--quiet", "--baseline", "none")
    assert (status, err) == (0, "")
    validate_plan(json.loads((report / "plan.json").read_text()))
    assert (report / "index.html").is_file() and (report / "model.onnx").is_file()


def test_algo_option_picks_the_solver(model_path, out_dir):
    plan = out_dir / "plan.json"
    assert run("plan", str(model_path), "--out", str(plan), "--tiles", str(TILES),
               "--algo", "greedy0", "--quiet", "--baseline", "none")[0] == 0
    planner = json.loads(plan.read_text())["planner"]
    assert planner["algorithm"] == "greedy0"
    assert 0 <= planner["unwinding_score"] <= planner["unwinding_upper_bound"]
    assert "objective" not in planner  # the one objective is the summary's


def test_the_plan_file_says_whether_the_step_trains(model_path, out_dir):
    plan = out_dir / "plan.json"
    assert run("plan", str(model_path), "--out", str(plan), "--tiles", str(TILES), "--quiet",
               "--baseline", "none")[0] == 0
    assert json.loads(plan.read_text())["model"]["kind"] == "inference"
    assert run("demo", "--out", str(out_dir / "demo.json"), "--tiles", str(TILES), "--quiet",
               "--baseline", "none")[0] == 0
    assert json.loads((out_dir / "demo.json").read_text())["model"]["kind"] == "training"
