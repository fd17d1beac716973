"""The cost model and the baseline with the library's own layout rules (REGISTRY)."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.baselines import linear_plan, popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.ir import Builder, OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.target import IpuModel, TileTarget


def _has_matmul_creator() -> bool:
    opdef = REGISTRY.lookup(OpType("ai.onnx", "MatMul", 13))
    return opdef is not None and hasattr(opdef.layout, "wanted_input_tiles")


def block_ir():
    """x -> MatMul(w1 via reshape+transpose) + bias -> Relu -> MatMul(w2) -> output."""
    b = Builder()
    x = b.add_input_tensor("float32", (2, 8, 16), "x")
    w1 = b.add_initialized_input_tensor(np.zeros((4, 8, 16), np.float32), "w1")
    bias = b.add_initialized_input_tensor(np.zeros(32, np.float32), "bias")
    w2 = b.add_initialized_input_tensor(np.zeros((32, 16), np.float32), "w2")
    shape = b.add_constant(np.array([32, 16], np.int64), "shape")
    rhs = b.ai_onnx.transpose([b.ai_onnx.reshape([w1, shape])], perm=[1, 0])
    h = b.ai_onnx.relu([b.ai_onnx.add([b.ai_onnx.matmul([x, rhs]), bias])])
    b.add_output_tensor(b.ai_onnx.matmul([h, w2]))
    return b.ir()


def test_library_rules_give_a_complete_consistent_report():
    ir = block_ir()
    target = TileTarget(IpuModel(tiles_per_ipu=32))
    for plan in (popart_baseline(ir, target).mappings, linear_plan(ir, target)):
        report = evaluate(ir, target, plan)
        assert len(report.ops) == len(ir.main_graph.ops)
        assert report.received_bytes_per_tile.sum() == report.exchange_bytes
        assert 0 <= report.objective <= report.upper_bound


@pytest.mark.skipif(not _has_matmul_creator(), reason="MatMul layout rule not registered yet")
def test_library_rules_unwind_a_weight_to_its_matmul_and_beat_linear():
    ir = block_ir()
    target = TileTarget(IpuModel(tiles_per_ipu=32))
    plan = popart_baseline(ir, target)
    wanted = target.matmul_tiles(1, 16, 16, 32, "float32", "rhs").reshape(16, 32)
    assert np.array_equal(plan.decision("w1").tiles, wanted.T.reshape(-1))
    assert plan.decision("bias").method == "linear"
    ours = evaluate(ir, target, plan.mappings)
    linear = evaluate(ir, target, linear_plan(ir, target))
    assert ours.exchange_bytes < linear.exchange_bytes
    assert ours.objective > linear.objective
