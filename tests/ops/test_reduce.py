"""Reductions and normalisations: reductions' shapes and folded values equal numpy's, with
axes as an attribute before the opset that made them an input, keepdims and
noop_with_empty_axes; softmax, layer and batch normalisation follow their opsets' rules."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_cases import check_backend_cases, folded, reference_outputs
from op_building import build, shapes_of
from popart_unwind.transforms import run_pipeline

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.coverage import ops_without_rule
from popart_unwind.ops.reduce import REDUCTIONS
from popart_unwind.ops.shape_inference import infer_op
from popart_unwind.options import SessionOptions

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

SETTINGS = settings(max_examples=150, deadline=None)
NUMPY = {
    "ReduceSum": lambda x, a, k: np.sum(x, a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x * x, a, keepdims=k)),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, a, keepdims=k)),
    "ReduceLogSumExp": lambda x, a, k: np.log(np.sum(np.exp(x), a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(x * x, a, keepdims=k),
}


def reduce_op(name, x, axes, keepdims, version, noop=0, axes_constant=True):
    graph = Ir().main_graph
    data = graph.add_constant("x", x)
    attributes = {"keepdims": int(keepdims)}
    inputs = [data]
    since = REDUCTIONS[name][0]
    if version >= since:
        attributes["noop_with_empty_axes"] = noop
        if axes is not None:
            array = np.array(axes, np.int64)
            inputs.append(graph.add_constant("axes", array) if axes_constant
                          else graph.add_input("axes", "int64", array.shape))
    elif axes is not None:
        attributes["axes"] = list(axes)
    op = graph.create_op(OpType("ai.onnx", name, version), inputs, 1, attributes)
    infer_op(op)
    return op


@st.composite
def reduce_case(draw):
    name = draw(st.sampled_from(sorted(REDUCTIONS)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    axes = draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda
                                     a: a % len(shape), max_size=len(shape)))
    version = draw(st.sampled_from([11, 13, 18]))
    return name, shape, axes, draw(st.booleans()), version


@SETTINGS
@given(reduce_case())
def test_reduction_shape_and_fold_equal_numpy(case):
    name, shape, axes, keepdims, version = case
    x = np.random.default_rng(len(shape)).uniform(0.5, 2.0, shape).astype(np.float32)
    op = reduce_op(name, x, axes, keepdims, version)
    numpy_axes = None if not axes else tuple(axes)
    expected = np.asarray(NUMPY[name](x, numpy_axes, keepdims))
    assert op.output(0).shape == expected.shape
    [value] = REGISTRY.lookup(op).fold(op, [t.data for t in op.inputs])
    if value is op.input(0):  # an identity reduction folds to its input
        value = x
    np.testing.assert_allclose(value, expected, rtol=2e-5)


def test_empty_axes_with_noop_is_the_identity_from_the_input_opsets():
    op = reduce_op("ReduceSum", np.ones((2, 3), np.float32), [], True, 13, noop=1)
    assert op.output(0).shape == (2, 3)
    assert REGISTRY.lookup(op).fold(op, [None, None]) == [op.input(0)]
    op = reduce_op("ReduceMean", np.ones((2, 3), np.float32), None, False, 18, noop=0)
    assert op.output(0).shape == ()


def test_axes_that_are_not_constant_leave_the_shape_undecided():
    op = reduce_op("ReduceMax", np.ones((2, 3), np.float32), [1], True, 18, axes_constant=False)
    assert op.output(0).shape is None


def test_reduction_errors_name_the_op():
    with pytest.raises(ShapeError, match=r"ReduceSum#0.*out of range"):
        reduce_op("ReduceSum", np.ones((2, 3), np.float32), [2], True, 11)
    with pytest.raises(ShapeError, match="twice"):
        reduce_op("ReduceSum", np.ones((2, 3), np.float32), [1, -1], True, 11)


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data(), st.booleans(),
       st.booleans(), st.sampled_from(["ArgMax", "ArgMin"]))
def test_arg_reductions_equal_numpy(shape, data, keepdims, last, name):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(3).integers(0, 3, shape).astype(np.float32)
    graph = Ir().main_graph
    op = graph.create_op(OpType("ai.onnx", name, 13), [graph.add_constant("x", x)], 1,
                         {"axis": axis, "keepdims": int(keepdims),
                          "select_last_index": int(last)})
    infer_op(op)
    pick = np.argmax if name == "ArgMax" else np.argmin
    flipped = np.flip(x, axis)
    expected = (x.shape[axis] - 1 - pick(flipped, axis)) if last else pick(x, axis)
    if keepdims:
        expected = np.expand_dims(expected, axis)
    assert (op.output(0).dtype, op.output(0).shape) == ("int64", expected.shape)
    [value] = REGISTRY.lookup(op).fold(op, [x])
    assert np.array_equal(value, expected)


# -- softmax and normalisations ------------------------------------------------------------
@pytest.mark.parametrize(("version", "axis", "ok"), [(13, -1, True), (11, 3, False),
                                                      (11, 1, True), (13, -3, True)])
def test_softmax_checks_its_axis_per_opset(version, axis, ok):
    if ok:
        assert shapes_of("Softmax", [(2, 3, 4)], {"axis": axis}, version=version) == \
            [("float32", (2, 3, 4))]
    else:
        with pytest.raises(ShapeError, match="out of range"):
            shapes_of("Softmax", [(2, 3, 4)], {"axis": axis}, version=version)


@pytest.mark.parametrize("version", [11, 13])
@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax_folds_with_the_opsets_meaning(version, op_type):
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    op = build(op_type, [x], {"axis": 1}, version=version)
    infer_op(op)
    [value] = REGISTRY.lookup(op).fold(op, [x])
    flat = x.reshape(2, 12) if version < 13 else x
    axis = 1
    expected = np.exp(flat - flat.max(axis, keepdims=True))
    expected /= expected.sum(axis, keepdims=True)
    if op_type == "LogSoftmax":
        expected = np.log(expected)
    np.testing.assert_allclose(value, expected.reshape(x.shape), rtol=1e-5, atol=1e-6)


def test_layer_normalization_outputs_and_scale_check():
    result = shapes_of("LayerNormalization", [(2, 5, 8), (8,), (8,)], {"axis": -1}, outputs=3,
                       version=17)
    assert result == [("float32", (2, 5, 8)), ("float32", (2, 5, 1)), ("float32", (2, 5, 1))]
    result = shapes_of("LayerNormalization", [(2, 5, 8), (5, 8)], {"axis": 1}, outputs=3,
                       version=17)
    assert [s for _, s in result] == [(2, 5, 8), (2, 1, 1), (2, 1, 1)]
    with pytest.raises(ShapeError, match="Scale"):
        shapes_of("LayerNormalization", [(2, 5, 8), (5,)], version=17)


def test_batch_normalization_outputs_per_opset():
    specs = [(4, 3, 5, 5), (3,), (3,), (3,), (3,)]
    assert [s for _, s in shapes_of("BatchNormalization", specs, {"training_mode": 1},
                                    outputs=3, version=15)] == [(4, 3, 5, 5), (3,), (3,)]
    assert [s for _, s in shapes_of("BatchNormalization", specs, outputs=5, version=9)] == \
        [(4, 3, 5, 5), (3,), (3,), (3,), (3,)]
    with pytest.raises(ShapeError, match="scale must have shape"):
        shapes_of("BatchNormalization", [(4, 3, 5, 5), (4,), (3,), (3,), (3,)], version=15)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4), (2, 2, 3, 2)])
@pytest.mark.parametrize(("version", "attributes"), [
    (15, {"training_mode": 1}), (14, {"training_mode": 1, "momentum": 0.7, "epsilon": 1e-3}),
    (15, {}), (15, {"epsilon": 1e-3})])
def test_batch_normalization_fold_agrees_with_onnx(shape, version, attributes):
    """Inference and, from opset 14, training mode (the batch's statistics, the running
    ones moved towards them), as ONNX's reference evaluator computes them. (Its opset 9
    form normalises by the running statistics moved by ``momentum`` even with Y alone,
    where the operator's definition is the inference form; not compared.)"""
    rng = np.random.default_rng(8)
    channels = shape[1]
    inputs = [rng.standard_normal(shape), rng.standard_normal(channels),
              rng.standard_normal(channels), rng.standard_normal(channels),
              rng.uniform(0.5, 2.0, channels)]
    inputs = [a.astype(np.float32) for a in inputs]
    outputs = 3 if attributes.get("training_mode") else 1
    want = reference_outputs("BatchNormalization", inputs, attributes, version, outputs)
    shapes, got = folded("BatchNormalization", inputs, attributes, version, outputs)
    assert shapes == [w.shape for w in want]
    for value, expected in zip(got, want, strict=True):
        assert value.dtype == expected.dtype
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)


