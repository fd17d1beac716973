"""EyeLike, Hardmax, InstanceNormalization, LpNormalization and LRN: shapes as ONNX's shape
inference gives them, folds equal to ONNX's reference evaluator (where it follows the
operator's definition) and to its backend node tests, which import."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays
from onnx import TensorProto
from onnx_cases import (
    agrees_with_onnx,
    check_backend_cases,
    folded,
)
from op_building import build

from popart_unwind.errors import ShapeError
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=25, deadline=None)
floats = st.floats(-10, 10, width=32)


@SETTINGS
@given(arrays(np.float32, array_shapes(min_dims=2, max_dims=2, max_side=5), elements=floats),
       st.integers(-3, 3), st.sampled_from([None, TensorProto.INT64, TensorProto.FLOAT]))
def test_eye_like(x, k, dtype):
    attributes = {"k": k} | ({} if dtype is None else {"dtype": dtype})
    agrees_with_onnx("EyeLike", [x], attributes, 9)


@SETTINGS
@given(arrays(np.float32, array_shapes(min_dims=1, max_dims=3, max_side=4),
              elements=st.integers(-3, 3).map(float)), st.data())
def test_hardmax_marks_the_first_maximum(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    agrees_with_onnx("Hardmax", [x], {"axis": axis}, 13)


def test_hardmax_before_opset_13_reads_the_input_as_2d():
    # ONNX's reference evaluator applies opset 13's rule at every opset: checked by hand.
    x = np.array([[[1, 5], [2, 0]], [[3, 3], [9, 9]]], np.float32)
    [_], [value] = folded("Hardmax", [x], {"axis": 1}, 11)
    assert value.tolist() == [[[0, 1], [0, 0]], [[0, 0], [1, 0]]]


@SETTINGS
@given(arrays(np.float32, array_shapes(min_dims=3, max_dims=4, max_side=4), elements=floats),
       st.data())
def test_instance_normalization(x, data):
    channel = arrays(np.float32, (x.shape[1],), elements=st.floats(-2, 2, width=32))
    scale, bias = data.draw(channel), data.draw(channel)
    agrees_with_onnx("InstanceNormalization", [x, scale, bias], {"epsilon": 0.01}, 6,
                     rtol=1e-4)


@SETTINGS
@given(arrays(np.float32, array_shapes(min_dims=1, max_dims=3, max_side=4), elements=floats),
       st.data())
def test_l2_normalization(x, data):
    # p = 2 only: ONNX's reference evaluator sums x**p without |x|, so for p = 1 the
    # backend tests (below) judge, which follow the operator's definition.
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    agrees_with_onnx("LpNormalization", [x], {"axis": axis, "p": 2}, 1, rtol=1e-5)


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 5), st.data())
def test_lrn(channels, side, size, data):
    # N equals C: ONNX's reference evaluator loops over axis 0 where it means axis 1.
    x = data.draw(arrays(np.float32, (channels, channels, side, side), elements=floats))
    attributes = {"size": size, "alpha": 0.001, "beta": 0.8, "bias": 2.0}
    agrees_with_onnx("LRN", [x], attributes, 13, rtol=1e-5)


@pytest.mark.parametrize(("name", "specs", "attributes"), [
    ("EyeLike", [(2, 3, 4)], {}),
    ("InstanceNormalization", [(2, 3, 4), (2,), (3,)], {}),
    ("InstanceNormalization", [(2, 3), (3,), (3,)], {}),
    ("LpNormalization", [(2, 3)], {"p": 3}),
    ("LpNormalization", [(2, 3)], {"axis": 2}),
    ("LRN", [(2, 3)], {"size": 3}),
    ("LRN", [(2, 3, 4, 4)], {}),
])
def test_bad_operands_are_refused(name, specs, attributes):
    op = build(name, specs, attributes)
    with pytest.raises(ShapeError):
        infer_op(op)


@pytest.mark.parametrize("name", ["EyeLike", "Hardmax", "InstanceNormalization",
                                  "LpNormalization", "LRN"])
def test_backend_node_tests_import_with_onnx_shapes_and_values(name):
    check_backend_cases(name)


def test_layouts():
    """Hardmax reads its input as Softmax does; the norms are barriers (not modelled)."""
    assert REGISTRY.layout_rule(build("Hardmax", [(2, 3)])) is \
        REGISTRY.layout_rule(build("Softmax", [(2, 3)]))
    for name in ("InstanceNormalization", "LpNormalization", "LRN"):
        op = build(name, [(1, 2, 3)])
        assert REGISTRY.layout_rule(op) is BARRIER and REGISTRY.reduces_input(op)
        assert REGISTRY.is_norm(op) == (name == "InstanceNormalization")  # PopART's isNorm
