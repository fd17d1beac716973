"""PopART's ai.graphcore ops that compute plain values (ops/graphcore_compute.py, and the
rows and variants the elementwise, view, slice and depth-to-space families hold): shapes and
folds against numpy and ONNX's reference evaluator, layout rules, and one model of each
planned end to end."""

from __future__ import annotations

import numpy as np
import pytest
from graphcore_models import graphcore_model, plan_end_to_end
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays
from onnx_cases import reference_outputs
from test_graphcore_ops import fold, graphcore_op

from popart_unwind.errors import ShapeError, UnsupportedModelError
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.elementwise import ADD, ELEMENTWISE
from popart_unwind.ops.graphcore_compute import COPY
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.ops.views import ReshapeRule

SETTINGS = settings(max_examples=25, deadline=None)
floats = st.floats(-3, 3, width=32)
RNG = np.random.default_rng(3)


# -- elementwise rows -------------------------------------------------------------------------
@SETTINGS
@given(arrays(np.float32, array_shapes(max_dims=3), elements=floats))
def test_square(x):
    np.testing.assert_allclose(fold("Square", [x])[1], x.astype(np.float64) ** 2, rtol=1e-6,
                               atol=1e-30)


@SETTINGS
@given(arrays(np.int32, array_shapes(max_dims=2), elements=st.integers(0, 50)),
       st.integers(0, 5), st.integers(1, 7))
def test_increment_mod(x, increment, modulus):
    """Counters stepped modulo ``modulus`` (Python's % on non-negative values)."""
    out, value = fold("IncrementMod", [x], {"increment": float(increment),
                                            "modulus": float(modulus)})
    assert out.dtype == "int32"
    np.testing.assert_array_equal(value, (x + increment) % modulus)


@pytest.mark.parametrize("name", ["Add", "Sub", "Mul", "Div", "Pow"])
@pytest.mark.parametrize("index", [0, 1])
def test_binary_const_scalar(name, index):
    x = RNG.uniform(0.5, 2, (3, 4)).astype(np.float32)
    value = np.float32(1.5)
    numpy_op = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                "Pow": np.power}[name]
    want = numpy_op(value, x) if index == 0 else numpy_op(x, value)
    got = fold("BinaryConstScalar", [x], {"value": 1.5, "op": name, "scalar_in_index": index})
    np.testing.assert_allclose(got[1], want, rtol=1e-6)


@pytest.mark.parametrize("attributes", [{"value": 1.0, "op": "Mod", "scalar_in_index": 0},
                                        {"op": "Add"}, {"value": 1.0, "op": "Add",
                                                        "scalar_in_index": 2}])
def test_binary_const_scalar_refuses_bad_attributes(attributes):
    with pytest.raises(ShapeError):
        graphcore_op("BinaryConstScalar", [np.zeros(2, np.float32)], attributes)


def test_add_lhs_inplace_is_an_add():
    x, y = RNG.standard_normal((2, 3)).astype(np.float32), np.float32([1, 2, 3])
    np.testing.assert_allclose(fold("AddLhsInplace", [x, y])[1], x + y)
    # PopART's AddLhsInplaceOpx is an elementwise binary Opx, not AddOpx's Deadend
    assert REGISTRY.layout_rule(graphcore_op("AddLhsInplace", [x, y])) is ELEMENTWISE
    assert REGISTRY.layout_rule(graphcore_op("AddLhsInplace", [x, y])) is not ADD


# -- views ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "target"), [((2, 3, 4), [4, -1]), ((2, 3, 4), [0, 12]),
                                                ((6,), [1, 2, 3])])
def test_reshape(shape, target):
    """The target as an attribute, 0 copying the input's axis and -1 taking the rest, as
    ONNX's Reshape does (its reference evaluator the oracle)."""
    x = RNG.standard_normal(shape).astype(np.float32)
    _out, value = fold("Reshape", [x], {"shape": target})
    [want] = reference_outputs("Reshape", [x, np.array(target, np.int64)], {}, 13)
    np.testing.assert_array_equal(value, want)
    assert REGISTRY.layout_rule(graphcore_op("Reshape", [x], {"shape": target})).kind == "view"


