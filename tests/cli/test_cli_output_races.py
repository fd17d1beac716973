"""What the tool replaces is checked again at the moment it replaces it: a file a user puts
into the report folder while the plan runs (or a folder put where an output file goes)
survives, and the run fails in one line, exit 2, with nothing replaced."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from bad_inputs import snapshot
from cli_runner import run

from popart_unwind.report import atomic, html
from popart_unwind.report.output_targets import MARKER_HEADER, REPORT_MARKER

PLAN = ("plan", "model/linear.onnx", "--tiles", "8", "--baseline", "none", "--quiet")


def _meanwhile(monkeypatch: pytest.MonkeyPatch, action) -> None:
    """Run ``action`` while the report is written: after the checks, before the swap."""
    real = html.write_report

    def write_report(*args, **kwargs):
        action()
        return real(*args, **kwargs)

    monkeypatch.setattr(html, "write_report", write_report)


def _assert_one_line(status: int, out: str, err: str, *words: str) -> None:
    assert (status, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("popart-unwind: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in err, (word, err)


def test_a_users_file_saved_into_an_earlier_report_survives_force(world, monkeypatch):
    saved = world / "old_report" / "my-notes.txt"
    _meanwhile(monkeypatch, lambda: saved.write_text("mine"))
    status, out, err = run(*PLAN, "--report", "old_report", "--force",
                           "--out", "out/plan.json")
    _assert_one_line(status, out, err, "--report old_report", "changed while the plan ran",
                     "my-notes.txt")
    assert saved.read_text() == "mine"
    assert (world / "old_report" / "index.html").read_text() == "an earlier report"
    assert not (world / "out" / "plan.json").exists()  # the other outputs are rolled back
    assert not [p for p in world.iterdir() if p.name.startswith(".")]  # no temporaries


def test_a_users_file_saved_into_an_empty_report_folder_survives(world, monkeypatch):
    saved = world / "out" / "draft.txt"
    _meanwhile(monkeypatch, lambda: saved.write_text("mine"))
    before_run = snapshot(world)
    status, out, err = run(*PLAN, "--report", "out", "--out", "existing.json")
    _assert_one_line(status, out, err, "--report out", "changed while the plan ran")
    assert saved.read_text() == "mine"
    after = snapshot(world)
    assert after.pop("out/draft.txt")
    assert after == before_run  # existing.json put back as it was


def test_a_folder_made_where_the_report_goes_is_not_replaced(world, monkeypatch):
    def make() -> None:
        (world / "new_report").mkdir()
        (world / "new_report" / "a.txt").write_text("mine")

    _meanwhile(monkeypatch, make)
    status, out, err = run(*PLAN, "--report", "new_report")
    _assert_one_line(status, out, err, "--report new_report", "changed while the plan ran")
    assert (world / "new_report" / "a.txt").read_text() == "mine"
    assert os.listdir(world / "new_report") == ["a.txt"]


def test_a_folder_put_where_out_goes_is_not_replaced(world, monkeypatch):
    def make() -> None:
        (world / "out" / "plan.json").mkdir()

    _meanwhile(monkeypatch, make)
    status, out, err = run(*PLAN, "--report", "out/r", "--out", "out/plan.json")
    _assert_one_line(status, out, err, "--out out/plan.json", "became a folder")
    assert (world / "out" / "plan.json").is_dir()
    assert not (world / "out" / "r").exists()


def test_an_earlier_report_whose_marker_vanished_is_kept(world, monkeypatch):
    _meanwhile(monkeypatch, lambda: (world / "old_report" / REPORT_MARKER).unlink())
    status, out, err = run(*PLAN, "--report", "old_report", "--force")
    _assert_one_line(status, out, err, "changed while the plan ran", REPORT_MARKER)
    assert (world / "old_report" / "index.html").read_text() == "an earlier report"


def test_an_earlier_report_is_replaced_when_nothing_changed(world):
    status, _, err = run(*PLAN, "--report", "old_report", "--force")
    assert status == 0, err
    assert "an earlier report" not in (world / "old_report" / "index.html").read_text()
    assert not [p for p in world.iterdir() if p.name.startswith(".")]


def test_a_retired_report_loses_only_the_files_its_marker_lists(tmp_path: Path):
    """A file that reaches the retired folder after the last check (through a handle opened
    before) is kept, and so is the folder holding it."""
    folder = tmp_path / "retired"
    folder.mkdir()
    (folder / "index.html").write_text("ours")
    (folder / REPORT_MARKER).write_text(f"{MARKER_HEADER}\nindex.html\n../outside.txt\n")
    (tmp_path / "outside.txt").write_text("not ours")
    (folder / "late.txt").write_text("mine")
    assert atomic._remove_written(folder) is False
    assert sorted(os.listdir(folder)) == sorted([REPORT_MARKER, "late.txt"])
    assert (tmp_path / "outside.txt").read_text() == "not ours"
    (folder / "late.txt").unlink()
    (folder / "index.html").write_text("ours")
    assert atomic._remove_written(folder) is True
    assert not folder.exists()


def test_a_name_as_long_as_the_system_allows_is_written(world):
    """The temporary beside an output repeats only the start of a long name."""
    name = "p" * 255
    status, _, err = run(*PLAN, "--out", f"out/{name}", "--report", "r" * 255)
    assert status == 0, err
    assert (world / "out" / name).read_text().startswith("{")
    assert (world / ("r" * 255) / "index.html").is_file()


def test_a_full_disk_while_the_report_is_written_names_the_option(world, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/somewhere/.r.x.tmp/a.png")

    monkeypatch.setattr(html, "write_report", full)
    before = snapshot(world)
    status, out, err = run(*PLAN, "--report", "out/r", "--out", "out/plan.json")
    assert (status, out, err) == (2, "", "popart-unwind: error: cannot write --report out/r: "
                                         "No space left on device\n")
    assert snapshot(world) == before


def _no_controls(text: str) -> bool:
    return not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0 for c in text)


def test_a_models_words_reach_the_summary_escaped(world):
    """A tensor name and the model's file name holding terminal escapes, in the summary's
    title and the fullest tile's line, and in the warning naming an unknown op type."""
    import onnx
    from conftest import linear_layer_model

    model = linear_layer_model()
    model.graph.initializer[0].name = "w\x1b[31m"
    model.graph.node[0].input[0] = "w\x1b[31m"
    model.graph.node[3].op_type = "Re\x1b[2Jlu"
    path = world / "linear\x1b]0;title\x07.onnx"
    onnx.save(model, str(path))
    status, out, err = run("plan", path.name, "--tiles", "8", "--baseline", "none",
                           "--allow-unknown-ops")
    assert status == 0, err
    assert _no_controls(out) and _no_controls(err), (out, err)
    assert "popart-unwind plan linear\\x1b]0;title\\x07.onnx" in out
    assert "w\\x1b[31m" in out  # the weight is the fullest tile's largest tensor
    assert "Re\\x1b[2Jlu" in out and "Re\\x1b[2Jlu" in err
