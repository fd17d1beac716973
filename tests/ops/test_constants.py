"""Constant-valued ops: Constant, ConstantOfShape, Shape, Size and Range fold to Const
tensors with numpy's values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from op_building import computing_ops

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType, TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import canonicalize

shapes = st.lists(st.integers(0, 4), max_size=4).map(tuple)


def make(graph, name, inputs, attributes=None, *, version=13):
    op = graph.create_op(OpType("ai.onnx", name, version), inputs, 1, attributes)
    for tensor, (dtype, shape) in zip(op.outputs, REGISTRY.lookup(op).infer(op), strict=True):
        tensor.dtype, tensor.shape = dtype, tuple(shape)
    return op


def fold(op):
    inputs = op.input_map()
    constants = [inputs[i].data if i in inputs and inputs[i].tensor_type is TensorType.CONST
                 else None for i in range(max(inputs, default=-1) + 1)]
    [value] = REGISTRY.lookup(op).fold(op, constants)
    assert value.shape == op.output(0).shape and str(value.dtype) == op.output(0).dtype
    return value


@pytest.mark.parametrize(("attribute", "value", "expected"), [
    ("value", np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, dtype=np.int32)
     .reshape(2, 3)),
    ("value_float", 1.5, np.array(1.5, np.float32)),
    ("value_floats", [1.0, 2.0], np.array([1.0, 2.0], np.float32)),
    ("value_int", 7, np.array(7, np.int64)),
    ("value_ints", [3, 4, 5], np.array([3, 4, 5], np.int64)),
])
def test_constant_folds_to_its_value(attribute, value, expected):
    op = make(Ir().main_graph, "Constant", [], {attribute: value})
    got = fold(op)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_constant_without_a_supported_value_is_a_shape_error():
    graph = Ir().main_graph
    with pytest.raises(ShapeError, match="'value_strings' is not supported"):
        make(graph, "Constant", [], {"value_strings": ["a"]})
    with pytest.raises(ShapeError, match="exactly one value attribute"):
        make(graph, "Constant", [], {})


def test_constant_ops_become_const_tensors_when_canonicalized():
    ir = Ir()
    graph = ir.main_graph
    op = make(graph, "Constant", [], {"value": np.ones((2, 2), np.float16)})
    graph.mark_output(op.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    [out] = graph.outputs
    assert not graph.ops and out.tensor_type is TensorType.CONST and out.dtype == "float16"
    assert out.id == "Constant0:0"  # a main-graph output keeps its id


def test_a_folded_constant_read_inside_the_graph_is_named_folded():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 2))
    op = make(graph, "Constant", [], {"value": np.ones((2, 2), np.float32)})
    add = make(graph, "Add", [x, op.output(0)])
    graph.mark_output(add.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert graph.ops == [add] and add.input(1).id.startswith("Folded___")


@given(shapes, st.sampled_from([None, np.array([3], np.int32), np.array([2.5], np.float64)]))
def test_constant_of_shape_matches_numpy_full(shape, value):
    graph = Ir().main_graph
    target = graph.add_constant("shape", np.array(shape, np.int64))
    op = make(graph, "ConstantOfShape", [target], {} if value is None else {"value": value})
    expected = np.zeros(shape, np.float32) if value is None else np.full(shape, value[0])
    got = fold(op)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


@given(shapes, st.integers(-6, 6), st.none() | st.integers(-6, 6))
def test_shape_folds_to_the_input_shape_window(shape, start, end):
    graph = Ir().main_graph
    x = graph.add_input("x", "float32", shape)
    assert np.array_equal(fold(make(graph, "Shape", [x])), np.array(shape, np.int64))
    attributes = {"start": start} if end is None else {"start": start, "end": end}
    window = fold(make(graph, "Shape", [x], attributes, version=15))
    assert np.array_equal(window, np.array(shape, np.int64)[start:end])


@given(shapes)
def test_size_folds_to_the_element_count(shape):
    graph = Ir().main_graph
    x = graph.add_input("x", "bool", shape)
    got = fold(make(graph, "Size", [x]))
    assert got.shape == () and got == np.zeros(shape).size


@given(st.integers(-20, 20), st.integers(-20, 20), st.integers(-5, 5).filter(bool),
       st.sampled_from([np.int32, np.int64]))
def test_integer_range_matches_numpy_arange(start, limit, delta, dtype):
    graph = Ir().main_graph
    inputs = [graph.add_constant(n, np.array(v, dtype))
              for n, v in (("start", start), ("limit", limit), ("delta", delta))]
    got = fold(make(graph, "Range", inputs, version=11))
    expected = np.arange(start, limit, delta, dtype=dtype)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


@given(st.floats(-10, 10, width=32), st.floats(-10, 10, width=32),
       st.floats(0.25, 3, width=32), st.booleans())
@example(0.3333333432674408, 9.0, 0.3333333432674408, False)  # 26 elements, not 27
def test_float_range_matches_numpy_arange(start, limit, delta, down):
    # the length is numpy's own count; the values are ONNX's start + i * delta (numpy
    # extrapolates from its first two values instead)
    delta = -delta if down else delta
    graph = Ir().main_graph
    inputs = [graph.add_constant(n, np.array(v, np.float32))
              for n, v in (("start", start), ("limit", limit), ("delta", delta))]
    got = fold(make(graph, "Range", inputs, version=11))
    expected = np.arange(np.float32(start), np.float32(limit), np.float32(delta))
    assert got.shape == expected.shape and got.dtype == np.float32
    exact = np.float64(np.float32(start)) + np.arange(len(got)) * np.float64(np.float32(delta))
    assert np.allclose(got, exact, rtol=1e-6, atol=1e-5)


def test_float_range_length_is_taken_in_double_precision():
    # (limit - start) / delta is 7e-46: 0 in float32, but numpy (and onnxruntime) count 1
    graph = Ir().main_graph
    inputs = [graph.add_constant(n, np.array(v, np.float32))
              for n, v in (("start", 0.0), ("limit", -1.401298464324817e-45), ("delta", -2.0))]
    assert fold(make(graph, "Range", inputs, version=11)).tolist() == [0.0]


def test_float_range_takes_the_difference_in_float32_as_numpy_does():
    # -1.19e-7 - 2 is -2 in float32 (in double 2.00000012, which would count 3 elements)
    graph = Ir().main_graph
    inputs = [graph.add_constant(n, np.array(v, np.float32))
              for n, v in (("start", 2.0), ("limit", -1.1920929e-07), ("delta", -1.0))]
    assert fold(make(graph, "Range", inputs, version=11)).tolist() == [2.0, 1.0]


def test_range_with_a_zero_delta_names_the_op():
    graph = Ir().main_graph
    inputs = [graph.add_constant(n, np.array(v, np.int64))
              for n, v in (("start", 0), ("limit", 3), ("delta", 0))]
    with pytest.raises(ShapeError, match="Range#0: delta is 0"):
        make(graph, "Range", inputs, version=11)


@pytest.mark.parametrize(("other", "ops_left"), [((3, 2), 1), ((2, 3), 0)])
def test_a_shape_feeding_a_reshape_folds_and_the_reshape_then_sees_a_constant(other, ops_left):
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    y = graph.add_input("y", "float32", other)
    shape = make(graph, "Shape", [y])
    # the Reshape's target is not a Const yet: its output type is seeded, as ONNX would
    reshape = graph.create_op(OpType("ai.onnx", "Reshape", 13), [x, shape.output(0)])
    reshape.output(0).shape = other
    graph.mark_output(reshape.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert len(computing_ops(graph)) == ops_left
    if ops_left:
        assert np.array_equal(reshape.input(1).data, other)
    ir.verify()