@pytest.mark.parametrize(("starts", "ends", "axes"), [([1], [3], [1]), ([0, -2], [1, 100],
                                                                         [0, 2])])
def test_slice(starts, ends, axes):
    x = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    _, value = fold("Slice", [x], {"starts": starts, "ends": ends, "axes": axes})
    [want] = reference_outputs("Slice", [x, *(np.array(v, np.int64) for v in (starts, ends,
                                                                               axes))], {}, 13)
    np.testing.assert_array_equal(value, want)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    x = RNG.standard_normal((2, 8, 3, 2)).astype(np.float32)
    _, value = fold("DepthToSpace", [x], {"blocksize": 2, "mode": mode})
    [want] = reference_outputs("DepthToSpace", [x], {"blocksize": 2, "mode": mode}, 13)
    np.testing.assert_array_equal(value, want)


# -- graphcore_compute ------------------------------------------------------------------------
def test_print_tensor_is_a_copy_kept_for_its_effect():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    op = graphcore_op("PrintTensor", [x], {"print_gradient": 1, "title": "x"})
    assert op.output(0).shape == (2, 3)
    assert REGISTRY.layout_rule(op) is COPY and REGISTRY.has_side_effects(op)
    assert not COPY.aliases_outputs(op)


def test_zeros_and_zeros_like():
    out, value = fold("Zeros", [], {"shape": [2, 3], "dtype": 10})  # FLOAT16
    assert out.dtype == "float16" and value.tolist() == [[0, 0, 0]] * 2
    x = RNG.standard_normal((4,)).astype(np.float32)
    out, value = fold("ZerosLike", [x])
    assert value.dtype == np.float32 and not value.any() and out.shape == (4,)
    with pytest.raises(ShapeError):
        graphcore_op("Zeros", [], {"shape": [2], "dtype": 17})  # FLOAT8E4M3FN


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5)])
def test_add_bias(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    bias = RNG.standard_normal(shape[1]).astype(np.float32)
    want = x + bias.reshape((1, -1) + (1,) * (len(shape) - 2))
    np.testing.assert_allclose(fold("AddBias", [x, bias])[1], want, rtol=1e-6)
    with pytest.raises(ShapeError):
        graphcore_op("AddBias", [x, bias[:-1]])


def test_shaped_dropout_shape():
    x = np.zeros((4, 3, 5), np.float32)
    op = graphcore_op("ShapedDropout", [x], {"shape": [4, 1, 5], "ratio": 0.25})
    assert op.output(0).shape == (4, 3, 5) and REGISTRY.draws_random(op)
    with pytest.raises(ShapeError):
        graphcore_op("ShapedDropout", [x], {"shape": [2, 1, 5]})


@SETTINGS
@given(arrays(np.float32, array_shapes(max_dims=2, max_side=5),
              elements=st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 3.5])), st.booleans())
def test_bucketize(x, right):
    """Against the definition: the number of boundaries below x (at or below, with right)."""
    boundaries = np.float32([0.0, 1.0, 2.0])
    out, value = fold("Bucketize", [x, boundaries], {"right": int(right)})
    below = (boundaries[None, :] <= x.reshape(-1, 1)) if right \
        else (boundaries[None, :] < x.reshape(-1, 1))
    assert out.dtype == "int32"
    np.testing.assert_array_equal(value.reshape(-1), below.sum(axis=1))


@SETTINGS
@given(arrays(np.float32, (3, 4, 5), elements=floats),
       st.sampled_from([None, [0], [1, 2], [-1], [0, 1, 2]]), st.booleans())
