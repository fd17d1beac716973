"""PopART's float8 casts (ops/graphcore_float8.py): shape rules, folds against an oracle that
decodes the float8 bit patterns from their definition (not ml_dtypes, which the folds use),
the elementwise layout rule, and a model of both planned end to end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from graphcore_models import plan_end_to_end
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as oh
from onnx import numpy_helper
from test_graphcore_ops import fold, graphcore_op

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import numpy_dtype
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.elementwise import ElementwiseRule

#: PopART's float8 formats as PopXL documents them: exponent and mantissa bits, bias.
FORMATS = {"FLOAT8_143": ("float8_e4m3fnuz", 4, 3, 8), "FLOAT8_152": ("float8_e5m2fnuz", 5, 2, 16)}


def decoded(exponent_bits: int, mantissa_bits: int, bias: int) -> np.ndarray:
    """The value of each of the 256 codes: sign, biased exponent (0 for subnormals),
    mantissa; 0x80 (what would be negative zero) is the one NaN."""
    values = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = code & ((1 << mantissa_bits) - 1)
        if exponent == 0:
            magnitude = mantissa / 2 ** mantissa_bits * 2.0 ** (1 - bias)
        else:
            magnitude = (1 + mantissa / 2 ** mantissa_bits) * 2.0 ** (exponent - bias)
        values[code] = sign * magnitude
    values[0x80] = np.nan
    return values


def nearest_code(value: float, table: np.ndarray) -> int:
    """Round to nearest, ties to the even code; beyond the largest value by half a step or
    more (where rounding would leave the range): NaN (0x80)."""
    if np.isnan(value):
        return 0x80
    finite = np.where(np.isnan(table), np.inf, table)
    top = np.nanmax(table)
    step = top - np.nanmax(table[table < top])  # the spacing at the top of the range
    if abs(value) >= top + step / 2:
        return 0x80
    distance = np.abs(finite - value)
    best = np.flatnonzero(distance == distance.min())
    return int(best[0] if len(best) == 1 else best[best % 2 == 0][0])


@pytest.mark.parametrize("to", sorted(FORMATS))
def test_the_formats_are_popxls(to):
    """Largest and smallest positive values as PopXL's documentation lists them."""
    table = decoded(*FORMATS[to][1:])
    largest, smallest = {"FLOAT8_143": (240.0, 2.0 ** -10),
                         "FLOAT8_152": (57344.0, 2.0 ** -17)}[to]
    assert np.nanmax(table) == largest
    assert np.nanmin(table[table > 0]) == smallest


@pytest.mark.parametrize("to", sorted(FORMATS))
@pytest.mark.parametrize("scale", [-32, -5, 0, 3, 31])
def test_cast_then_pow2_scale_every_code(to, scale):
    """Every float8 code decoded, times 2**scale, rounded to float16."""
    name, *layout = FORMATS[to]
    codes = np.arange(256, dtype=np.uint8)
    x = codes.view(numpy_dtype(name))
    out, value = fold("CastThenPow2Scale", [x, np.int8(scale)])
    assert (out.dtype, out.shape) == ("float16", (256,))
    with np.errstate(over="ignore"):
        want = (decoded(*layout) * 2.0 ** scale).astype(np.float16)
    np.testing.assert_array_equal(value, want)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(FORMATS)), st.integers(-32, 31),
       st.lists(st.floats(-65504, 65504, width=16), min_size=1, max_size=12),
       st.sampled_from([np.float16, np.float32]))
def test_pow2_scale_then_cast_rounds_to_the_nearest_code(to, scale, xs, kind):
    name, *layout = FORMATS[to]
    x = np.array(xs, kind)
    out, value = fold("Pow2ScaleThenCast", [x, np.int32(scale)], {"to": to})
    assert (out.dtype, out.shape) == (name, x.shape)
    table = decoded(*layout)
    want = [nearest_code(float(v) * 2.0 ** scale, table) for v in x.astype(np.float64)]
    assert value.view(np.uint8).tolist() == want


def test_a_scale_outside_popart_range_is_not_folded():
    x = np.ones(3, np.float16)
    assert fold("Pow2ScaleThenCast", [x, np.int8(32)], {"to": "FLOAT8_143"})[1] is None
    assert fold("Pow2ScaleThenCast", [x, np.int8(-33)], {"to": "FLOAT8_152"})[1] is None


@pytest.mark.parametrize(("name", "values", "attributes"), [
    ("Pow2ScaleThenCast", [np.ones(2, np.float16), np.int8(0)], {"to": "FLOAT16"}),
    ("Pow2ScaleThenCast", [np.ones(2, np.float16), np.int8(0)], {}),
    ("Pow2ScaleThenCast", [np.ones(2, np.float64), np.int8(0)], {"to": "FLOAT8_143"}),
    ("Pow2ScaleThenCast", [np.ones(2, np.float16), np.float16(0)], {"to": "FLOAT8_143"}),
    ("Pow2ScaleThenCast", [np.ones(2, np.float16), np.zeros(2, np.int8)], {"to": "FLOAT8_143"}),
    ("CastThenPow2Scale", [np.ones(2, np.float16), np.int8(0)], {}),
])
def test_wrong_operands_are_refused(name, values, attributes):
    with pytest.raises(ShapeError, match=name):
        graphcore_op(name, values, attributes)


def test_layout_rule_is_elementwise_in_the_data():
    x = np.ones((2, 3), np.float16)
    op = graphcore_op("Pow2ScaleThenCast", [x, np.int8(1)], {"to": "FLOAT8_152"})
    rule = REGISTRY.layout_rule(op)
    assert isinstance(rule, ElementwiseRule) and rule.data_inputs == (0,)
    assert not rule.popart_unwinds  # PopART's Opxs keep the dead-end default
    back = graphcore_op("CastThenPow2Scale", [np.zeros((2, 3), np.uint8).view(
        numpy_dtype("float8_e5m2fnuz")), np.int8(1)])
    assert REGISTRY.layout_rule(back) is rule


def test_both_casts_plan_end_to_end():
    """float16 data cast to float8 and back, a Relu after: planned, ours and PopART's
    baseline costed, neither cast among the ops without a rule."""
    scale = numpy_helper.from_array(np.array(3, np.int8), "s")
    nodes = [oh.make_node("Pow2ScaleThenCast", ["x", "s"], ["q"], domain="ai.graphcore",
                          to="FLOAT8_143"),
             oh.make_node("CastThenPow2Scale", ["q", "s"], ["r"], domain="ai.graphcore"),
             oh.make_node("Relu", ["r"], ["z"])]
    graph = oh.make_graph(nodes, "g",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [64, 32])],
                          [onnx.ValueInfoProto(name="z")], initializer=[scale])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11),
                                                oh.make_opsetid("ai.graphcore", 1)])
    run = plan_end_to_end(model)
    assert run.costs["ours"].cycles > 0 and run.costs["popart"].cycles > 0
    types = {tensor.id: tensor.dtype for tensor in run.ir.main_graph.tensors}
    assert types["q"] == "float8_e4m3fnuz" and types["r"] == "float16"
    assert not any("Pow2Scale" in label for label in run.ops_without_rule), \
        run.ops_without_rule
