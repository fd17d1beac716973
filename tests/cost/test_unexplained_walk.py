"""``evaluate(..., explain=False)`` leaves out each op's avoidable bytes and the planner's
objective, and nothing else: every other figure of the report, every op's row but its
avoidable bytes, and the per-tile arrays are the full walk's (the memory search compares
its settings by these)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from popart_unwind.transforms import run_pipeline
from popart_unwind.transforms.unwind_layouts.plan import plan_ir

from popart_unwind.baselines import linear_plan
from popart_unwind.baselines.popart_baseline import popart_baseline
from popart_unwind.cost.walk import evaluate
from popart_unwind.ir import Ir
from popart_unwind.options import with_options
from popart_unwind.report.demo_model import build_demo_ir
from popart_unwind.target import IpuModel, TileTarget

#: The summary's figures the unexplained walk does not compute.
UNEXPLAINED = {"objective", "upper_bound", "avoidable_exchange_bytes"}


def _demo(setting: tuple[str, ...], ipus: int) -> Ir:
    ir = build_demo_ir()
    ir.options = with_options(ir.options, setting)
    if ipus > 1:
        ir.options = dataclasses.replace(ir.options, virtual_graph_mode="auto",
                                         ipus=ipus)
    run_pipeline(ir)
    return ir


def _plans(ir: Ir, target: TileTarget) -> dict[str, tuple[dict, dict]]:
    ours = plan_ir(ir, target, write=False)
    popart = popart_baseline(ir, target)
    return {
        "ours": ({(p.graph_id, p.tensor_id): p.tiles for p in ours.tensors},
                 dict(ours.op_plans)),
        "popart": (dict(popart.mappings), dict(popart.op_plans)),
        "linear": (dict(linear_plan(ir, target)), {}),
    }


def _without_avoidable(rows: list) -> list:
    return [dataclasses.replace(row, avoidable_bytes=0) for row in rows]


@pytest.mark.parametrize("setting, ipus", [
    ((), 1),
    (("recompute=standard", "serialize_matmuls=output_channels:2"), 1),
    ((), 2),
])
def test_an_unexplained_walk_gives_every_other_figure_of_the_full_walk(setting, ipus):
    ir = _demo(setting, ipus)
    target = TileTarget(IpuModel(tiles_per_ipu=64, ipus=ipus))
    for name, (mappings, op_plans) in _plans(ir, target).items():
        full = evaluate(ir, target, mappings, op_plans=op_plans)
        bare = evaluate(ir, target, mappings, op_plans=op_plans, explain=False)
        assert math.isnan(bare.objective) and math.isnan(bare.upper_bound), name
        assert not math.isnan(full.objective), name
        assert {k: v for k, v in bare.summary().items() if k not in UNEXPLAINED} == \
            {k: v for k, v in full.summary().items() if k not in UNEXPLAINED}, name
        assert _without_avoidable(bare.ops) == _without_avoidable(full.ops), name
        assert all(row.avoidable_bytes == 0 for row in bare.ops), name
        for array in ("peak_bytes_per_tile", "resident_bytes_per_tile",
                      "received_bytes_per_tile", "always_live_bytes_per_tile"):
            np.testing.assert_array_equal(getattr(bare, array), getattr(full, array),
                                          err_msg=f"{name}: {array}")
        assert bare.fullest_tile == full.fullest_tile, name
        # the full walk's avoidable bytes are what was left out: some plan pays them
        if name == "linear":
            assert full.avoidable_exchange_bytes > 0
