"""ONNX's light model zoo, as the onnx wheel ships it (its backend test data): the small
ones planned here end to end; benchmarks record all nine (RESULTS, onnx_conformance)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from cli_runner import run

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


@pytest.mark.parametrize("name", ["light_squeezenet", "light_shufflenet", "light_bvlc_alexnet"])
def test_a_light_zoo_model_plans(name, tmp_path):
    model = LIGHT / f"{name}.onnx"
    if not model.is_file():
        pytest.skip(f"this onnx wheel ships no {model.name}")
    plan = tmp_path / "plan.json"
    status, _, err = run("plan", str(model), "--out", str(plan), "--tiles", "64", "--quiet")
    assert (status, err) == (0, "")
    document = json.loads(plan.read_text())
    assert document["tensors"]
    assert document["summary"]["ours"]["exchange_bytes"] <= \
        document["summary"]["popart"]["exchange_bytes"]
