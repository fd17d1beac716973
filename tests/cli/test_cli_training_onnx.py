"""``plan model.onnx --training --loss ...``: an ONNX model planned as one training step,
as PopART's TrainingSession builds it; the flags that go with it; what is refused."""

from __future__ import annotations

import json

import pytest
from cli_runner import run


def plan(model_path, out_dir, *flags: str) -> dict:
    out = out_dir / "plan.json"
    status, _, err = run("plan", str(model_path), "--out", str(out), "--quiet", *flags)
    assert status == 0, err
    return json.loads(out.read_text())


def test_an_onnx_model_plans_as_a_training_step(model_path, out_dir):
    forward = plan(model_path, out_dir)
    step = plan(model_path, out_dir, "--training", "--loss", "nll")
    assert forward["model"]["kind"] == "inference"
    assert step["model"]["kind"] == "training"
    # the forward matmul and its weight-gradient pass (x is an input: no data gradient)
    assert sorted(o["type"] for o in forward["ops"].values()) == ["MatMul"]
    assert sorted(o["type"] for o in step["ops"].values()) == ["MatMul", "MatMul"]
    assert "labels" in step["tensors"] and "labels" not in forward["tensors"]


@pytest.mark.parametrize("loss", ["nll", "l1"])
def test_adam_holds_two_float32_states_per_weight(model_path, out_dir, loss):
    sgd = plan(model_path, out_dir, "--training", "--loss", loss)
    adam = plan(model_path, out_dir, "--training", "--loss", loss, "--optimizer", "adam")
    states = sorted(t for t in adam["tensors"] if t.startswith(("Accl1___", "Accl2___")))
    assert states == ["Accl1___b", "Accl1___w", "Accl2___b", "Accl2___w"]
    for state in states:
        assert adam["tensors"][state]["dtype"] == "float32"
    assert not any(t.startswith("Accl") for t in sgd["tensors"])
    assert adam["summary"]["ours"]["always_live_max_tile_bytes"] >= \
        2 * sgd["summary"]["ours"]["always_live_max_tile_bytes"]


def test_accumulation_adds_an_accumulator_per_weight(model_path, out_dir):
    step = plan(model_path, out_dir, "--training", "--loss", "l1",
                "--gradient-accumulation", "4", "--loss-scaling", "128")
    assert {"Accum___w", "Accum___b"} <= set(step["tensors"])


@pytest.mark.parametrize(("flags", "words"), [
    (["--training"], "needs --loss"),
    (["--loss", "nll"], "add --training"),
    (["--optimizer", "adam"], "add --training"),
    (["--training", "--loss", "nll", "--optimizer", "rmsprop"], "unknown --optimizer"),
    (["--training", "--loss", "no_such_tensor"], "no such tensor"),
    (["--training", "--loss", "y"], "one element"),
    (["--training", "--loss", "nll", "--gradient-accumulation", "0"], "positive integer"),
    (["--training", "--loss", "nll", "--loss-scaling", "-2"], "number > 0"),
])
def test_bad_training_flags_are_one_line_and_write_nothing(model_path, out_dir, flags,
                                                             words):
    out = out_dir / "plan.json"
    status, _, err = run("plan", str(model_path), "--out", str(out), *flags)
    assert status == 2
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not list(out_dir.iterdir())
