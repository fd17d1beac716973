"""The cost model on several IPUs: each IPU's tiles, IpuCopy over the links, and one IPU
exactly as before."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from popart_unwind.transforms.unwind_layouts import plan_ir

from popart_unwind import transforms
from popart_unwind.cost import evaluate
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir import Ir
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.ops.ipu_copy import IPU_COPY
from popart_unwind.options import SessionOptions

TILES = 16
WIDTH = 32


def mlp(layers: int, placement: list[int] | None) -> Ir:
    b = Builder()
    h = b.add_input_tensor(np.float32, (8, WIDTH), "x")
    for k in range(layers):
        with b.virtual_graph(placement[k]) if placement else contextlib.nullcontext():
            w = b.add_initialized_input_tensor(
                np.full((WIDTH, WIDTH), 0.5, np.float32), f"w{k}")
            bias = b.add_initialized_input_tensor(np.zeros(WIDTH, np.float32), f"b{k}")
            h = b.ai_onnx.relu([b.ai_onnx.add([b.ai_onnx.matmul([h, w]), bias])])
    b.add_output_tensor(h)
    return b.ir()


def planned(ir: Ir, ipus: int):
    ir.options = dataclasses.replace(
        ir.options, ipus=ipus, virtual_graph_mode="manual" if ipus > 1 else "off")
    transforms.run_pipeline(ir, transforms.registry.pipeline_names(ir.options)[:-1])
    target = TileTarget(IpuModel(tiles_per_ipu=TILES, ipus=ipus))
    plan = plan_ir(ir, target)
    return evaluate(ir, target, op_plans=plan.op_plans), plan


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=2, max_size=5).map(sorted))
def test_a_split_model_costs_the_same_exchange_plus_its_copies(placement):
    """Layouts name tiles within an IPU and a copy keeps its source's layout, so every op
    exchanges what it would on one IPU; the step adds each copy's link transfer; every
    weight's bytes move to its IPU's tiles, none is lost or counted twice."""
    ipus = max(placement) + 1
    one, _ = planned(mlp(len(placement), placement), 1)
    split, _ = planned(mlp(len(placement), placement), ipus)
    assert split.exchange_bytes == one.exchange_bytes
    copies = [row for row in split.ops if row.type == IPU_COPY]
    crossings = sum(1 for a, b in itertools.pairwise(placement) if a != b)
    assert len(copies) == crossings
    assert split.ipu_copy_bytes == sum(r.ipu_copy_bytes for r in copies) \
        == crossings * 8 * WIDTH * 4
    model = IpuModel(tiles_per_ipu=TILES, ipus=ipus)
    assert split.ipu_copy_cycles == crossings * model.ipu_copy_cycles(8 * WIDTH * 4)
    assert split.cycles == one.cycles + split.ipu_copy_cycles
    assert split.always_live_bytes_per_tile.size == ipus * TILES
    assert split.always_live_bytes_per_tile.sum() == one.always_live_bytes_per_tile.sum()
    per_ipu = split.per_ipu()
    assert len(per_ipu) == ipus
    assert max(d["peak_tile_bytes"] for d in per_ipu) == split.peak_tile_bytes
    assert sum(d["exchange_bytes"] for d in per_ipu) == split.exchange_bytes
    assert sum(d["ipu_copy_bytes"] for d in per_ipu) == split.ipu_copy_bytes


def test_one_ipu_summary_is_as_before_and_several_add_their_figures():
    one, _ = planned(mlp(2, None), 1)
    assert "per_ipu" not in one.summary() and one.num_ipus == 1
    split, _ = planned(mlp(4, [0, 0, 1, 1]), 2)
    summary = split.summary()
    assert summary["ipus"] == 2 and summary["ipu_copy_bytes"] == 8 * WIDTH * 4
    assert [d["fits"] for d in summary["per_ipu"]] == [True, True]


def test_the_planner_lays_a_copied_tensor_out_for_its_readers_on_the_other_ipu():
    """The copy's result has its source's layout: what the matmul on IPU 1 wants of ``x``
    reaches ``x`` on IPU 0, as when both sit on one IPU."""
    def model(placed: bool) -> Ir:
        b = Builder()
        x = b.add_input_tensor(np.float32, (8, WIDTH), "x")
        w = b.add_initialized_input_tensor(np.ones((WIDTH, WIDTH), np.float32), "w")
        with b.virtual_graph(0) if placed else contextlib.nullcontext():
            r = b.ai_onnx.relu([x])
        with b.virtual_graph(1) if placed else contextlib.nullcontext():
            y = b.ai_onnx.matmul([x, w])
        b.add_output_tensor(r)
        b.add_output_tensor(y)
        return b.ir()

    _, alone = planned(model(False), 1)
    split, together = planned(model(True), 2)
    assert np.array_equal(alone.tensor("", "x").tiles, together.tensor("", "x").tiles)
    assert split.avoidable_exchange_bytes == 0


def test_the_machine_prices_a_copy_from_its_links():
    model = IpuModel(ipus=4)
    assert model.ipu_copy_cycles(0) == 0
    assert model.ipu_copy_cycles(237) == 1 + model.ipu_copy_sync_cycles
    assert TileTarget(model).num_ipus == 4
    with pytest.raises(Exception, match="ipus must be at least 1"):
        IpuModel(ipus=0)


def test_options_keep_subgraph_outlining_to_one_ipu():
    with pytest.raises(Exception, match="enable_outlining on more than one IPU"):
        SessionOptions(ipus=2, virtual_graph_mode="auto", enable_outlining=True)
