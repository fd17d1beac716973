"""``--option memory_weight=W``: when our plan does not fit, PopART's memory settings are
tried and the one of least cycles + W × bytes over the budget is kept; the plan file
records every setting tried, and its summary is the setting kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from cli_runner import run

from popart_unwind.report.memory_search import AS_GIVEN, MEMORY_SETTINGS, score
from popart_unwind.report.plan_file import validate_plan

#: Few enough tiles that the tiny GPT-2 training step is over a tile's bytes.
TILES = 4


def test_the_setting_of_least_score_is_kept_and_summarised(factory):
    status, out, err = run("plan", "tiny_factories:gpt2", "--training", "--tiles",
                           str(TILES), "--out", "plan.json", "--option",
                           "memory_weight=2", "--baseline", "none", "--report", "report")
    assert (status, err) == (0, ""), err
    plan = json.loads((factory / "plan.json").read_text())
    validate_plan(plan)
    search = plan["memory_search"]
    trials = search["trials"]
    assert [t["setting"] for t in trials] == [AS_GIVEN] + [", ".join(s)
                                                           for s in MEMORY_SETTINGS]
    assert not trials[0]["fits"]  # the search ran because the plan as given did not fit
    budget = search["bytes_per_tile"]
    for trial in trials:
        over = max(0, trial["peak_tile_bytes"] - budget)
        assert trial["score"] == trial["cycles"] + 2 * over
    kept = min(trials, key=lambda t: t["score"])
    assert search["kept"] == kept["setting"] != AS_GIVEN
    ours = plan["summary"]["ours"]  # the summary is the kept setting's plan
    assert (ours["peak_tile_bytes"], ours["cycles"]) == (kept["peak_tile_bytes"],
                                                         kept["cycles"])
    assert f"kept {kept['setting']}:" in out and "memory settings tried" in out
    page = (factory / "report" / "index.html").read_text()
    assert "<h2>Memory settings tried</h2>" in page
    section = page.split("<h2>Memory settings tried</h2>")[1].split("<h2>")[0]
    assert section.count("(kept)") == 1 and section.count("<tr>") == len(trials) + 1


def test_without_a_weight_or_when_it_fits_nothing_is_searched(factory):
    status, out, _ = run("plan", "tiny_factories:gpt2", "--training", "--tiles",
                         str(TILES), "--out", "plan.json", "--baseline", "none")
    assert status == 0 and "memory:" not in out
    assert "memory_search" not in json.loads((factory / "plan.json").read_text())
    status, out, _ = run("demo", "--out", "demo.json", "--option", "memory_weight=5")
    assert status == 0 and "memory:" not in out
    assert "memory_search" not in json.loads((factory / "demo.json").read_text())


def test_the_score_counts_only_the_bytes_over():
    class Report:
        cycles, peak_tile_bytes = 1000, 700

    assert score(Report(), 3.0, 600) == 1000 + 3 * 100
    assert score(Report(), 3.0, 800) == 1000


def test_a_setting_that_fails_is_recorded_and_never_kept():
    from transformer_block import transformer_block_ir

    from popart_unwind.baselines.linear_plan import linear_plan
    from popart_unwind.cost.walk import evaluate
    from popart_unwind.errors import TransformError
    from popart_unwind.machine import IpuModel, TileTarget
    from popart_unwind.report import memory_search
    from popart_unwind.report.session import transform

    model = IpuModel(tiles_per_ipu=2, bytes_per_tile=64)
    first_ir = transformer_block_ir()
    transform(first_ir)
    target = TileTarget(model)
    first = evaluate(first_ir, target, dict(linear_plan(first_ir, target)))
    calls = []

    def failing(ir):
        calls.append(ir.options.rotate_plan_start_tiles)
        if ir.options.rotate_plan_start_tiles:
            raise TransformError("this setting cannot be planned")
        transform(ir)

    _, search = memory_search.search_memory_settings(transformer_block_ir, first, model, failing)
    failed = [t for t in search.trials if t.failed]
    assert [t.setting for t in failed] == ["rotate_plan_start_tiles=true"]
    assert failed[0].entry()["score"] is None and search.kept != failed[0].setting
    assert len(calls) == len(search.trials) - 1  # inference: no recomputation
