"""``--pipeline``: the IPUs of a placed or split model run as a pipeline; its stashes and
cycles per micro-batch in the summary and the plan file."""

from __future__ import annotations

import json

import pytest
from cli_runner import run
from test_cli_ipus import TILES, chain

from popart_unwind.report.plan_file import validate_plan


def test_a_placed_chain_runs_as_a_pipeline(tmp_path):
    model = chain(tmp_path / "placed.onnx", [0, 1, 2, 3])
    status, out, err = run("plan", str(model), "--tiles", str(TILES), "--pipeline",
                           "--out", str(tmp_path / "plan.json"))
    assert status == 0, err
    assert "pipeline cycles per micro-batch" in out and "IPU 3 stash bytes" in out
    document = json.loads((tmp_path / "plan.json").read_text())
    validate_plan(document)
    target = document["target"]
    for summary in document["summary"].values():
        per_ipu = summary["per_ipu"]
        # Inference over IPUs in order: each tensor is read in its own stage; no stash.
        assert [p["stash_bytes"] for p in per_ipu] == [0, 0, 0, 0]
        sent = max(p["ipu_copy_bytes"] for p in per_ipu)
        copy_phase = -(-sent // target["ipu_link_bytes_per_cycle"]) \
            + target["ipu_copy_sync_cycles"]
        assert summary["pipeline_cycles"] == max(p["cycles"] for p in per_ipu) + copy_phase
        assert summary["pipeline_cycles"] < summary["cycles"]


def test_without_the_flag_nothing_of_a_pipeline_is_written(tmp_path):
    model = chain(tmp_path / "placed.onnx", [0, 1, 2, 3])
    status, _, err = run("plan", str(model), "--tiles", str(TILES), "--quiet",
                           "--out", str(tmp_path / "plan.json"))
    assert status == 0, err
    summary = json.loads((tmp_path / "plan.json").read_text())["summary"]["ours"]
    assert "pipeline_cycles" not in summary and "stash_bytes" not in summary["per_ipu"][0]


@pytest.mark.parametrize("argv", [("--pipeline",), ("--option", "enable_pipelining=true"),
                                  ("--pipeline", "--ipus", "1")])
def test_a_pipeline_of_one_ipu_is_one_clear_error(tmp_path, argv):
    model = chain(tmp_path / "plain.onnx", None)
    out = tmp_path / "plan.json"
    status, _, err = run("plan", str(model), "--tiles", str(TILES), "--out", str(out), *argv)
    assert status == 2 and not out.exists()
    assert err.count("\n") == 1 and "a pipeline needs a model over several IPUs" in err


def test_a_tied_training_step_is_pipelined_on_our_split(tmp_path, monkeypatch):
    """GPT-2's tied head: PopART's split copies the table, which PopART cannot pipeline;
    the baseline then takes our split, and the command says so."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    (tmp_path / "tied.py").write_text(
        "import make_models\n\n\n"
        "def make():\n"
        "    return make_models.tiny_model('gpt2', 'training')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    status, _, err = run("plan", "tied:make", "--training", "--ipus", "4", "--pipeline",
                           "--tiles", str(TILES), "--out", str(tmp_path / "plan.json"))
    assert status == 0, err
    assert "PopART's AutoVirtualGraph split cannot be pipelined (weight " \
           "'model.lm_head.weight'" in err
    document = json.loads((tmp_path / "plan.json").read_text())
    ours = document["summary"]["ours"]
    stashes = [p["stash_bytes"] for p in ours["per_ipu"]]
    assert all(stashes)  # every IPU keeps some tensor for its backward stage
    assert all(p["accumulator_bytes"] > 0 for p in ours["per_ipu"])
    assert ours["pipeline_cycles"] < ours["cycles"]


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_tiny_gpt2_exported_to_onnx_is_pipelined_over_four_ipus(tmp_path, exporter):
    """The ONNX exports read some weights in every layer (the attention's scale, a scalar
    the exporter shares; the TorchScript exporter merges the equal layer norms' scales and
    biases), so our split reads them on several IPUs. A forward model only reads its
    weights, so each is copied to the IPUs reading it, as PopART's inference session
    copies its constant weights; the plan spans the four IPUs."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import make_models

    if exporter == "dynamo":
        model, dims = make_models.build("gpt2"), ()
    else:
        model = make_models.export_with_dynamic_axes("gpt2", tmp_path / "gpt2.onnx",
                                                     dynamo=False)
        dims = ("--dim", f"{make_models.BATCH}=2", "--dim", f"{make_models.SEQUENCE}=16")
    status, _, err = run("plan", str(model), "--ipus", "4", "--pipeline", "--tiles",
                         str(TILES), "--baseline", "none", "--quiet", *dims,
                         "--out", str(tmp_path / "plan.json"))
    assert status == 0, err
    document = json.loads((tmp_path / "plan.json").read_text())
    validate_plan(document)
    assert {entry["ipu"] for entry in document["tensors"].values()} == {0, 1, 2, 3}
    assert document["summary"]["ours"]["pipeline_cycles"] > 0