def test_reduce_median(x, axes, keepdims):
    attributes = {"keepdims": int(keepdims)} | ({} if axes is None else {"axes": axes})
    op = graphcore_op("ReduceMedian", [x], attributes, outputs=2)
    values, indices = REGISTRY.lookup(op).fold(op, [x])
    reduced = sorted({a % 3 for a in (axes if axes is not None else [0, 1, 2])})
    kept = [a for a in range(3) if a not in reduced]
    flat = np.transpose(x, kept + reduced).reshape([x.shape[a] for a in kept] + [-1])
    want = np.sort(flat, axis=-1)[..., (flat.shape[-1] - 1) // 2]
    shape = tuple(1 if a in reduced else n for a, n in enumerate(x.shape)
                  if keepdims or a not in reduced)
    assert op.output(0).shape == op.output(1).shape == shape and op.output(1).dtype == "int32"
    np.testing.assert_array_equal(values.reshape(-1), want.reshape(-1))
    picked = np.take_along_axis(flat, indices.reshape(*want.shape, 1).astype(np.int64), -1)
    np.testing.assert_array_equal(picked.reshape(-1), want.reshape(-1))


def test_abort_has_no_result_and_is_kept():
    op = graphcore_op("Abort", [np.array(True)], outputs=0)
    assert op.outputs == [] and REGISTRY.has_side_effects(op)
    with pytest.raises(ShapeError):
        graphcore_op("Abort", [np.zeros(3, bool)], outputs=0)


def test_layout_rules():
    x = [np.zeros((2, 3), np.float32)]
    assert REGISTRY.layout_rule(graphcore_op("Square", x)) is ELEMENTWISE
    assert isinstance(REGISTRY.layout_rule(graphcore_op("Reshape", x, {"shape": [3, 2]})),
                      ReshapeRule)
    for name, values, attributes in (("ShapedDropout", x, {"shape": [1, 3]}),
                                     ("Bucketize", [x[0], np.zeros(2, np.float32)], {})):
        assert REGISTRY.layout_rule(graphcore_op(name, values, attributes)) is BARRIER


# -- end to end -------------------------------------------------------------------------------
def _x(shape=(4, 8, 3, 3)):
    return {"x": RNG.standard_normal(shape).astype(np.float32)}


END_TO_END = {
    "Square": (_x(), {}, None),
    "IncrementMod": (_x(), {"increment": 1.0, "modulus": 4.0}, None),
    "BinaryConstScalar": (_x(), {"value": 2.0, "op": "Mul", "scalar_in_index": 1}, None),
    "Reshape": (_x(), {"shape": [4, 72]}, None),
    "Slice": (_x(), {"starts": [2], "ends": [6], "axes": [1]}, None),
    "DepthToSpace": (_x(), {"blocksize": 2, "mode": "CRD"}, None),
    "PrintTensor": (_x(), {"title": "x"}, None),
    "ZerosLike": (_x(), {}, None),
    "AddBias": (_x(), {}, {"b": np.ones(8, np.float32)}),
    "ShapedDropout": (_x(), {"shape": [4, 8, 1, 1], "ratio": 0.5}, None),
    "ReduceMedian": (_x(), {"axes": [1], "keepdims": 0}, None),
    "Bucketize": (_x(), {"right": 0}, {"boundaries": np.float32([-1, 0, 1])}),
    "Sort": (_x(), {"axis": 1}, None),
    "TensorRemap": (_x(), {"remap_type": 0}, None),
    "ScatterReduce": (_x(), {"axis": 1, "axis_size": 3, "reduction": "sum"},
                      {"index": RNG.integers(0, 3, (4, 8, 3, 3)).astype(np.int32)}),
    "BatchNormalization": (_x(), {"epsilon": 1e-5}, {n: np.ones(8, np.float32) for n in (
        "scale", "b", "mean", "var")}),
    "ConvFlipWeights": (_x(), {"group": 2, "groupReshape": 1}, None),
    "GroupedGather": (_x(), {"axis": 1, "group_size": 4},
                      {"indices": RNG.integers(0, 8, (4, 5)).astype(np.int32)}),
}


@pytest.mark.parametrize("name", sorted(END_TO_END))
def test_a_model_holding_it_plans_end_to_end(name):
    """Imported, transformed and planned, ours and PopART's baseline costed; an op with a
    layout rule (or rewritten into ops with rules) is not among the plan's barriers."""
    inputs, attributes, weights = END_TO_END[name]
    model = graphcore_model(name, inputs, attributes, weights,
                            outputs=2 if name in ("ReduceMedian", "Sort") else 1,
                            then="Neg" if name == "Bucketize" else "Relu")
    run = plan_end_to_end(model)
    if name == "ZerosLike":  # folded to a constant, and the Relu of it too: nothing to run
        assert run.ir.main_graph.ops == [] and run.costs["ours"].cycles == 0
        return
    assert run.costs["ours"].cycles > 0 and run.costs["popart"].cycles > 0
    opdef = REGISTRY.lookup(import_onnx(model).main_graph.ops[0])
    if opdef.layout is not BARRIER or opdef.patterns:
        assert not any(name in label for label in run.ops_without_rule), run.ops_without_rule
    else:
        assert any(name in label for label in run.ops_without_rule), run.ops_without_rule


def test_zeros_plans_end_to_end():
    """A Zeros (no input) folds to a constant the Add reads."""
    model = graphcore_model("Zeros", {}, {"shape": [4, 8], "dtype": 1}, then="Relu")
    run = plan_end_to_end(model)
    assert run.costs["ours"].cycles >= 0


def test_abort_imports():
    model = graphcore_model("Abort", {"c": np.array(False)}, {}, outputs=0, then=None)
    del model.graph.output[:]
    model.graph.output.append(model.graph.input[0])
    ir = import_onnx(model)
    assert [op.type.name for op in ir.main_graph.ops] == ["Abort"]


def test_a_refused_op_says_why():
    model = graphcore_model("RemoteLoad", _x((2, 2)), {}, then=None)
    with pytest.raises(UnsupportedModelError, match="remote buffer"):
        import_onnx(model)


# -- more computations ------------------------------------------------------------------------
@SETTINGS
@given(arrays(np.float32, (3, 5), elements=st.sampled_from([-2.0, -0.5, 0.0, 1.0, 3.0])),
       st.sampled_from([0, 1, -1]), st.booleans())
def test_sort(x, axis, descending):
    """Against a sort written out: values in order, ties in index order, the indices
    pointing at them."""
    op = graphcore_op("Sort", [x], {"axis": axis, "descending": int(descending),
                                    "stable": 1}, outputs=2)
    values, indices = REGISTRY.lookup(op).fold(op, [x])
    assert op.output(1).dtype == "int32" and op.output(0).shape == x.shape
    moved, got_v, got_i = (np.moveaxis(a, axis, -1) for a in (x, values, indices))
    for row, v, i in zip(moved.reshape(-1, moved.shape[-1]), got_v.reshape(-1, moved.shape[-1]),
                         got_i.reshape(-1, moved.shape[-1]), strict=True):
        want = sorted(range(len(row)), key=lambda k: (-row[k] if descending else row[k], k))
        assert i.tolist() == want and v.tolist() == [row[k] for k in want]


@pytest.mark.parametrize("zero_unused", [0, 1])
def test_sequence_slice(zero_unused):
    """Two runs of rows, the third ignored after an N of 0 (PopART's Builder documents
    entries after the first 0 as ignorable)."""
    source = np.arange(12, dtype=np.float32).reshape(6, 2)
    destination = np.full((5, 2), -1, np.float32)
    counts, from_, to = (np.array(v, np.uint32) for v in ([2, 1, 0], [0, 4, 1], [3, 0, 1]))
    out, value = fold("SequenceSlice", [source, destination, counts, from_, to],
                      {"zeroUnused": zero_unused})
    want = np.full((5, 2), 0 if zero_unused else -1, np.float32)
    want[3:5], want[0] = source[0:2], source[4]
    assert out.shape == (5, 2)
    np.testing.assert_array_equal(value, want)


def test_normalize_image_histogram_remap_and_copy_var_update():
    image = np.zeros((2, 8, 8, 3), np.uint8)
    three = np.ones(3, np.float16)
    op = graphcore_op("NormalizeImage", [image, three, three], {"scale": 1 / 255})
    assert (op.output(0).dtype, op.output(0).shape) == ("float16", (2, 8, 8, 4))
    with pytest.raises(ShapeError):
        graphcore_op("NormalizeImage", [np.zeros((8, 4), np.float32), three, three])
    op = graphcore_op("Histogram", [np.zeros((4, 4), np.float32)],
                      {"levels": [0.1, 1.0, 10.0], "absoluteOfInput": 1})
    assert (op.output(0).dtype, op.output(0).shape) == ("uint32", (4,))
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(fold("TensorRemap", [x], {"remap_type": 0})[1], x)
    y = RNG.standard_normal((2, 3)).astype(np.float32)
    op = graphcore_op("CopyVarUpdate", [x, y])
    assert REGISTRY.has_side_effects(op)
    np.testing.assert_array_equal(REGISTRY.lookup(op).fold(op, [x, y])[0], y)
    with pytest.raises(ShapeError):
        graphcore_op("CopyVarUpdate", [x, y[:1]])


def test_graphcore_batch_normalization_infers_as_onnx_batch_normalization():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    scale, bias, mean = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
    var = RNG.uniform(0.5, 2, 3).astype(np.float32)
    op = graphcore_op("BatchNormalization", [x, scale, bias, mean, var],
                      {"epsilon": 1e-5, "unbiased_variance": 1})
    [value] = REGISTRY.lookup(op).fold(op, [x, scale, bias, mean, var])
    # inference means the same at every opset; ONNX's reference evaluator at opset 9 does
    # not compute it so (it normalises by the batch's statistics), at 15 it does
    [want] = reference_outputs("BatchNormalization", [x, scale, bias, mean, var],
                               {"epsilon": 1e-5}, 15)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    assert REGISTRY.layout_rule(op) is REGISTRY.layout_rule(graphcore_op(
        "BatchNormalization", [x, scale, bias, mean, var])) is not BARRIER


@pytest.mark.parametrize(("shape", "index_shape", "axis"), [((5, 3), (5, 3), 0),
                                                            ((5, 3), (5, 1), 0),
                                                            ((2, 6), (2, 6), 1)])
def test_scatter_reduce_sum(shape, index_shape, axis):
    """Against the definition, element by element: out[..., index, ...] += src."""
    src = RNG.standard_normal(shape).astype(np.float32)
    index = RNG.integers(0, 4, index_shape).astype(np.int32)
    out, value = fold("ScatterReduce", [src, index], {"axis": axis, "axis_size": 4,
                                                      "reduction": "sum"})
    want_shape = list(shape)
    want_shape[axis] = 4
    want = np.zeros(want_shape, np.float64)
    full = np.broadcast_to(index, shape)
    for position in np.ndindex(*shape):
        target = list(position)
        target[axis] = full[position]
        want[tuple(target)] += src[position]
    assert out.shape == tuple(want_shape)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)


def test_scatter_reduce_shapes_and_refusals():
    src, index = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.int32)
    op = graphcore_op("ScatterReduce", [src, index, np.zeros((6, 3), np.float32)],
                      {"axis": 0, "reduction": "max"})
    assert op.output(0).shape == (6, 3)
    assert REGISTRY.lookup(op).fold(op, [src, index, np.zeros((6, 3), np.float32)]) is None
    for attributes in ({"axis": 0, "axis_size": 2, "reduction": "mean"},
                       {"axis": 0, "axis_size": 2, "group_size": 2}):
        with pytest.raises(ShapeError):
            graphcore_op("ScatterReduce", [src, index], attributes)
    with pytest.raises(ShapeError):
        graphcore_op("ScatterReduce", [src, np.zeros((2, 3), np.int32)],
                     {"axis": 0, "axis_size": 2})
