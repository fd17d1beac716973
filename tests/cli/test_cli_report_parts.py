"""The pieces behind the command's outputs, each on its own."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from popart_unwind.errors import OutputError, PlanError
from popart_unwind.machine import IpuModel
from popart_unwind.report import atomic
from popart_unwind.report.layout_data import LEVELS, levels
from popart_unwind.report.output_targets import FileTarget, FolderTarget
from popart_unwind.report.plan_file import (
    TensorDecision,
    build_plan_document,
    compact_plan,
    dumps_plan,
    tensor_key,
    validate_plan,
)
from popart_unwind.report.progress import StageProgress
from popart_unwind.report.summary import plain_table, summary_rows, verdict

SUMMARY = {"objective": 30.0, "upper_bound": 40.0, "exchange_bytes": 1234567,
           "exchange_cycles": 987, "max_tile_bytes": 6390, "regions": 12,
           "avoidable_exchange_bytes": 0, "peak_tile_bytes": 700000,
           "always_live_max_tile_bytes": 3195, "fits": False, "compute_cycles": 1013,
           "cycles": 2000, "peak_tile_bytes_floor": 6390}


def document(mapping=None):
    decision = TensorDecision("", "w", (2, 3), "float32",
                              mapping or [[(0, 4)], [(4, 6)], []], "unwound", "why")
    inner = TensorDecision("body", "x", (2,), "float16", [[], [], [(0, 2)]], "linear", "-")
    return build_plan_document(IpuModel(tiles_per_ipu=3), [inner, decision],
                               {"popart": SUMMARY, "ours": SUMMARY}, {"source": "m.onnx"},
                               {"algorithm": "deferral"}, {"Softmax": 2, "com.example::Foo": 1})


def test_plan_text_is_sorted_and_stable():
    text = dumps_plan(document())
    assert text == dumps_plan(document())
    parsed = json.loads(text)
    assert list(parsed) == sorted(parsed)
    assert list(parsed["tensors"]) == ["body::x", "w"]
    assert list(parsed["ops_without_rule"].items()) == [("Softmax", 2), ("com.example::Foo", 1)]
    assert '"tile_mapping": [[[0,4]],[[4,6]],[]]' in text.decode()
    assert json.loads(compact_plan(document())) == parsed
    assert parsed["summary"]["ours"]["fits"] is False
    assert parsed["summary"]["ours"]["peak_tile_bytes"] == 700000
    validate_plan(parsed)
    del parsed["summary"]["ours"]["peak_tile_bytes"]
    with pytest.raises(PlanError, match="peak_tile_bytes"):
        validate_plan(parsed)


def test_tensor_keys_name_subgraphs():
    assert tensor_key("", "w") == "w"
    assert tensor_key("body", "w") == "body::w"


@pytest.mark.parametrize("mapping", [[[(0, 4)], [(3, 6)], []],  # element 3 twice
                                     [[(0, 4)], [], []],  # elements 4 and 5 nowhere
                                     [[(0, 7)], [], []]])  # past the end
def test_validate_plan_rejects_bad_cover(mapping):
    with pytest.raises(PlanError):
        validate_plan(json.loads(dumps_plan(document(mapping))))


def test_summary_rows_show_shares_of_bound_and_budget():
    header, rows = summary_rows({"ours": SUMMARY, "linear": SUMMARY}, 638976)
    assert header == ["", "ours", "linear"]
    cells = {row[0]: row[1] for row in rows}
    assert cells["objective"] == "30 (75.0%)"
    assert cells["exchange bytes"] == "1,234,567"
    assert cells["compute cycles"] == "1,013"
    assert cells["cycles (exchange, partial sums, compute)"] == "2,000"
    assert cells["max tile memory"] == "6,390 B (1.0%)"
    assert cells["peak tile memory"] == "700,000 B (109.6%)"
    assert cells["always-live tile memory"] == "3,195 B (0.5%)"
    assert cells["peak floor (live bytes spread evenly)"] == "6,390 B (1.0%)"
    assert cells["fits"] == "no"
    fitting = {**SUMMARY, "peak_tile_bytes": 6390, "fits": True}
    assert dict((row[0], row[2]) for row in summary_rows(
        {"ours": SUMMARY, "linear": fitting}, 638976)[1])["fits"] == "yes"
    lines = plain_table({"ours": SUMMARY}, 638976).splitlines()
    assert len({len(line) for line in lines[:2]}) == 1  # header as wide as the rule


def test_the_sentence_says_what_ours_saves_costs_or_leaves_the_same():
    popart = {"exchange_bytes": 1_000_000, "cycles": 2_000, "peak_tile_bytes": 5_000}

    def said(**ours: int) -> str | None:
        return verdict({"ours": {**popart, **ours}, "popart": popart})

    assert said(exchange_bytes=967_000, cycles=1_990, peak_tile_bytes=4_000) == (
        "Against PopART's heuristic, ours exchanges 33,000 fewer bytes (3.3%), takes 10 "
        "fewer cycles (0.5%) and peaks 1,000 B lower on its fullest tile (20.0%).")
    assert said() == ("Against PopART's heuristic, ours saves nothing: the same exchange "
                      "bytes, cycles and peak tile memory.")
    assert said(cycles=2_001) == (
        "Against PopART's heuristic, ours saves nothing: it takes 1 more cycle (0.1%); "
        "the same exchange bytes and peak tile memory.")
    assert said(exchange_bytes=999_999, peak_tile_bytes=5_100) == (
        "Against PopART's heuristic, ours exchanges 1 fewer byte (<0.1%) but peaks 100 B "
        "higher on its fullest tile (2.0%); the same cycles.")
    assert verdict({"ours": popart, "linear": popart}) is None  # no PopART, no sentence


def test_on_several_ipus_the_sentence_says_apart_layouts_and_split():
    popart = {"exchange_bytes": 1_000_000, "cycles": 2_500, "peak_tile_bytes": 5_000,
              "ipus": 2, "ipu_copy_bytes": 8_000, "ipu_copy_cycles": 500}
    ours = {**popart, "cycles": 2_100, "ipu_copy_cycles": 100, "ipu_copy_bytes": 2_000}
    assert verdict({"ours": ours, "popart": popart}) == (
        "Against PopART's heuristic on 2 IPUs, ours' layouts save nothing: the same "
        "exchange bytes and cycles on the IPUs; its split between the IPUs copies 6,000 "
        "fewer bytes (75.0%) and takes 400 fewer cycles copying (80.0%); the same peak "
        "tile memory.")
    ours = {**popart, "exchange_bytes": 990_000, "cycles": 2_510, "peak_tile_bytes": 5_100}
    assert verdict({"ours": ours, "popart": popart}) == (
        "Against PopART's heuristic on 2 IPUs, ours' layouts exchange 10,000 fewer bytes "
        "(1.0%) but take 10 more cycles on the IPUs (0.5%); its split between the IPUs "
        "saves nothing: it peaks 100 B higher on its fullest tile (2.0%); the same IPU-copy "
        "bytes and copy cycles.")


def test_transaction_removes_its_temporaries_when_the_block_fails(tmp_path):
    plan = FileTarget("--out", tmp_path / "plan.json", tmp_path / "plan.json")
    report = FolderTarget("--report", tmp_path / "report", tmp_path / "report", "absent")
    with pytest.raises(RuntimeError), atomic.OutputTransaction([plan], report) as outputs:
        assert len(list(tmp_path.iterdir())) == 2  # reserved before any work
        outputs.put(plan, b"half")
        (outputs.report_folder / "index.html").write_text("half")
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_transaction_replaces_whole_files_or_puts_them_back(tmp_path, monkeypatch):
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    first.write_bytes(b"old one")
    targets = [FileTarget("--out", first, first), FileTarget("--onnx-out", second, second)]
    with atomic.OutputTransaction(targets, None) as outputs:
        outputs.put(targets[0], b"new one")
        outputs.put(targets[1], b"new two")
        real_replace = os.replace

        def failing_second(source, destination):
            if Path(destination) == second:
                raise OSError(28, "No space left on device")
            real_replace(source, destination)

        monkeypatch.setattr(atomic.os, "replace", failing_second)
        with pytest.raises(OutputError, match=r"cannot write --onnx-out .*two\.json: No space"):
            outputs.commit()
    assert first.read_bytes() == b"old one"  # put back
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.json"]
    monkeypatch.undo()
    with atomic.OutputTransaction(targets, None) as outputs:
        outputs.put(targets[0], b"new one")
        outputs.put(targets[1], b"new two")
        outputs.commit()
    assert (first.read_bytes(), second.read_bytes()) == (b"new one", b"new two")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.json", "two.json"]


def test_layout_levels_are_shares_rounded_up():
    tiles = np.repeat(np.arange(4), 25)  # 100 elements, 25 a tile: bins of 10 elements
    cells = levels(tiles, 0, 4, 10, 4)
    assert cells.shape == (10, 4)
    # bins 2 and 7 straddle two tiles, 5 elements on each: half, rounded up to 5 of 9
    expected = np.zeros((10, 4), int)
    for column, tile in enumerate([0, 0, 0, 1, 1, 2, 2, 2, 3, 3]):
        expected[column, tile] = LEVELS
    expected[2] = [5, 5, 0, 0]
    expected[7] = [0, 0, 5, 5]
    np.testing.assert_array_equal(cells, expected)


@pytest.mark.parametrize("size", [1, 7, 161, 1000, 12345])
def test_layout_levels_match_counting_element_by_element(size):
    tiles = np.random.default_rng(size).integers(3, 50, size).astype(np.int16)
    bins = min(size, 160)
    cells = levels(tiles, 3, 50, bins, 12)
    column = np.arange(size) * bins // size
    row = (tiles.astype(int) - 3) * 12 // 47
    counts = np.zeros((bins, 12), int)
    np.add.at(counts, (column, row), 1)
    per_column = np.bincount(column, minlength=bins)[:, None]
    expected = np.ceil(LEVELS * counts / per_column).astype(int)  # rounded up: 0 only if none
    np.testing.assert_array_equal(cells, expected)


def test_progress_draws_on_a_terminal_only():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = io.StringIO()
    with StageProgress(quiet, enabled=True) as progress, progress.stage("plan"):
        progress.update("solve", 1, 2)
    assert quiet.getvalue() == "" and not progress.enabled
    screen = Terminal()
    with StageProgress(screen, enabled=True) as progress, progress.stage("plan"):
        progress.update("solve", 1, 2)
    assert progress.enabled and "plan" in screen.getvalue()
    with StageProgress(Terminal(), enabled=False) as progress:
        assert not progress.enabled


def test_a_plan_in_a_few_words_names_its_pass_and_its_start_tile():
    from popart_unwind.report.html_tensors import _plan_text

    plan = {"partition": {"groups": 1, "rows": 4, "inner": 2, "cols": 8},
            "fully_connected_pass": "TRAINING_WU", "joint": True, "start_tile": 0}
    assert _plan_text(plan) == "1×4×2×8 (64 tiles), TRAINING_WU with its layer"
    assert _plan_text({**plan, "start_tile": 1200}) == \
        "1×4×2×8 (64 tiles), TRAINING_WU with its layer, from tile 1,200"
    assert _plan_text(None) == "-"
