"""Reductions: shapes and folded values equal numpy's, with axes as an attribute before the
opset that made them an input, keepdims, and noop_with_empty_axes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.reduce import REDUCTIONS
from popart_unwind.ops.shape_inference import infer_op

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
