"""The Autodiff transform: a forward model becomes one training step (its loss, the
backward pass, the updates) under the session's options, with its declared conditions
checked; what it refuses, it names."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from popart_unwind.transforms import run_pipeline
from popart_unwind.transforms.registry import pipeline_names

from popart_unwind.errors import ModelImportError, TransformError
from popart_unwind.ir import Builder, Ir
from popart_unwind.ir.tensor import TensorType
from popart_unwind.options import SessionOptions
from popart_unwind.training import AutodiffError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

RNG = np.random.default_rng(11)


def two_layers(**options) -> Ir:
    """y = (x @ w1 + b1) @ w2; loss = sum(y * y), a tensor of the model."""
    b = Builder()
    x = b.add_input_tensor("float32", (4, 6), "x")
    w1 = b.add_initialized_input_tensor(RNG.standard_normal((6, 5)).astype(np.float32), "w1")
    b1 = b.add_initialized_input_tensor(RNG.standard_normal(5).astype(np.float32), "b1")
    w2 = b.add_initialized_input_tensor(RNG.standard_normal((5, 3)).astype(np.float32), "w2")
    h = b.ai_onnx.add([b.ai_onnx.matmul([x, w1]), b1], name="h")
    y = b.ai_onnx.matmul([h, w2], name="y")
    b.add_output_tensor(y)
    b.ai_onnx.reducesum([b.ai_onnx.mul([y, y])], keepdims=0, name="loss")
    ir = b.ir()
    ir.options = SessionOptions(enable_unwind_layouts=False, check_transform_conditions=True,
                                **options)
    return ir


def test_autodiff_joins_the_pipeline_after_shape_inference_when_a_loss_is_set():
    assert "Autodiff" not in pipeline_names(SessionOptions())
    names = pipeline_names(SessionOptions(loss="nll"))
    assert names[:3] == ["InferShapes", "Autodiff", "Canonicalize"]


def test_a_training_step_with_sgd_trains_every_weight():
    """SGD with learning rate 1 from the step's own outputs: w - w' is the gradient, which
    equals the hand-derived one."""
    ir = two_layers(loss="loss:0", learning_rate=1.0)
    changed = run_pipeline(ir)
    assert changed["Autodiff"]
    graph = ir.main_graph
    assert ir.final_loss_id == "loss:0" and ir.metadata["kind"] == "training"
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    weights = {t.id: np.asarray(t.data) for t in graph.producerless_tensors()
               if t.tensor_type is TensorType.VARIABLE}
    for tensor in graph.producerless_tensors():  # the stream input, as the oracle takes it
        if tensor.id == "x":
            tensor.data = x
    values = dict(zip([t.id for t in graph.outputs], fold_all(ir, {}), strict=True))
    w1, b1, w2 = weights["w1"], weights["b1"], weights["w2"]
    h = x @ w1 + b1
    dy = 2 * (h @ w2)
    dh = dy @ w2.T
    want = {"w2": h.T @ dy, "w1": x.T @ dh, "b1": dh.sum(0)}
    updated = {t.producer.input(0).id: values[t.id] for t in graph.outputs
               if t.producer is not None and t.producer.type.name == "Sub"}
    assert sorted(updated) == ["b1", "w1", "w2"]
    for name, grad in want.items():
        np.testing.assert_allclose(weights[name] - updated[name], grad, rtol=2e-4, atol=1e-4)


def test_adam_adds_two_float32_states_per_weight():
    ir = two_layers(loss="loss:0", optimizer="adam")
    run_pipeline(ir)
    states = sorted(t.id for t in ir.main_graph.producerless_tensors()
                    if t.tensor_type is TensorType.VARIABLE and "___" in t.id)
    assert states == sorted(f"{p}{w}" for p in ("Accl1___", "Accl2___")
                            for w in ("w1", "b1", "w2"))


def test_without_a_loss_nothing_changes():
    ir = two_layers()
    assert "Autodiff" not in run_pipeline(ir)
    assert ir.final_loss_id is None


@pytest.mark.parametrize(("loss", "error", "words"), [
    ("nothing_here", ModelImportError, "no such tensor"),
    ("y:0", ModelImportError, "one element"),
])
def test_a_bad_loss_is_named(loss, error, words):
    with pytest.raises(error, match=words):
        run_pipeline(two_layers(loss=loss))


def test_an_op_without_a_gradient_rule_is_named():
    b = Builder()
    w = b.add_initialized_input_tensor(RNG.standard_normal((3, 3)).astype(np.float32), "w")
    det = b.ai_onnx.det([w], name="det")
    b.ai_onnx.reducesum([det], keepdims=0, name="loss")
    b.add_output_tensor(det)
    ir = b.ir()
    ir.options = SessionOptions(enable_unwind_layouts=False, loss="loss:0")
    with pytest.raises(AutodiffError, match=r"\(Det\) has no gradient rule"):
        run_pipeline(ir)


def _value(name, dtype=TensorProto.FLOAT, shape=None):
    return oh.make_tensor_value_info(name, dtype, shape)


def _weight(name, shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _control_flow_or_recurrent(op_type):
    """A model whose loss reads, through one ``op_type`` node, a weight ``w``."""
    nodes, inputs, weights = [], [], [_weight("w", (2, 3))]
    if op_type == "If":
        branches = {key: oh.make_graph([oh.make_node(kind, ["w"], [f"{key}_out"])], key, [],
                                       [_value(f"{key}_out", shape=[2, 3])])
                    for key, kind in (("then_branch", "Neg"), ("else_branch", "Abs"))}
        inputs.append(_value("cond", TensorProto.BOOL, []))
        nodes.append(oh.make_node("If", ["cond"], ["out"], **branches))
    elif op_type == "Loop":
        body = oh.make_graph(
            [oh.make_node("Identity", ["c"], ["c_out"]), oh.make_node("Mul", ["v", "v"],
                                                                      ["v_out"])],
            "body", [_value("i", TensorProto.INT64, []), _value("c", TensorProto.BOOL, []),
                     _value("v", shape=[2, 3])],
            [_value("c_out", TensorProto.BOOL, []), _value("v_out", shape=[2, 3])])
        inputs += [_value("trips", TensorProto.INT64, []), _value("cond", TensorProto.BOOL, [])]
        nodes.append(oh.make_node("Loop", ["trips", "cond", "w"], ["out"], body=body))
    elif op_type == "Scan":
        body = oh.make_graph(
            [oh.make_node("Add", ["s", "row"], ["s_out"]),
             oh.make_node("Identity", ["s_out"], ["row_out"])],
            "body", [_value("s", shape=[3]), _value("row", shape=[3])],
            [_value("s_out", shape=[3]), _value("row_out", shape=[3])])
        weights.append(numpy_helper.from_array(np.zeros(3, np.float32), "start"))
        nodes.append(oh.make_node("Scan", ["start", "w"], ["total", "out"], body=body,
                                  num_scan_inputs=1))
    else:  # LSTM, GRU, RNN: X [seq, batch, in] a graph input, W and R weights
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
        inputs.append(_value("x", shape=[2, 2, 3]))
        weights = [_weight("w", (1, gates * 4, 3)), _weight("r", (1, gates * 4, 4))]
        nodes.append(oh.make_node(op_type, ["x", "w", "r"], ["out"], hidden_size=4))
    nodes.append(oh.make_node("ReduceSum", ["out"], ["loss"], keepdims=0))
    graph = oh.make_graph(nodes, op_type, inputs, [_value("loss", shape=[])], weights)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("op_type", ["If", "Loop", "Scan", "LSTM", "GRU", "RNN"])
def test_control_flow_and_recurrent_ops_are_refused_naming_the_op(op_type):
    ir = Ir.from_onnx(_control_flow_or_recurrent(op_type),
                      options=SessionOptions(enable_unwind_layouts=False, loss="loss"))
    with pytest.raises(AutodiffError, match=rf"\({op_type}\) has no gradient rule"):
        run_pipeline(ir)


def test_a_training_step_is_not_made_twice():
    ir = two_layers(loss="loss:0")
    ir.final_loss_id = "loss:0"
    with pytest.raises(TransformError, match="already a training step"):
        run_pipeline(ir)


def norm_model(**options) -> Ir:
    """y = layer_norm(x @ w) * s (s an exporter's scalar initializer), loss = sum(y * y)."""
    b = Builder()
    x = b.add_input_tensor("float32", (4, 6), "x")
    w = b.add_initialized_input_tensor(RNG.standard_normal((6, 8)).astype(np.float32), "w")
    scale = b.add_initialized_input_tensor(np.ones(8, np.float32), "ln_scale")
    bias = b.add_initialized_input_tensor(np.zeros(8, np.float32), "ln_bias")
    s = b.add_initialized_input_tensor(np.float32(0.5), "s")
    h = b.ai_onnx.layernormalization([b.ai_onnx.matmul([x, w]), scale, bias], axis=-1)
    y = b.ai_onnx.mul([h, s], name="y")
    b.add_output_tensor(y)
    b.ai_onnx.reducesum([b.ai_onnx.mul([y, y])], keepdims=0, name="loss")
    ir = b.ir()
    ir.options = SessionOptions(enable_unwind_layouts=False, check_transform_conditions=True,
                                loss="loss:0", **options)
    return ir


def test_a_scalar_initializer_is_a_constant_not_a_weight():
    ir = norm_model(optimizer="adam")
    run_pipeline(ir)
    states = {t.id for t in ir.main_graph.producerless_tensors() if "___" in t.id
              and t.tensor_type is TensorType.VARIABLE}
    assert states == {f"{p}{w}" for p in ("Accl1___", "Accl2___")
                      for w in ("w", "ln_scale", "ln_bias")}


def test_recomputation_works_on_the_step():
    """ExplicitRecompute clones the forward's norm (made with its one output, as ONNX
    exports write it) into the backward pass the step's gradient ops read."""
    ir = norm_model(recompute="recompute_all")
    changed = run_pipeline(ir)
    assert changed["Autodiff"] and changed["ExplicitRecompute"]
    clones = [op for op in ir.main_graph.ops if op.settings.name.endswith("/recomputed")]
    assert "LayerNormalization" in {op.type.name for op in clones}
