"""Indexing ops: shapes and folded values equal ONNX's reference evaluator on random inputs;
shapes that depend on values are undecided unless those values are constants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as oh
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=60, deadline=None)
small_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def reference(op_type, arrays, attributes, outputs, version):
    """What ONNX's reference evaluator computes for one node over constant inputs."""
    names = [f"c{i}" if a is not None else "" for i, a in enumerate(arrays)]
    outs = [f"y{i}" for i in range(outputs)]
    node = oh.make_node(op_type, names, outs, **attributes)
    inits = [numpy_helper.from_array(a, n)
             for a, n in zip(arrays, names, strict=True) if a is not None]
    graph = oh.make_graph([node], "g", [], [oh.make_empty_tensor_value_info(o) for o in outs],
                          initializer=inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", version)])
    return ReferenceEvaluator(model).run(None, {})


def ours(op_type, arrays, attributes, outputs, version, constant=True):
    """(op, folded values) with every input a constant (or graph inputs when not)."""
    graph = Ir().main_graph
    inputs = []
    for index, array in enumerate(arrays):
        if array is None:
            inputs.append(None)
        elif constant or index == 0:
            inputs.append(graph.add_constant(f"c{index}", array) if constant else
                          graph.add_input(f"c{index}", str(array.dtype), array.shape))
        else:
            inputs.append(graph.add_input(f"c{index}", str(array.dtype), array.shape))
    op = graph.create_op(OpType("ai.onnx", op_type, version), inputs, outputs, attributes)
    infer_op(op)
    opdef = REGISTRY.lookup(op)
    values = opdef.fold(op, list(arrays)) if opdef.fold and constant else None
    return op, values


def check(op_type, arrays, attributes=None, outputs=1, version=18, fold=True):
    attributes = attributes or {}
    expected = reference(op_type, arrays, attributes, outputs, version)
    op, values = ours(op_type, arrays, attributes, outputs, version)
    for tensor, value in zip(op.outputs, expected, strict=True):
        assert tensor.shape == value.shape, (op_type, tensor.shape, value.shape)
        assert tensor.dtype == str(value.dtype)
    if fold:
        assert values is not None
        for got, value in zip(values, expected, strict=True):
            np.testing.assert_array_equal(got, value)


@st.composite
def data_and_axis(draw):
    shape = draw(small_shapes)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return data, axis


@SETTINGS
@given(data_and_axis(), small_shapes, st.integers(0, 2**16))
def test_gather_equals_reference(case, index_shape, seed):
    data, axis = case
    size = data.shape[axis]
    indices = np.random.default_rng(seed).integers(-size, size, index_shape).astype(np.int64)
    check("Gather", [data, indices], {"axis": axis})


@SETTINGS
@given(data_and_axis(), st.integers(0, 2**16))
def test_gather_elements_and_scatter_elements_equal_reference(case, seed):
    data, axis = case
    axis %= data.ndim  # the reference evaluator mishandles negative axes here
    rng = np.random.default_rng(seed)
    shape = list(data.shape)  # the reference wants equal sizes off the axis
    shape[axis] = int(rng.integers(1, data.shape[axis] + 1))
    shape = tuple(shape)
    size = data.shape[axis]
    indices = rng.integers(-size, size, shape).astype(np.int64)
    check("GatherElements", [data, indices], {"axis": axis})
    # distinct targets along the axis, so that "none" is well defined
    unique = np.argsort(rng.random(shape), axis=axis) % size
    updates = rng.standard_normal(shape).astype(np.float32)
    for reduction in ("none", "add"):
        check("ScatterElements", [data, unique.astype(np.int64), updates],
              {"axis": axis, "reduction": reduction})


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(1, 3),
       st.integers(0, 2**16))
def test_gather_nd_and_scatter_nd_equal_reference(shape, count, seed):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape).astype(np.float32)
    depth = int(rng.integers(1, len(shape) + 1))
    indices = np.stack([rng.integers(0, shape[d], count) for d in range(depth)], -1)
    check("GatherND", [data, indices.astype(np.int64)])
    flat = np.unique(np.ravel_multi_index(indices.T, shape[:depth]))
    unique = np.stack(np.unravel_index(flat, shape[:depth]), -1).astype(np.int64)
    updates = rng.standard_normal((len(unique), *shape[depth:])).astype(np.float32)
    check("ScatterND", [data, unique, updates])


@SETTINGS
@given(small_shapes, st.data())
def test_tile_pad_trilu_cumsum_equal_reference(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    repeats = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(shape),
                                          max_size=len(shape))), np.int64)
    check("Tile", [x, repeats])
    pads = np.array(data.draw(st.lists(st.integers(0, 2), min_size=2 * len(shape),
                                       max_size=2 * len(shape))), np.int64)
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect"]))
    if mode == "reflect" and any(p >= d for p, d in zip(pads, shape * 2, strict=True)):
        mode = "constant"
    check("Pad", [x, pads, np.array(1.5, np.float32)], {"mode": mode})
    axis = np.array(data.draw(st.integers(-len(shape), len(shape) - 1)), np.int64)
    attributes = {"exclusive": int(data.draw(st.booleans())),
                  "reverse": int(data.draw(st.booleans()))}
    check("CumSum", [x, axis], attributes)
    if len(shape) >= 2:
        k = np.array(data.draw(st.integers(-2, 2)), np.int64)
        check("Trilu", [x, k], {"upper": int(data.draw(st.booleans()))})


