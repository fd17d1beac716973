"""DecomposeGradSum: a backward Sum of gradient partials becomes a chain of additions that
run as soon as each partial exists. Values are checked with every op's numpy fold; the
schedule and the liveness peak by hand."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from popart_unwind.transforms import run_pipeline
from popart_unwind.transforms.registry import pipeline_names

from popart_unwind.baselines import linear_plan
from popart_unwind.cost import evaluate
from popart_unwind.errors import TransformWarning
from popart_unwind.ir import Builder, Ir
from popart_unwind.ir.serialize import ir_from_json, ir_to_json
from popart_unwind.options import SessionOptions
from popart_unwind.target import IpuModel, TileTarget

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

SHAPE = (4, 8)


def step(decompose: bool, with_loss: bool = True) -> Ir:
    """loss = sum(relu(x)) (the forward); three partials of x's gradient, each the end of
    its own chain of ops run after the one before, summed (the backward); also a forward
    Sum of three inputs, which is no gradient sum."""
    b = Builder()
    x = b.add_input_tensor("float32", SHAPE, "x")
    h = b.ai_onnx.relu([x], name="h")
    forward_sum = b.ai_onnx.sum([h, h, x], name="forward_sum")
    loss = b.ai_onnx.reducesum([forward_sum], keepdims=0, name="loss")
    partials = []
    for k in range(3):
        scale = b.add_constant(np.float32(k + 2), name=f"scale{k}")
        value = b.ai_onnx.mul([x, scale], name=f"chain{k}_start")
        for n in range(4):
            value = b.ai_onnx.sigmoid([value], name=f"chain{k}_{n}")
        partials.append(b.ai_onnx.tanh([value], name=f"partial{k}"))
    b.add_output_tensor(loss)
    b.add_output_tensor(b.ai_onnx.sum(partials, name="grad_sum"))
    ir = b.ir()
    if with_loss:
        ir.final_loss_id = loss
    ir.options = SessionOptions(enable_unwind_layouts=False, check_transform_conditions=True,
                                decompose_grad_sum=decompose)
    run_pipeline(ir)
    return ir


def _values(ir: Ir) -> list[np.ndarray]:
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    return fold_all(ir, {"x": x})


def _types(ir: Ir) -> list[str]:
    return [op.type.name for op in ir.main_graph.ops]


def test_the_chain_computes_the_sum():
    plain, decomposed = step(False), step(True)
    assert _types(plain).count("Sum") == 2
    assert _types(decomposed).count("Sum") == 1  # the forward one stays
    assert _types(decomposed).count("Add") == 2
    assert ir_to_json(plain) != ir_to_json(decomposed)
    for before, after in zip(_values(plain), _values(decomposed), strict=True):
        np.testing.assert_allclose(before, after, rtol=1e-6)


def test_each_addition_runs_as_soon_as_its_partial_exists():
    ir = step(True)
    order = ir.main_graph.schedule()
    ids = [op.id for op in order]
    adds = [op for op in order if op.type.name == "Add"]
    assert len(adds) == 2
    for op in adds:
        assert op.settings.schedule_priority > 0
        latest = max(ids.index(t.producer.id) for t in op.inputs)
        assert ids.index(op.id) == latest + 1
    # partial 0 is added to partial 1 before partial 2's chain starts
    start = next(op for op in order if op.name == "chain2_start")
    assert ids.index(adds[0].id) < ids.index(start.id)


def test_the_partials_die_sooner():
    peaks = []
    for decompose in (False, True):
        ir, target = step(decompose), TileTarget(IpuModel(tiles_per_ipu=1))
        peaks.append(evaluate(ir, target, dict(linear_plan(ir, target))).peak_tile_bytes)
    # one tile: x, the running total and the partial being made, instead of x and every
    # partial at the sum
    assert peaks[1] < peaks[0]


def test_the_pipeline_gains_the_transform_only_when_asked():
    assert "DecomposeGradSum" not in pipeline_names(SessionOptions())
    names = pipeline_names(SessionOptions(decompose_grad_sum=True, recompute="standard"))
    assert names.index("MergeDuplicateOps") < names.index("DecomposeGradSum") \
        < names.index("ExplicitRecompute") < names.index("UnwindLayouts")


def test_a_graph_with_no_loss_is_left_alone_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ir = step(True, with_loss=False)
    assert _types(ir).count("Sum") == 2
    assert any(issubclass(w.category, TransformWarning) for w in caught)


def test_priorities_survive_json():
    ir = step(True)
    again = ir_from_json(ir_to_json(ir, include_data=True))
    assert ir_to_json(again, include_data=True) == ir_to_json(ir, include_data=True)
    assert [op.id for op in again.main_graph.schedule()] == \
        [op.id for op in ir.main_graph.schedule()]


@pytest.mark.parametrize("decompose", [False, True])
def test_reruns_give_the_same_ir(decompose):
    assert ir_to_json(step(decompose)) == ir_to_json(step(decompose))
