"""``popart-unwind demo`` as a user runs it (a subprocess), and a PyTorch factory model."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from popart_unwind.cli import main
from popart_unwind.report.plan_file import validate_plan


def command() -> list[str]:
    script = shutil.which("popart-unwind")
    return [script] if script else [sys.executable, "-m", "popart_unwind.cli"]


def test_demo_runs_end_to_end_as_a_command(out_dir):
    plan = out_dir / "demo.json"
    environment = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run([*command(), "demo", "--tiles", "32", "--out", str(plan)],
                            capture_output=True, text=True, timeout=120, check=False,
                            env=environment)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # not a terminal: no progress display
    assert "PopART baseline" in result.stdout and "exchange bytes" in result.stdout
    assert "ops without a layout rule" not in result.stdout  # softmax and norm modelled
    document = json.loads(plan.read_text())
    validate_plan(document)
    assert {"embedding", "attention/wq", "mlp/w1", "norm/gamma"} <= set(document["tensors"])
    assert document["model"]["format"] == "builder"
    assert document["ops_without_rule"] == {}
    again = out_dir / "again.json"  # this process has another hash seed: same bytes
    assert main(["demo", "--tiles", "32", "--out", str(again), "--quiet"]) == 0
    assert again.read_bytes() == plan.read_bytes()


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