def test_pad_with_axes_and_negative_pads():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    check("Pad", [x, np.array([1, 2], np.int64), None, np.array([-1], np.int64)])
    op, _ = ours("Pad", [x, np.array([2, -1], np.int64), None, np.array([1], np.int64)], {},
                 1, 18)
    assert op.output(0).shape == (3, 5)  # negative pads crop
    op, _ = ours("Pad", [x, np.array([0, 0, 0, -4], np.int64)], {}, 1, 18)
    assert op.output(0).shape == (3, 0)
    with pytest.raises(ShapeError, match="below zero"):
        ours("Pad", [x, np.array([0, 0, 0, -5], np.int64)], {}, 1, 18)


def test_one_hot_top_k_and_non_zero_shapes():
    check("OneHot", [np.array([[0, 2], [1, 1]], np.int64), np.array(3, np.int64),
                     np.array([0.0, 1.0], np.float32)], {"axis": 1}, fold=False)
    x = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]], np.float32)
    check("TopK", [x, np.array([2], np.int64)], {"axis": 1}, outputs=2, fold=False)
    check("NonZero", [x])


def test_value_dependent_shapes_are_undecided_without_constants():
    x = np.ones((2, 3), np.float32)
    for op_type, arrays in (("NonZero", [x]), ("Tile", [x, np.array([2, 2], np.int64)]),
                            ("TopK", [x, np.array([2], np.int64)])):
        op, _ = ours(op_type, arrays, {}, 2 if op_type == "TopK" else 1, 18, constant=False)
        assert all(t.shape is None for t in op.outputs), op_type


@pytest.mark.parametrize(("arrays", "attributes"), [
    ([None, np.array([1.0, 1.0, 2.0, 1.5], np.float32)], {}),
    ([None, None, np.array([1, 3, 5, 6], np.int64)], {}),
    ([None, None, np.array([5, 3], np.int64)], {"axes": [2, 3],
                                                "keep_aspect_ratio_policy": "not_larger"}),
    ([None, np.array([2.0, 0.5], np.float32)], {"axes": [2, 3]}),
])
def test_resize_shape_equals_reference(arrays, attributes):
    x = np.ones((1, 3, 4, 4), np.float32)
    check("Resize", [x, *arrays], attributes, fold=False)


def test_gather_refuses_float_indices_and_scalar_data():
    with pytest.raises(ShapeError, match="int32 or int64"):
        ours("Gather", [np.ones(3, np.float32), np.ones(2, np.float32)], {}, 1, 13)
    with pytest.raises(ShapeError, match="scalar"):
        ours("Gather", [np.array(1.0, np.float32), np.zeros(2, np.int64)], {}, 1, 13)


def _scatter_loop(data, positions, updates, reduction):
    """The scatter by a plain loop: each update combined into its element in order."""
    result = data.copy()
    combine = {"none": lambda a, b: b, "add": lambda a, b: a + b, "mul": lambda a, b: a * b,
               "max": np.maximum, "min": np.minimum}[reduction]
    for position, value in zip(positions, updates, strict=True):
        result[position] = combine(result[position], value)
    return result


@SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(0, 8),
       st.sampled_from(["add", "mul", "max", "min"]), st.integers(0, 2**16))
def test_scatter_nd_reductions_accumulate_duplicates(shape, count, reduction, seed):
    """Every reduction combines each update, duplicates included, as a loop would (for
    "add", ``np.add.at``)."""
    rng = np.random.default_rng(seed)
    data = rng.integers(-3, 4, shape).astype(np.float32)
    depth = int(rng.integers(1, len(shape) + 1))
    indices = np.stack([rng.integers(-shape[d], shape[d], count) for d in range(depth)],
                       -1).astype(np.int64).reshape(count, depth)
    updates = rng.integers(-3, 4, (count, *shape[depth:])).astype(np.float32)
    _, [value] = ours("ScatterND", [data, indices, updates], {"reduction": reduction}, 1, 18)
    positions = [tuple(int(i) % shape[d] for d, i in enumerate(row)) for row in indices]
    np.testing.assert_array_equal(value, _scatter_loop(data, positions, updates, reduction))
    if reduction == "add":
        expected = data.copy()
        np.add.at(expected, tuple((indices % np.array(shape[:depth])).T), updates)
        np.testing.assert_array_equal(value, expected)


@SETTINGS
@given(data_and_axis(), st.sampled_from(["add", "mul", "max", "min"]), st.integers(0, 2**16))
def test_scatter_elements_reductions_accumulate_duplicates(case, reduction, seed):
    data, axis = case
    rng = np.random.default_rng(seed)
    shape = tuple(int(rng.integers(1, d + 1)) for d in data.shape)
    size = data.shape[axis]
    indices = rng.integers(-size, size, shape).astype(np.int64)
    updates = rng.integers(-3, 4, shape).astype(np.float32)
    _, [value] = ours("ScatterElements", [data, indices, updates],
                      {"axis": axis, "reduction": reduction}, 1, 18)
    positions = []
    for position in np.ndindex(*shape):
        target = list(position)
        target[axis % data.ndim] = int(indices[position]) % size
        positions.append(tuple(target))
    np.testing.assert_array_equal(value, _scatter_loop(data, positions,
                                                       updates.reshape(-1), reduction))


@pytest.mark.parametrize("name", ["ScatterND", "ScatterElements"])
def test_an_unknown_reduction_is_a_shape_error_naming_it(name):
    data, indices = np.zeros((3, 2), np.float32), np.zeros((1, 1), np.int64)
    updates = np.zeros((1, 2) if name == "ScatterND" else (1, 1), np.float32)
    with pytest.raises(ShapeError, match="reduction 'median'"):
        ours(name, [data, indices, updates], {"reduction": "median"}, 1, 18)
