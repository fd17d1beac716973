"""The bitwise ops (ONNX's BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitShift and
PopART's ai.graphcore ones) and CumProd: shapes as ONNX's shape inference gives them, folds
equal to ONNX's reference evaluator, and ONNX's backend node tests, which import."""

from __future__ import annotations

import numpy as np
import onnx_cases
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays, broadcastable_shapes
from onnx_cases import check_backend_cases
from op_building import build

from popart_unwind.ir import Ir, OpType
from popart_unwind.ir.op import GRAPHCORE_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.elementwise import ELEMENTWISE
from popart_unwind.ops.layout_rule import BARRIER

SETTINGS = settings(max_examples=25, deadline=None)
INTEGERS = st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint16, np.uint64])


def agrees_with_onnx(name, inputs, attributes, version):
    """Integer results: exactly."""
    onnx_cases.agrees_with_onnx(name, inputs, attributes, version, rtol=0, atol=0)


@SETTINGS
@given(st.sampled_from(["BitwiseAnd", "BitwiseOr", "BitwiseXor"]), INTEGERS,
       broadcastable_shapes((2, 3, 4), min_dims=0, max_dims=3), st.data())
def test_bitwise_binary(name, dtype, shape, data):
    a = data.draw(arrays(dtype, (2, 3, 4)))
    b = data.draw(arrays(dtype, shape))
    agrees_with_onnx(name, [a, b] if data.draw(st.booleans()) else [b, a], {}, 18)


@SETTINGS
@given(INTEGERS, st.data())
def test_bitwise_not(dtype, data):
    agrees_with_onnx("BitwiseNot", [data.draw(arrays(dtype, array_shapes(max_dims=3)))], {},
                     18)


@SETTINGS
@given(st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int32,
                        np.int64]), st.sampled_from(["LEFT", "RIGHT"]), st.data())
def test_bit_shift(dtype, direction, data):
    """Every shift amount, those of the whole width or more (and negative ones) included."""
    width = 8 * np.dtype(dtype).itemsize
    x = data.draw(arrays(dtype, (3, 2)))
    low = -2 if np.dtype(dtype).kind == "i" else 0
    amount = data.draw(arrays(dtype, (2,), elements=st.integers(low, width + 2)))
    agrees_with_onnx("BitShift", [x, amount], {"direction": direction}, 26)


@pytest.mark.parametrize(("name", "want"), [
    ("BitwiseAnd", 0b1000), ("BitwiseOr", 0b1110), ("BitwiseXor", 0b0110),
    ("BitwiseXnor", ~0b0110)])
def test_graphcore_bitwise_ops(name, want):
    graph = Ir().main_graph
    a = graph.add_constant("a", np.array([0b1100], np.int32))
    b = graph.add_constant("b", np.array([0b1010], np.int32))
    op = graph.create_op(OpType(GRAPHCORE_DOMAIN, name, 1), [a, b], 1)
    opdef = REGISTRY.lookup(op)
    [(dtype, shape)] = opdef.infer(op)
    op.output(0).dtype, op.output(0).shape = dtype, shape
    [value] = opdef.fold(op, [a.data, b.data])
    assert value.tolist() == [want] and value.dtype == np.int32
    assert opdef.layout is ELEMENTWISE


@SETTINGS
@given(arrays(np.float64, array_shapes(min_dims=1, max_dims=3, max_side=4),
              elements=st.floats(-3, 3)), st.booleans(), st.booleans(), st.data())
def test_cumprod(x, exclusive, reverse, data):
    axis = np.array(data.draw(st.integers(-x.ndim, x.ndim - 1)), np.int64)
    agrees_with_onnx("CumProd", [x, axis], {"exclusive": int(exclusive),
                                           "reverse": int(reverse)}, 26)


@pytest.mark.parametrize("name", ["BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
                                  "BitwiseNot", "CumProd"])
def test_backend_node_tests_import_with_onnx_shapes_and_values(name):
    check_backend_cases(name)


def test_layouts():
    """The bitwise ops are elementwise rows of the table; CumProd, like CumSum, a barrier."""
    assert REGISTRY.layout_rule(build("BitwiseAnd", [(2, 3), (3,)])) is ELEMENTWISE
    assert REGISTRY.layout_rule(build("CumProd", [(2, 3), np.array(0)])) is BARRIER
