"""``popart-unwind demo`` as a user runs it (a subprocess), what it plans and says, and a
PyTorch factory model."""

from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from popart_unwind.cli import main
from popart_unwind.ir.tensor import TensorType
from popart_unwind.report.demo_model import build_demo_ir
from popart_unwind.report.plan_file import validate_plan


def command() -> list[str]:
    script = shutil.which("popart-unwind")
    return [script] if script else [sys.executable, "-m", "popart_unwind.cli"]


def test_demo_runs_end_to_end_as_a_command(out_dir):
    plan = out_dir / "demo.json"
    environment = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run([*command(), "demo", "--tiles", "32", "--out", str(plan)],
                            capture_output=True, text=True, timeout=300, check=False,
                            env=environment)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # not a terminal: no progress display
    assert result.stdout.startswith("Against PopART's heuristic, ours ")
    assert "PopART baseline" in result.stdout and "exchange bytes" in result.stdout
    assert "ops without a layout rule" not in result.stdout  # every op modelled
    document = json.loads(plan.read_text())
    validate_plan(document)
    assert {"model.lm_head.weight", "model.transformer.wpe.weight",
            "model.transformer.h.1.mlp.c_fc.weight",
            "model.transformer.ln_f.bias"} <= set(document["tensors"])
    assert document["model"]["format"] == "ir-json"
    assert document["ops_without_rule"] == {}
    again = out_dir / "again.json"  # this process has another hash seed: same bytes
    assert main(["demo", "--tiles", "32", "--out", str(again), "--quiet"]) == 0
    assert again.read_bytes() == plan.read_bytes()


def test_the_demo_is_a_gpt2_training_step_with_its_tied_head():
    ir = build_demo_ir()
    graph = ir.main_graph
    table = graph.tensor("model.lm_head.weight")  # gathered from and multiplied by
    readers = {op.type.name: op for op in table.consumers}
    assert set(readers) == {"Gather", "Transpose", "Sub"}
    transposed = readers["Transpose"].outputs[0]
    assert "MatMul" in [op.type.name for op in transposed.consumers]  # the LM head
    assert readers["Sub"].outputs[0].id in graph.output_ids  # its SGD update
    weights = [t for t in graph.producerless_tensors() if t.tensor_type == TensorType.VARIABLE]
    assert len({t.id for t in weights if ".h.1." in t.id}) == 12  # the second layer's
    assert all(t.data is None for t in weights)  # shipped by shape and type only
    assert ir.final_loss_id in graph.output_ids
    assert build_demo_ir() is not ir  # a fresh IR each time


def test_on_the_demo_ours_beats_popart_and_the_sentence_says_by_the_byte(out_dir):
    """The issue's target on a GC200 (1,472 tiles), from the plan file the demo writes;
    the sentence first in the summary and at the top of the report gives its figures."""
    plan, report = out_dir / "demo.json", out_dir / "report"
    out = io.StringIO()
    assert main(["demo", "--out", str(plan), "--report", str(report)], stdout=out,
                stderr=io.StringIO()) == 0
    summary = json.loads(plan.read_text())["summary"]
    ours, popart = summary["ours"], summary["popart"]
    assert ours["exchange_bytes"] < popart["exchange_bytes"]
    assert ours["cycles"] < popart["cycles"]
    assert ours["peak_tile_bytes"] <= popart["peak_tile_bytes"]
    sentence = out.getvalue().splitlines()[0]
    said = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) (?:fewer|B lower)",
                                                        sentence)]
    assert said == [popart[key] - ours[key]
                    for key in ("exchange_bytes", "cycles", "peak_tile_bytes")
                    if popart[key] != ours[key]]
    page = (report / "index.html").read_text()
    assert f'<p class="verdict">{html.escape(sentence)}</p>' in page
    assert page.index('class="verdict"') < page.index("<table")


def test_the_demo_needs_no_pytorch(tmp_path):
    """As on a machine where only the package is installed: importing torch fails."""
    script = ("import sys\n"
              "sys.modules['torch'] = sys.modules['transformers'] = None\n"
              "from popart_unwind.cli import main\n"
              "sys.exit(main(['demo', '--tiles', '16', '--quiet', '--out', 'plan.json']))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "plan.json").exists()


def test_the_packaged_demo_is_what_its_builder_makes():
    """The shipped step is the PyTorch front end's import of today's model code."""
    pytest.importorskip("transformers")
    import make_demo_model

    assert make_demo_model.demo_bytes() == make_demo_model.PACKAGED.read_bytes()
    from popart_unwind.report import demo_model

    assert make_demo_model.PACKAGED.name == demo_model.DEMO_FILE


def test_version():
    out = io.StringIO()
    result = subprocess.run([*command(), "--version"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.startswith("popart-unwind ")
    assert main([], stdout=out) == 0 and "plan" in out.getvalue()


def test_pytorch_factory_model(tmp_path, out_dir, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "cli_tiny_torch.py").write_text(textwrap.dedent("""
        import torch

        def make():
            torch.manual_seed(0)
            return torch.nn.Linear(8, 4), (torch.randn(2, 8),)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    plan = out_dir / "torch.json"
    err = io.StringIO()
    status = main(["plan", "cli_tiny_torch:make", "--out", str(plan), "--tiles", "8",
                   "--quiet", "--baseline", "linear"], stdout=io.StringIO(), stderr=err)
    assert (status, err.getvalue()) == (0, "")
    document = json.loads(plan.read_text())
    validate_plan(document)
    shapes = sorted(entry["shape"] for entry in document["tensors"].values())
    assert [2, 8] in shapes and [4, 8] in shapes
