"""Bad input: exit status 2, exactly one line on stderr, and no file written."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from cli_runner import run
from conftest import linear_layer_model

from popart_unwind.errors import PlanError


def outputs(out_dir: Path) -> list[str]:
    return ["--out", str(out_dir / "plan.json"), "--report", str(out_dir / "report"),
            "--tiles", "8"]


def assert_refused(status: int, out: str, err: str, out_dir: Path, *words: str) -> None:
    assert status == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("popart-unwind: error: ")
    for word in words:
        assert word in lines[0]
    assert sorted(p.name for p in out_dir.iterdir()) == []


def test_missing_model_file(tmp_path, out_dir):
    missing = tmp_path / "nowhere.onnx"
    assert_refused(*run("plan", str(missing), *outputs(out_dir)), out_dir, "nowhere.onnx")


def test_invalid_onnx(tmp_path, out_dir):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07 this is not a protobuf \xff\xff\xff")
    assert_refused(*run("plan", str(bad), *outputs(out_dir)), out_dir, "bad.onnx")


@pytest.mark.parametrize("tiles", ["0", "-3", "many"])
def test_bad_tiles(model_path, out_dir, tiles):
    status, out, err = run("plan", str(model_path), "--out", str(out_dir / "plan.json"),
                           "--tiles", tiles)
    assert_refused(status, out, err, out_dir, "--tiles")


def test_unknown_algo(model_path, out_dir):
    status, out, err = run("plan", str(model_path), *outputs(out_dir), "--algo", "magic")
    assert_refused(status, out, err, out_dir, "magic", "greedy0")


def test_unknown_option_is_one_line(model_path, out_dir):
    assert_refused(*run("plan", str(model_path), "--colour"), out_dir, "--colour")


def test_foreign_report_folder_is_not_overwritten(model_path, out_dir, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    status, out, err = run("plan", str(model_path), "--report", str(folder), "--out",
                           str(out_dir / "plan.json"), "--tiles", "8")
    assert_refused(status, out, err, out_dir, "did not make")
    assert (folder / "notes.txt").read_text() == "keep me"


def test_missing_output_folder(model_path, out_dir):
    status, out, err = run("plan", str(model_path), "--out",
                           str(out_dir / "no" / "plan.json"), "--tiles", "8")
    assert_refused(status, out, err, out_dir, "does not exist")


def test_training_needs_a_pytorch_model(model_path, out_dir):
    assert_refused(*run("plan", str(model_path), "--training", *outputs(out_dir)), out_dir,
                   "--training")


def test_onnx_out_needs_an_onnx_model(out_dir):
    status, out, err = run("plan", "some_module:make", "--onnx-out",
                           str(out_dir / "model.onnx"))
    assert_refused(status, out, err, out_dir, "--onnx-out")


def test_external_data_model_is_annotated_only_beside_itself(tmp_path, out_dir):
    folder = tmp_path / "external"
    folder.mkdir()
    path = folder / "model.onnx"
    onnx.save(linear_layer_model(), str(path), save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    status, out, err = run("plan", str(path), "--onnx-out", str(out_dir / "model.onnx"),
                           "--tiles", "8")
    assert_refused(status, out, err, out_dir, "external data")
    beside = folder / "annotated.onnx"
    assert run("plan", str(path), "--onnx-out", str(beside), "--tiles", "8",
               "--quiet")[0] == 0
    onnx.checker.check_model(onnx.load(str(beside)))  # loads its weights from weights.bin


def test_missing_factory_module(out_dir):
    status, out, err = run("plan", "no_such_module_here:make", *outputs(out_dir))
    assert_refused(status, out, err, out_dir, "no_such_module_here")


def test_failure_while_reporting_leaves_no_file(model_path, out_dir, monkeypatch):
    def broken(*args, **kwargs):
        raise PlanError("picture failed")

    monkeypatch.setattr("popart_unwind.report.html.write_report", broken)
    status, out, err = run("plan", str(model_path), *outputs(out_dir),
                           "--onnx-out", str(out_dir / "annotated.onnx"))
    assert_refused(status, out, err, out_dir, "picture failed")


def test_pytorch_factory_without_torch(out_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" now fails
    status, out, err = run("plan", "some_module:make", *outputs(out_dir))
    assert_refused(status, out, err, out_dir, "torch is not installed")
