"""``cost_plans(..., side_by_side=True)`` costs our plan here while the baselines are
costed in forked children: the reports are the ones the walks give one after another in
this process, figure for figure, in the same order, for a model with and without
recomputation, on one IPU and on two."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from popart_unwind.options import with_options
from popart_unwind.report import forked
from popart_unwind.report.demo_model import build_demo_ir
from popart_unwind.report.progress import StageProgress
from popart_unwind.report.session import cost_plans, plan_ours, transform
from popart_unwind.target import IpuModel

pytestmark = pytest.mark.skipif(not forked.available(), reason="needs fork")

#: Every per-tile array of a report.
ARRAYS = ("peak_bytes_per_tile", "resident_bytes_per_tile", "received_bytes_per_tile",
          "always_live_bytes_per_tile")


def _costed(setting: tuple[str, ...], ipus: int, side_by_side: bool) -> dict:
    ir = build_demo_ir()
    ir.options = with_options(ir.options, setting)
    if ipus > 1:
        ir.options = dataclasses.replace(ir.options, virtual_graph_mode="auto", ipus=ipus)
    baseline_ir = transform(ir)
    model = IpuModel(tiles_per_ipu=64, ipus=ipus)
    with StageProgress(None, enabled=False) as progress:
        run = plan_ours(ir, model, None, progress)
        return cost_plans(run, "popart", progress, baseline_ir, side_by_side).costs


@pytest.mark.parametrize("setting, ipus", [((), 1), (("recompute=standard",), 1), ((), 2)])
def test_walks_in_forked_children_give_the_reports_of_walks_in_this_process(
        setting, ipus, monkeypatch):
    forks = []
    run_forked = forked.run_forked
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)  # a one-core machine forks too
    monkeypatch.setattr(forked, "run_forked",
                        lambda jobs, *args: forks.append(len(jobs)) or run_forked(jobs, *args))
    here = _costed(setting, ipus, side_by_side=False)
    assert forks == []
    apart = _costed(setting, ipus, side_by_side=True)
    assert forks == [2]  # PopART's plan and the linear plan in children, ours here
    assert list(apart) == list(here) == ["ours", "popart", "linear"]
    for name, report in here.items():
        assert apart[name].summary() == report.summary(), name
        assert apart[name].ops == report.ops, name
        assert apart[name].fullest_tile == report.fullest_tile, name
        for array in ARRAYS:
            np.testing.assert_array_equal(getattr(apart[name], array),
                                          getattr(report, array), err_msg=f"{name}: {array}")
