"""LSTM, GRU and RNN: shapes as ONNX's shape inference gives them (every optional input and
output, both layouts, every direction), folds equal to ONNX's reference evaluator where it
follows the operator's definition, the attributes it leaves out (activations, clip,
input_forget) checked against the cell equations written out here, and ONNX's backend node
tests, which import."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator
from onnx_cases import (
    check_backend_cases,
    folded,
)
from op_building import build

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType
from popart_unwind.ir.op import GRAPHCORE_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.ops.registry import HIGH_OUTLINE_VALUE
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=20, deadline=None)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": 3, "GRU": 2, "RNN": 2}


def operands(rng, name, seq, batch, size, hidden, dirs, batch_major, optional):
    """X, W, R and, where ``optional`` says so, B, sequence_lens, initial_h (initial_c, P):
    None for an absent optional input (trailing ones dropped)."""
    gates = GATES[name]
    x_shape = (batch, seq, size) if batch_major else (seq, batch, size)
    state = (batch, dirs, hidden) if batch_major else (dirs, batch, hidden)

    def draw(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)

    inputs = [draw(*x_shape), draw(dirs, gates * hidden, size),
              draw(dirs, gates * hidden, hidden),
              draw(dirs, 2 * gates * hidden) if optional[0] else None,
              np.full(batch, seq, np.int32) if optional[1] else None,
              draw(*state) if optional[2] else None]
    if name == "LSTM":
        inputs += [draw(*state) if optional[3] else None,
                   draw(dirs, 3 * hidden) if optional[4] else None]
    while inputs[-1] is None:
        inputs.pop()
    return inputs


def onnx_model(name, inputs, attributes, version, outputs):
    """One node of ``name`` with absent inputs and outputs as empty names."""
    names = ["" if a is None else f"x{i}" for i, a in enumerate(inputs)]
    node = oh.make_node(name, names, outputs, **attributes)
    graph = oh.make_graph(
        [node], "g",
        [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, inputs, strict=True) if n],
        [onnx.ValueInfoProto(name=o) for o in outputs if o])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", version)])


def inferred_shapes(name, inputs, attributes, count):
    """The output shapes ONNX's strict shape inference gives (opset 14)."""
    outputs = [f"y{i}" for i in range(count)]
    model = onnx_model(name, inputs, attributes, 14, outputs)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return [tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            for v in inferred.graph.output]


@SETTINGS
@given(st.sampled_from(["LSTM", "GRU", "RNN"]), st.integers(1, 4), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3),
       st.sampled_from(["forward", "reverse", "bidirectional"]), st.booleans(),
       st.lists(st.booleans(), min_size=5, max_size=5), st.booleans(), st.integers(0, 99))
def test_fold_and_shapes_agree_with_onnx(name, seq, batch, size, hidden, direction,
                                        batch_major, optional, linear, seed):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = operands(np.random.default_rng(seed), name, seq, batch, size, hidden, dirs,
                      batch_major, optional)
    attributes = {"hidden_size": hidden, "direction": direction, "layout": int(batch_major)}
    if name == "GRU":
        attributes["linear_before_reset"] = int(linear)
    count = OUTPUTS[name]
    model = onnx_model(name, inputs, attributes, 14, [f"y{i}" for i in range(count)])
    feeds = {f"x{i}": a for i, a in enumerate(inputs) if a is not None}
    want = ReferenceEvaluator(model).run(None, feeds)
    shapes, values = folded(name, inputs, attributes, 14, outputs=count)
    assert shapes == [w.shape for w in want] == inferred_shapes(name, inputs, attributes,
                                                                count)
    for value, expected in zip(values, want, strict=True):
        assert value.dtype == expected.dtype
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "outputs"), [
    (name, outputs) for name in ("LSTM", "GRU", "RNN")
    for outputs in (["y"], ["", "yh"], ["y", ""], ["", "", "yc"], ["y", "yh", "yc"])
    if len(outputs) <= OUTPUTS[name]])
def test_optional_outputs_are_typed_where_present(name, outputs):
    """Subsets of the outputs, as ONNX's shape inference types them (layout 0)."""
    inputs = operands(np.random.default_rng(0), name, 5, 2, 3, 4, 1, False, [True] * 5)
    model = onnx_model(name, inputs, {"hidden_size": 4}, 14, outputs)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    want = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            for v in inferred.graph.output}
    assert want
    ir = Ir.from_onnx(model)
    got = {t.id: t.shape for t in ir.main_graph.outputs}
    assert got == want and len(got) == sum(1 for o in outputs if o)


