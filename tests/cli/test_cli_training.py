"""``plan --training`` on a PyTorch factory: the step's updates are the optimizer's the
training flags name (sgd without --optimizer), built as an ONNX model's are; bad flags are
refused in one line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_runner import run

from popart_unwind.report.plan_file import validate_plan

pytest.importorskip("torch")

FACTORY = "cli_training_mlp:make"
PARAMETERS = ("0.weight", "2.weight")


@pytest.fixture
def mlp_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Linear-ReLU-Linear factory (float32), importable from the current folder. No
    biases, to keep the test quick: with them, the layout solver's polish spends its whole
    budget of candidate moves on Adam's step (about 10 s)."""
    (tmp_path / "cli_training_mlp.py").write_text(textwrap.dedent("""
        import torch

        def make():
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.ReLU(),
                                      torch.nn.Linear(64, 16, bias=False))
            return net, (torch.randn(4, 32),)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def plan(folder: Path, name: str, *flags: str) -> tuple[dict, bytes]:
    path = folder / f"{name}.json"
    status, _, err = run("plan", FACTORY, "--training", *flags, "--tiles", "8", "--quiet",
                         "--out", str(path))
    assert (status, err) == (0, ""), err
    document = json.loads(path.read_text())
    validate_plan(document)
    return document, path.read_bytes()


def test_adam_plans_its_two_float32_states_beside_each_weight(mlp_factory):
    sgd, _ = plan(mlp_factory, "sgd", "--optimizer", "sgd")
    adam, _ = plan(mlp_factory, "adam", "--optimizer", "adam")
    for name in PARAMETERS:
        assert name in sgd["tensors"] and name in adam["tensors"]
        assert f"Accl1___{name}" in adam["tensors"] and f"Accl2___{name}" in adam["tensors"]
        assert f"Accl1___{name}" not in sgd["tensors"]
    for source in ("ours", "popart"):
        # the weights (float32) always live, and with Adam two states of their size each
        assert adam["summary"][source]["always_live_max_tile_bytes"] >= \
            2 * sgd["summary"][source]["always_live_max_tile_bytes"], source


def test_without_optimizer_the_step_is_sgd_built_in_the_ir(mlp_factory):
    _, explicit = plan(mlp_factory, "explicit", "--optimizer", "sgd")
    _, default = plan(mlp_factory, "default")
    assert default == explicit


def assert_refused(status: int, out: str, err: str, folder: Path, *words: str) -> None:
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("popart-unwind: error: "), err
    assert all(word in err for word in words), err
    assert not list(folder.glob("*.json")) and not (folder / "report").exists()


def test_an_unknown_optimizer_is_refused(mlp_factory):
    assert_refused(*run("plan", FACTORY, "--training", "--optimizer", "rmsprop", "--out",
                        "plan.json", "--report", "report"), mlp_factory, "rmsprop", "adam")


def test_a_factory_takes_no_loss(mlp_factory):
    assert_refused(*run("plan", FACTORY, "--training", "--loss", "nll", "--out", "plan.json",
                        "--report", "report"), mlp_factory, "--loss")
