"""SerializeMatMuls: a matmul cut into pieces computes what it computed (every op's numpy
fold is the oracle), a layer's passes are cut along one cube axis and their pieces are
planned as layers, and a matmul that cannot be cut is left whole with a warning."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from popart_unwind.transforms import plan_ir, run_pipeline
from popart_unwind.transforms.serialize_matmuls import FACTOR_ATTRIBUTE, MODE_ATTRIBUTE

from popart_unwind.baselines import popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.errors import OptionError, TransformError, TransformWarning
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir import Ir
from popart_unwind.ir.serialize import ir_from_json, ir_to_json
from popart_unwind.layers import fully_connected_layers
from popart_unwind.options import SessionOptions
from popart_unwind.target import IpuModel, TileTarget

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all  # noqa: E402

MODES = ("input_channels", "output_channels", "reducing_dim")


def matmul_ir(setting: str = "", attributes: dict | None = None) -> Ir:
    """relu(x @ w) with x [2, 8, 8] (a batch of two) and w [8, 12]."""
    b = Builder()
    x = b.add_input_tensor("float32", (2, 8, 8), "x")
    w = b.add_initialized_input_tensor(
        np.random.default_rng(1).standard_normal((8, 12)).astype(np.float32), "w")
    b.add_output_tensor(b.op("Relu", [b.op("MatMul", [x, w], attributes or {})]))
    ir = b.ir()
    ir.options = SessionOptions(enable_unwind_layouts=False, check_transform_conditions=True,
                                serialize_matmuls=setting)
    run_pipeline(ir)
    return ir


def _values(ir: Ir, shape=(2, 8, 8)) -> list[np.ndarray]:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return fold_all(ir, {ir.main_graph.inputs[0].id: x})


def _count(ir: Ir, name: str) -> int:
    return sum(1 for op in ir.all_ops() if op.type.name == name)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("factor", [1, 2, 4])
def test_the_pieces_compute_the_product(mode, factor):
    whole, cut = matmul_ir(), matmul_ir(f"{mode}:{factor}")
    assert _count(cut, "MatMul") == factor
    joiner = "Add" if mode == "reducing_dim" else "Concat"
    assert _count(cut, joiner) == (0 if factor == 1 else factor - 1 if joiner == "Add" else 1)
    for before, after in zip(_values(whole), _values(cut), strict=True):
        np.testing.assert_allclose(before, after, rtol=1e-5, atol=1e-6)


def test_builder_attributes_choose_per_op_and_override_the_session():
    cut = matmul_ir("", {MODE_ATTRIBUTE: "output_channels", FACTOR_ATTRIBUTE: 3})
    assert _count(cut, "MatMul") == 3
    kept = matmul_ir("reducing_dim:2", {MODE_ATTRIBUTE: "none"})
    assert _count(kept, "MatMul") == 1


@pytest.mark.parametrize("attributes", [{MODE_ATTRIBUTE: "rows", FACTOR_ATTRIBUTE: 2},
                                        {MODE_ATTRIBUTE: "output_channels",
                                         FACTOR_ATTRIBUTE: 0}])
def test_bad_builder_attributes_name_the_op(attributes):
    with pytest.raises(TransformError, match=r"MatMul.*__serialize_matmul_mode"):
        matmul_ir("", attributes)


def test_a_factor_that_does_not_divide_leaves_the_matmul_whole_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ir = matmul_ir("output_channels:5")
    assert _count(ir, "MatMul") == 1
    assert any(issubclass(w.category, TransformWarning) and "left whole" in str(w.message)
               for w in caught)


@pytest.mark.parametrize("text", ["output_channels", "rows:2", "reducing_dim:0",
                                  "input_channels:x"])
def test_bad_settings_are_refused(text):
    with pytest.raises(OptionError, match="serialize_matmuls"):
        SessionOptions(serialize_matmuls=text)


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16, bias=False), torch.nn.ReLU(),
                                          torch.nn.Linear(16, 12, bias=False))

    def forward(self, x):
        return self.layers(x)


def training_step(setting: str) -> Ir:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    ir = Ir.from_torch(Mlp(), (x,), training=True,
                       options=SessionOptions(enable_unwind_layouts=False,
                                              serialize_matmuls=setting))
    run_pipeline(ir)
    return ir


@pytest.mark.parametrize("mode", MODES)
def test_a_layer_is_cut_along_one_cube_axis_into_layers_of_pieces(mode):
    whole, cut = training_step(""), training_step(f"{mode}:2")
    layers = fully_connected_layers(cut)
    assert len(fully_connected_layers(whole)) == 2
    # each layer's passes present, cut in two: two layers of pieces per layer
    assert sorted(len(layer.ops()) for layer in layers) == \
        sorted(len(layer.ops()) for layer in fully_connected_layers(whole) for _ in range(2))
    axis = {"input_channels": 1, "reducing_dim": 2, "output_channels": 3}[mode]
    for layer in layers:
        original = next(w for w in fully_connected_layers(whole)
                        if w.fwd.id == layer.fwd.settings.serialized[0])
        expected = list(original.cube)
        expected[axis] //= 2
        assert layer.cube == tuple(expected)  # the piece's cube: one axis halved
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    feeds = {whole.main_graph.inputs[-1].id: x}
    for before, after in zip(fold_all(whole, feeds), fold_all(cut, feeds), strict=True):
        np.testing.assert_allclose(before, after, rtol=1e-5, atol=1e-6)


def test_serialized_steps_plan_and_cost_with_both_plans():
    ir = training_step("output_channels:2")
    target = TileTarget(IpuModel(tiles_per_ipu=16))
    plan = plan_ir(ir, target)
    ours = evaluate(ir, target, mappings={(p.graph_id, p.tensor_id): p.tiles
                                          for p in plan.tensors}, op_plans=plan.op_plans)
    baseline = popart_baseline(ir, target)
    theirs = evaluate(ir, target, mappings=dict(baseline.mappings), op_plans=baseline.op_plans)
    pieces = [op for op in ir.main_graph.ops if op.settings.serialized is not None]
    passes = sum(len(layer.ops()) for layer in fully_connected_layers(training_step("")))
    assert len(pieces) == 2 * passes == 10  # the first layer computes no input gradient
    # the baseline plans every piece as a pass of its piece layer, as Poplibs would
    assert {(ir.main_graph.id, op.id) for op in pieces} <= set(baseline.op_plans)
    assert ours.exchange_bytes <= theirs.exchange_bytes


def test_pieces_survive_json():
    ir = training_step("reducing_dim:2")
    again = ir_from_json(ir_to_json(ir, include_data=True))
    assert ir_to_json(again, include_data=True) == ir_to_json(ir, include_data=True)
    assert [op.settings.serialized for op in again.main_graph.ops] == \
        [op.settings.serialized for op in ir.main_graph.ops]
