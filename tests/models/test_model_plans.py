"""``popart-unwind plan`` on the tiny real models: ONNX (a training graph) and a PyTorch
factory (a training step), with every output the command writes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import onnx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

sys.path.insert(0, str(Path(__file__).parent))
import make_models
from cli_runner import run

from popart_unwind.report.plan_file import validate_plan

TILES = 64



def check_plan(path: Path) -> dict:
    plan = json.loads(path.read_text())
    validate_plan(plan)
    assert plan["target"]["tiles"] == TILES
    ours, popart = plan["summary"]["ours"], plan["summary"]["popart"]
    assert 0 < ours["objective"] <= ours["upper_bound"]
    assert popart["upper_bound"] == ours["upper_bound"]
    check_ops(plan)
    return plan


def check_ops(plan: dict) -> None:
    """A training step's matmuls are planned as passes of their layers, ours and PopART's:
    each pass's partition is the one its layer shares (joint) or its own (separate), and
    each op's cycles are part of the step's."""
    ops = plan["ops"]
    matmuls = {name: entry for name, entry in ops.items() if entry["type"] in ("MatMul", "Gemm")}
    assert matmuls
    for source in ("ours", "popart"):
        passes = [entry["plan"] if source == "ours" else entry["popart"]["plan"]
                  for entry in matmuls.values()]
        counts = {name: sum(p["fully_connected_pass"] == name for p in passes)
                  for name in ("TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU")}
        assert counts["TRAINING_FWD"] > 0 and counts["TRAINING_WU"] > 0, counts
        for entry in passes:
            assert not entry["joint"] or entry["fully_connected_pass"] != "NONE"
            if not entry["joint"]:
                assert entry["axes"] == "mkn"  # planned alone: its own cube
        cycles = [entry["cycles"] if source == "ours" else entry["popart"]["cycles"]
                  for entry in ops.values()]
        assert 0 < sum(cycles) <= plan["summary"][source]["cycles"]


def test_plan_a_tiny_bert_training_graph_from_onnx(tmp_path):
    model = tmp_path / "bert.onnx"
    shutil.copy(make_models.build("bert", kind="training"), model)
    status, out, err = run("plan", str(model), "--tiles", str(TILES), "--out",
                           str(tmp_path / "plan.json"), "--report", str(tmp_path / "report"),
                           "--onnx-out", str(tmp_path / "bert.planned.onnx"))
    assert (status, err) == (0, ""), err
    plan = check_plan(tmp_path / "plan.json")
    weights = [k for k in plan["tensors"] if k.startswith("model.bert.encoder.layer.0.")]
    assert weights and all(plan["tensors"][k]["method"] for k in weights)
    assert "exchange bytes" in out
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.count("data:image/png;base64,") >= 3 and "http://" not in html
    assert "<h3>Matmul plans</h3>" in html and "Where ours differs from PopART" in html
    annotated = onnx.load(str(tmp_path / "bert.planned.onnx"))
    assert any(p.key == "popart_unwind.plan" for p in annotated.metadata_props)


def test_plan_a_tiny_gpt2_training_step_from_a_pytorch_factory(factory):
    status, _, err = run("plan", "tiny_factories:gpt2", "--training", "--tiles", str(TILES),
                         "--out", str(factory / "plan.json"), "--quiet")
    assert (status, err) == (0, ""), err
    plan = check_plan(factory / "plan.json")
    module, _ = make_models.tiny_model("gpt2", "training")
    names: dict[int, set[str]] = {}  # a tied parameter has several names; the graph reads one
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), set()).add(name)
    assert any(len(aliases) > 1 for aliases in names.values())  # the tied LM head
    for aliases in names.values():  # every parameter of the step is planned
        assert len(aliases & set(plan["tensors"])) == 1, aliases
