"""PopART's own ops of its ai.graphcore opset 1 (elementwise ones, Subsample, Reverse,
IdentityLoss, GroupNormalization, the dynamic slices, Init): shapes, and folds against the
formulas PopART's operator tests check them with, written out here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType
from popart_unwind.ir.op import GRAPHCORE_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.elementwise import ELEMENTWISE, OPX_DEADEND
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=25, deadline=None)
floats = st.floats(-3, 3, width=32)


def graphcore_op(name, values, attributes=None, outputs=1):
    """One ai.graphcore op on constants, typed by its shape rule."""
    graph = Ir().main_graph
    inputs = [graph.add_constant(f"c{i}", np.asarray(v)) for i, v in enumerate(values)]
    op = graph.create_op(OpType(GRAPHCORE_DOMAIN, name, 1), inputs, outputs,
                         attributes or {})
    infer_op(op)
    return op


def fold(name, values, attributes=None):
    op = graphcore_op(name, values, attributes)
    result = REGISTRY.lookup(op).fold(op, [np.asarray(v) for v in values])
    if result is None:
        return op.output(0), None
    [value] = result
    assert value.shape == op.output(0).shape and str(value.dtype) == op.output(0).dtype
    return op.output(0), value


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    "Expm1": np.expm1, "Log1p": np.log1p,
    "NearbyInt": np.round,
    "Gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "GeluErf": lambda x: np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2)))
                                   for v in x.reshape(-1)]).reshape(x.shape),
    "Swish": lambda x: x * _sigmoid(x),
    "Detach": lambda x: x, "Nop": lambda x: x,
}


@SETTINGS
@given(st.sampled_from(sorted(UNARY)), arrays(np.float32, array_shapes(max_dims=3),
                                               elements=floats))
def test_unary(name, x):
    if name == "Log1p":
        x = np.abs(x)  # log1p of x < -1 is not a number
    _, value = fold(name, [x])
    np.testing.assert_allclose(value, UNARY[name](x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@SETTINGS
@given(arrays(np.float32, (3, 4), elements=floats),
       arrays(np.float32, (4,), elements=st.floats(0.5, 3, width=32)), st.booleans())
def test_binary(x, y, negate):
    y = -y if negate else y
    np.testing.assert_allclose(fold("Atan2", [x, y])[1], np.arctan2(x, y), rtol=1e-6)
    np.testing.assert_allclose(fold("Fmod", [x, y])[1], np.fmod(x, y), rtol=1e-6)
    remainder = fold("Remainder", [x, y])[1]
    # the oracle in float64: in float32 a subnormal x / y underflows to -0 and floors wrongly
    wide_x, wide_y = x.astype(np.float64), y.astype(np.float64)
    expected = (wide_x - np.floor(wide_x / wide_y) * wide_y).astype(np.float32)
    np.testing.assert_allclose(remainder, expected, rtol=1e-5, atol=1e-5)
    assert np.all((remainder == 0) | (np.sign(remainder) == np.sign(y)))


def test_scale_and_scaled_add():
    x, y = np.array([1.0, 2.0], np.float32), np.array([4.0, 8.0], np.float32)
    assert fold("Scale", [x], {"scale": 0.5})[1].tolist() == [0.5, 1.0]
    assert fold("ScaledAdd", [x, y], {"scale0": 2.0, "scale1": 0.25})[1].tolist() == [3, 6]
    a, b = np.array(3.0, np.float32), np.array(-1.0, np.float32)
    assert fold("ScaledAdd", [x, y, a, b])[1].tolist() == [-1, -2]


def test_round_is_typed_not_folded():
    out, value = fold("Round", [np.array([0.5, 1.5, -2.5], np.float32)])
    assert out.shape == (3,) and value is None


def test_integer_fmod_by_zero_stays_unfolded():
    assert fold("Fmod", [np.array([3], np.int32), np.array([0], np.int32)])[1] is None


def test_xnor():
    value = fold("BitwiseXnor", [np.array([0b1100], np.uint8), np.array([0b1010], np.uint8)])[1]
    assert value.tolist() == [0b11111001]


@SETTINGS
@given(arrays(np.float32, array_shapes(min_dims=1, max_dims=3, max_side=6), elements=floats),
       st.data())
def test_subsample_and_reverse(x, data):
    strides = data.draw(st.lists(st.integers(1, 3), min_size=x.ndim, max_size=x.ndim))
    out, value = fold("Subsample", [x], {"strides": strides})
    assert out.shape == tuple(-(-n // s) for n, s in zip(x.shape, strides, strict=True))
    np.testing.assert_array_equal(value, x[tuple(slice(None, None, s) for s in strides)])
    axes = data.draw(st.lists(st.integers(0, x.ndim - 1), unique=True))
    _, value = fold("Reverse", [x], {"dimensions": axes})
    expected = x
    for axis in axes:
        expected = np.flip(expected, axis)
    np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize(("reduction", "want"), [("Sum", 10.0), ("Mean", 2.5),
                                                 ("None", [[1, 2], [3, 4]])])
def test_identity_loss(reduction, want):
    out, value = fold("IdentityLoss", [np.array([[1, 2], [3, 4]], np.float32)],
                      {"reduction": reduction})
    assert value.tolist() == want
    assert out.shape == (() if reduction != "None" else (2, 2))


@SETTINGS
@given(st.integers(1, 3), st.sampled_from([(4, 1), (4, 2), (6, 3), (6, 6)]),
       st.integers(1, 3), st.integers(0, 99))
def test_group_normalization(n, channels_groups, side, seed):
    """Each sample's channel groups normalised (biased variance), then scaled and shifted
    per channel; the means and inverse standard deviations as outputs 1 and 2."""
    channels, groups = channels_groups
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (n, channels, side)).astype(np.float32)
    scale, bias = rng.uniform(-1, 1, (2, channels)).astype(np.float32)
    op = graphcore_op("GroupNormalization", [x, scale, bias],
                      {"num_groups": groups, "epsilon": 0.01}, outputs=3)
    y, mean, inv_std = REGISTRY.lookup(op).fold(op, [x, scale, bias])
    assert [t.shape for t in op.outputs] == [x.shape, (n * groups,), (n * groups,)]
    per = channels // groups
    for b in range(n):
        for g in range(groups):
            block = x[b, g * per:(g + 1) * per].astype(np.float64)
            want_mean, want_inv = block.mean(), 1 / math.sqrt(block.var() + 0.01)
            np.testing.assert_allclose(mean[b * groups + g], want_mean, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(inv_std[b * groups + g], want_inv, rtol=1e-5)
            for c in range(g * per, (g + 1) * per):
                np.testing.assert_allclose(
                    y[b, c], (x[b, c] - want_mean) * want_inv * scale[c] + bias[c],
                    rtol=1e-4, atol=1e-5)


def test_dynamic_slices_and_init():
    x = np.zeros((4, 6, 2), np.float32)
    offset = np.array([1, 2], np.uint32)
    attributes = {"axes": [0, 1], "sizes": [2, 3]}
    assert graphcore_op("DynamicSlice", [x, offset], attributes).output(0).shape == (2, 3, 2)
    slab = np.ones((2, 3, 2), np.float32)
    for name in ("DynamicUpdate", "DynamicAdd"):
        assert graphcore_op(name, [x, offset, slab], attributes).output(0).shape == x.shape
    assert graphcore_op("DynamicZero", [x, offset], attributes).output(0).shape == x.shape
    with pytest.raises(ShapeError):
        graphcore_op("DynamicUpdate", [x, offset, slab[:1]], attributes)
    with pytest.raises(ShapeError):
        graphcore_op("DynamicSlice", [x, offset], {"axes": [0], "sizes": [5]})
    init = graphcore_op("Init", [], {"shape": [3, 2], "data_type": 12, "tensor_type": 0,
                                     "init_type": 1})
    assert (init.output(0).dtype, init.output(0).shape) == ("float16", (3, 2))
    for code, dtype in ((2, "float8_e4m3fnuz"), (3, "float8_e5m2fnuz")):  # FLOAT8_143, _152
        assert graphcore_op("Init", [], {"shape": [3], "data_type": code}).output(0).dtype == dtype
    with pytest.raises(ShapeError):  # PopART's COMPLEX64
        graphcore_op("Init", [], {"shape": [3], "data_type": 15})


@pytest.mark.parametrize(("name", "attributes"), [
    ("GroupNormalization", {"num_groups": 2}),  # 3 channels
    ("Subsample", {"strides": [1]}), ("Subsample", {"strides": [0, 1]}),
    ("Reverse", {"dimensions": [0, 0]}), ("Reverse", {"dimensions": [2]}),
    ("IdentityLoss", {"reduction": "Max"})])
def test_bad_attributes_are_refused(name, attributes):
    with pytest.raises(ShapeError):
        graphcore_op(name, [np.zeros((2, 3), np.float32)], attributes)


def test_layouts():
    """Elementwise rows; PopART's creator search stops at ScaledAdd and Nop (their Opxs keep
    Opx's Deadend), the other barriers are not modelled."""
    assert REGISTRY.layout_rule(graphcore_op("Swish", [np.zeros(2, np.float32)])) \
        is ELEMENTWISE
    two = [np.zeros(2, np.float32)] * 2
    for op in (graphcore_op("ScaledAdd", two), graphcore_op("Nop", two[:1])):
        assert REGISTRY.layout_rule(op) is OPX_DEADEND and not OPX_DEADEND.popart_unwinds
    for name, attributes in (("Subsample", {"strides": [1]}), ("Reverse", {}),
                             ("IdentityLoss", {"reduction": "Sum"})):
        op = graphcore_op(name, [np.zeros(2, np.float32)], attributes)
        assert REGISTRY.layout_rule(op) is BARRIER