def test_hidden_size_comes_from_r_when_absent():
    inputs = operands(np.random.default_rng(1), "GRU", 3, 2, 5, 6, 1, False, [False] * 5)
    shapes, _ = folded("GRU", inputs, {}, 7, outputs=2)
    assert shapes == [(3, 1, 2, 6), (1, 2, 6)]


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_rnn_activations_and_clip_follow_the_cell_equation():
    """Ht = f(clip(Xt W^T + Ht-1 R^T + Wb + Rb)), f an activation with its alpha and beta."""
    rng = np.random.default_rng(2)
    x, w, r, b = operands(rng, "RNN", 3, 2, 3, 4, 1, False, [True, False, False, False, False])
    attributes = {"activations": ["Affine"], "activation_alpha": [0.5],
                  "activation_beta": [0.25], "clip": 0.3}
    _, (y, y_h) = folded("RNN", [x, w, r, b], attributes, 14, outputs=2)
    h = np.zeros((2, 4), np.float32)
    for t in range(3):
        h = 0.5 * np.clip(x[t] @ w[0].T + h @ r[0].T + b[0, :4] + b[0, 4:], -0.3, 0.3) + 0.25
        np.testing.assert_allclose(y[t, 0], h, rtol=1e-5)
    np.testing.assert_allclose(y_h[0], h, rtol=1e-5)


def test_lstm_input_forget_couples_the_input_gate_to_the_forget_gate():
    rng = np.random.default_rng(3)
    x, w, r = operands(rng, "LSTM", 2, 1, 2, 3, 1, False, [False] * 5)
    _, (y, y_h, y_c) = folded("LSTM", [x, w, r], {"input_forget": 1}, 14, outputs=3)
    h = c = np.zeros((1, 3), np.float32)
    for t in range(2):
        _, o, f, g = np.split(x[t] @ w[0].T + h @ r[0].T, 4, axis=-1)  # i unused
        f = _sigmoid(f)
        c = f * c + (1 - f) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        np.testing.assert_allclose(y[t, 0], h, rtol=1e-5)
    np.testing.assert_allclose(y_h[0], h, rtol=1e-5)
    np.testing.assert_allclose(y_c[0], c, rtol=1e-5)


def test_unknown_activation_or_short_sequences_stay_unfolded():
    rng = np.random.default_rng(4)
    x, w, r = operands(rng, "RNN", 3, 2, 3, 4, 1, False, [False] * 5)
    assert folded("RNN", [x, w, r], {"activations": ["Gelu"]}, 14, outputs=2)[1] is None
    lens = np.array([3, 2], np.int32)
    assert folded("RNN", [x, w, r, None, lens], {}, 14, outputs=2)[1] is None


@pytest.mark.parametrize(("name", "specs", "attributes"), [
    ("LSTM", [(3, 2, 5), (1, 16, 5), (1, 16, 4)], {"hidden_size": 5}),  # R is for 4
    ("LSTM", [(3, 2, 5), (1, 9, 5), (1, 9, 3)], {}),  # 3 gates, LSTM has 4
    ("GRU", [(3, 2, 5), (1, 9, 5), (1, 9, 3)], {"direction": "bidirectional"}),
    ("GRU", [(3, 2, 5), (1, 9, 5), (1, 9, 3)], {"direction": "sideways"}),
    ("RNN", [(3, 2), (1, 4, 2), (1, 4, 4)], {}),  # X is 2-D
    ("RNN", [(3, 2, 5), (1, 4, 5), (1, 4, 4), (1, 4)], {}),  # B holds 2 * hidden
    ("RNN", [(3, 2, 5), (1, 4, 5), (1, 4, 4), None, None, (1, 3, 4)], {}),  # batch is 2
    ("RNN", [(3, 2, 5), (1, 4, 5), (1, 4, 4)], {"layout": 2}),
])
def test_bad_operands_are_refused(name, specs, attributes):
    op = build(name, specs, attributes, outputs=2, version=14)
    with pytest.raises(ShapeError):
        infer_op(op)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_backend_node_tests_import_with_onnx_shapes_and_values(name):
    check_backend_cases(name)


def test_layouts_are_barriers_worth_outlining():
    for name in ("LSTM", "GRU", "RNN"):
        op = build(name, [(3, 2, 5), (1, 4 * GATES[name], 5), (1, 4 * GATES[name], 4)])
        assert REGISTRY.layout_rule(op) is BARRIER
        assert REGISTRY.outline_value(op) == HIGH_OUTLINE_VALUE


@pytest.mark.parametrize(("attributes", "output"), [({}, (5, 2, 4)),
                                                    ({"output_full_sequence": 0}, (2, 4))])
def test_popart_lstm_shapes(attributes, output):
    graph = Ir().main_graph
    specs = [(5, 2, 3), (4, 7, 4), (4, 4), (2, 2, 4)]
    inputs = [graph.add_input(f"x{i}", "float32", spec) for i, spec in enumerate(specs)]
    op = graph.create_op(OpType(GRAPHCORE_DOMAIN, "LSTM", 1), inputs, 2, attributes)
    infer_op(op)
    assert [t.shape for t in op.outputs] == [output, (2, 4)]
    assert REGISTRY.layout_rule(op) is BARRIER


def test_popart_lstm_refuses_mismatched_weights():
    graph = Ir().main_graph
    inputs = [graph.add_input("x", "float32", (5, 2, 3)),
              graph.add_input("w", "float32", (4, 6, 4))]  # input 3 + hidden 4 is 7
    op = graph.create_op(OpType(GRAPHCORE_DOMAIN, "LSTM", 1), inputs, 2)
    with pytest.raises(ShapeError):
        infer_op(op)