def test_batch_normalization_backend_node_tests_import_with_onnx_shapes_and_values():
    check_backend_cases("BatchNormalization")


# -- NegativeLogLikelihoodLoss: expanded into ops with layout rules, ONNX's reference as oracle
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [None, -100, 2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("spatial", [False, True])
def test_nll_loss_expands_to_what_onnx_computes(reduction, ignore_index, weighted, spatial):
    rng = np.random.default_rng(0)
    shape, classes = ((3, 5, 4) if spatial else (6, 5)), 5
    scores = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, classes, (shape[0], *shape[2:])).astype(np.int64)
    if ignore_index is not None:
        target.flat[::3] = ignore_index
    weight = rng.uniform(0.5, 2.0, classes).astype(np.float32)
    attributes = {"reduction": reduction}
    if ignore_index is not None:
        attributes["ignore_index"] = ignore_index
    inputs = ["scores", "target"] + (["weight"] if weighted else [])
    node = helper.make_node("NegativeLogLikelihoodLoss", inputs, ["loss"], **attributes)
    out_shape = list(target.shape) if reduction == "none" else []
    graph = helper.make_graph(
        [node], "nll",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, list(shape)),
         helper.make_tensor_value_info("target", TensorProto.INT64, list(target.shape))],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, out_shape)],
        initializer=[onnx.numpy_helper.from_array(weight, "weight")] if weighted else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"scores": scores, "target": target}
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    ir = Ir.from_onnx(model.SerializeToString())
    folded = REGISTRY.lookup(ir.main_graph.ops[0]).fold(
        ir.main_graph.ops[0], [scores, target] + ([weight] if weighted else []))
    np.testing.assert_allclose(folded[0], expected, rtol=1e-5)
    ir.options = SessionOptions(enable_unwind_layouts=False)
    run_pipeline(ir)
    names = {op.type.name for op in ir.main_graph.ops}
    assert "NegativeLogLikelihoodLoss" not in names and "GatherElements" in names
    assert ops_without_rule(ir) == {}
    np.testing.assert_allclose(fold_all(ir, feeds)[0], expected, rtol=1e-5)
