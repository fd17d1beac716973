"""MergeCopies: the copies one op reads first, joined into one copy per source IPU."""

from __future__ import annotations

import dataclasses

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
from popart_unwind.ops.ipu_copy import IPU_COPY, destination_ipu, op_ipu
from popart_unwind.options import SessionOptions

WIDTH = 8
TILES = 8


def fan_in(sources: list[int], reader_ipu: int, second_reader: int | None = None) -> Ir:
    """One relu per entry of ``sources`` on that IPU, all summed on ``reader_ipu``; with
    ``second_reader``, an op on that IPU reads the first relu before the sum does."""
    b = Builder()
    x = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    parts = []
    for k, ipu in enumerate(sources):
        with b.virtual_graph(ipu):
            w = b.add_initialized_input_tensor(np.full((WIDTH, WIDTH), 0.1 * (k + 1),
                                                       np.float32), f"w{k}")
            parts.append(b.ai_onnx.relu([b.ai_onnx.matmul([x, w])]))
    outputs = []
    if second_reader is not None:
        with b.virtual_graph(second_reader):
            outputs.append(b.ai_onnx.neg([parts[0]]))
    with b.virtual_graph(reader_ipu):
        outputs.append(b.ai_onnx.sum(parts))
    for out in outputs:
        b.add_output_tensor(out)
    return b.ir()


def prepared(ir: Ir, ipus: int, merge: bool = True) -> Ir:
    ir.options = dataclasses.replace(SessionOptions(check_transform_conditions=True),
                                     ipus=ipus, virtual_graph_mode="manual")
    names = transforms.registry.pipeline_names(ir.options)[:-1]
    transforms.run_pipeline(ir, names if merge else [n for n in names if n != "MergeCopies"])
    return ir


def copies(ir: Ir) -> list:
    return [op for op in ir.main_graph.ops if op.type.name == IPU_COPY]


def test_the_copies_an_op_reads_together_become_one():
    ir = prepared(fan_in([0, 0, 0], 1), 2)
    [copy] = copies(ir)
    assert len(copy.inputs) == 3 and op_ipu(copy) == 0
    [total] = [op for op in ir.main_graph.ops if op.type.name == "Sum"]
    assert [t.producer for t in total.inputs] == [copy] * 3
    assert [t.shape for t in copy.outputs] == [t.shape for t in copy.inputs]


def test_one_merged_copy_per_source_ipu():
    ir = prepared(fan_in([0, 1, 0, 1], 2), 3)
    to_sum = [c for c in copies(ir) if destination_ipu(c) == 2]
    assert sorted((op_ipu(c), len(c.inputs)) for c in to_sum) == [(0, 2), (1, 2)]


def test_a_copy_read_first_by_another_op_stays_apart():
    ir = prepared(fan_in([0, 0, 0], 1, second_reader=1), 2)
    assert sorted(len(c.inputs) for c in copies(ir)) == [1, 2]


def test_a_pipeline_merges_nothing():
    ir = fan_in([0, 0, 0], 1)
    ir.options = SessionOptions(ipus=2, virtual_graph_mode="manual", enable_pipelining=True)
    assert "MergeCopies" not in transforms.registry.pipeline_names(ir.options)
    transforms.run_pipeline(ir, ["InferShapes", "InferPipelineStages", "InterIpuCopy"])
    assert transforms.registry.apply("MergeCopies", ir) is False


@settings(max_examples=15, deadline=None)
@given(sources=st.lists(st.integers(0, 2), min_size=1, max_size=5), reader=st.integers(0, 2),
       second=st.none() | st.integers(0, 2))
def test_merging_saves_one_sync_per_copy_joined_and_changes_nothing_else(sources, reader,
                                                                          second):
    """Same layouts, exchange and bytes over the links; each copy merged away saves
    exactly one synchronisation across the IPUs."""
    target = TileTarget(IpuModel(tiles_per_ipu=TILES, ipus=3))
    costs, counts = [], []
    for merge in (False, True):
        ir = prepared(fan_in(sources, reader, second), 3, merge)
        plan = plan_ir(ir, target)
        costs.append(evaluate(ir, target, op_plans=plan.op_plans))
        counts.append(len(copies(ir)))
    plain, merged = costs
    assert merged.ipu_copy_bytes == plain.ipu_copy_bytes
    assert merged.exchange_bytes == plain.exchange_bytes
    assert plain.ipu_copy_cycles - merged.ipu_copy_cycles == pytest.approx(
        (counts[0] - counts[1]) * target.model.ipu_copy_sync_cycles,
        abs=counts[0])  # each copy's bytes are rounded up to whole link cycles
    assert counts[1] <= counts[0]
