"""Elementwise ops: broadcasting shapes and folds agree with numpy; identities fold only when
they keep x's dtype and shape."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, mutually_broadcastable_shapes
from op_building import computing_ops, folded_to, passed_on_ids

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType, TensorType
from popart_unwind.ir.dtypes import ONNX_DTYPES
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import canonicalize

ARITHMETIC = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum,
              "Min": np.minimum}
COMPARISONS = {"Equal": np.equal, "Less": np.less, "Greater": np.greater,
               "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal}
LOGICAL = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
UNARY = {"Relu": lambda x: np.maximum(x, 0), "Tanh": np.tanh, "Exp": np.exp,
         "Neg": np.negative, "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil,
         "Sin": np.sin, "Cos": np.cos, "Sign": np.sign, "Round": np.round,
         "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Softplus": lambda x: np.logaddexp(0, x),
         "IsNaN": np.isnan}
floats = st.floats(-100, 100, width=32)


def make(graph, name, inputs, attributes=None, *, version=13, domain="ai.onnx"):
    op = graph.create_op(OpType(domain, name, version), inputs, 1, attributes)
    for tensor, (dtype, shape) in zip(op.outputs, REGISTRY.lookup(op).infer(op), strict=True):
        tensor.dtype, tensor.shape = dtype, tuple(shape)
    return op


def fold(op):
    inputs = op.input_map()
    constants = [inputs[i].data if i in inputs and inputs[i].tensor_type is TensorType.CONST
                 else None for i in range(max(inputs) + 1)]
    return REGISTRY.lookup(op).fold(op, constants)


def folded(name, *values, **attributes):
    """Shape and folded value of ``name`` on constant ``values`` (checked consistent)."""
    graph = Ir().main_graph
    inputs = [graph.add_constant(f"c{i}", np.asarray(v)) for i, v in enumerate(values)]
    op = make(graph, name, inputs, attributes)
    [value] = fold(op)
    assert value.shape == op.output(0).shape and str(value.dtype) == op.output(0).dtype
    return value


def pair_of_arrays(dtype, elements):
    return mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3).flatmap(
        lambda shapes: st.tuples(*(arrays(dtype, s, elements=elements)
                                   for s in shapes.input_shapes)))


@given(pair_of_arrays(np.float32, floats), st.sampled_from(sorted(ARITHMETIC)))
def test_arithmetic_matches_numpy(pair, name):
    a, b = pair
    expected = ARITHMETIC[name](a, b)
    assert np.array_equal(folded(name, a, b), expected)


@given(pair_of_arrays(np.int32, st.integers(-50, 50)), st.sampled_from(sorted(COMPARISONS)))
def test_comparisons_give_bool_as_numpy(pair, name):
    a, b = pair
    value = folded(name, a, b)
    assert value.dtype == np.bool_ and np.array_equal(value, COMPARISONS[name](a, b))


@given(pair_of_arrays(np.bool_, st.booleans()), st.sampled_from(sorted(LOGICAL)))
def test_logical_ops_match_numpy(pair, name):
    assert np.array_equal(folded(name, *pair), LOGICAL[name](*pair))


@given(pair_of_arrays(np.int64, st.integers(-20, 20)))
def test_integer_division_truncates_toward_zero(pair):
    a, b = pair
    if np.any(b == 0):
        graph = Ir().main_graph
        op = make(graph, "Div", [graph.add_constant("a", a), graph.add_constant("b", b)])
        assert fold(op) is None  # undefined: left for the runtime
        return
    expected = np.trunc(a.astype(np.float64) / b).astype(np.int64)
    assert np.array_equal(folded("Div", a, b), expected)


@given(pair_of_arrays(np.int32, st.integers(-20, 20).filter(bool)), st.sampled_from([0, 1]))
def test_integer_mod_follows_the_fmod_attribute(pair, fmod):
    a, b = pair
    expected = np.fmod(a, b) if fmod else np.mod(a, b)
    assert np.array_equal(folded("Mod", a, b, fmod=fmod), expected)


@given(pair_of_arrays(np.float32, st.floats(0.5, 4, width=32)))
def test_float_division_and_power_match_numpy(pair):
    a, b = pair
    assert np.array_equal(folded("Div", a, b), a / b)
    assert np.allclose(folded("Pow", a, b), np.power(a, b), rtol=1e-6)


def test_integer_power_with_a_negative_exponent_is_not_folded():
    graph = Ir().main_graph
    op = make(graph, "Pow", [graph.add_constant("a", np.array([2, 3])),
                             graph.add_constant("b", np.array([-1, 2]))])
    assert fold(op) is None


@given(arrays(np.float32, st.lists(st.integers(0, 3), max_size=3).map(tuple), elements=floats),
       st.sampled_from(sorted(UNARY)))
def test_unary_ops_keep_the_shape_and_match_numpy(x, name):
    value = folded(name, x)
    with np.errstate(all="ignore"):
        expected = np.asarray(UNARY[name](x))
    expected = expected.astype(value.dtype)
    assert np.allclose(value, expected, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_gelu_in_both_domains_and_erf():
    x = np.array([-2.0, -0.5, 0.0, 1.0, 3.0], np.float32)
    exact = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()]
    graph = Ir().main_graph
    c = graph.add_constant("x", x)
    for domain, version in (("ai.onnx", 20), ("com.microsoft", 1)):
        [value] = fold(make(graph, "Gelu", [c], version=version, domain=domain))
        assert value.dtype == np.float32 and np.allclose(value, exact, atol=1e-6)
    [tanh] = fold(make(graph, "Gelu", [c], {"approximate": "tanh"}, version=20))
    assert np.allclose(tanh, [-0.0454, -0.1543, 0.0, 0.8412, 2.9964], atol=1e-3)
    [erf] = fold(make(graph, "Erf", [c]))
    assert np.allclose(erf, [math.erf(v) for v in x.tolist()], atol=1e-6)


@given(arrays(np.float32, st.integers(0, 4), elements=floats),
       st.sampled_from(["float32", "int32", "int64", "bool", "float16", "uint8"]))
def test_cast_uses_the_onnx_dtype_numbers(x, dtype):
    value = folded("Cast", x, to=ONNX_DTYPES[dtype])
    with np.errstate(all="ignore"):
        assert np.array_equal(value, x.astype(dtype))


def test_cast_to_an_unknown_dtype_is_a_shape_error():
    graph = Ir().main_graph
    with pytest.raises(ShapeError, match="'to' is 8"):
        make(graph, "Cast", [graph.add_input("x", "float32", (2,))], {"to": 8})


@given(mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
def test_where_broadcasts_three_ways(case):
    rng = np.random.default_rng(0)
    cond_shape, x_shape, y_shape = case.input_shapes
    cond = rng.integers(0, 2, size=cond_shape).astype(bool)
    x, y = rng.normal(size=x_shape).astype(np.float32), np.zeros(y_shape, np.float32)
    assert np.array_equal(folded("Where", cond, x, y), np.where(cond, x, y))


def test_variadic_ops_broadcast_all_inputs():
    a, b, c = np.ones((2, 1), np.float32), np.arange(3, dtype=np.float32), np.float32(5)
    assert np.array_equal(folded("Sum", a, b, c), a + b + c)
    assert np.allclose(folded("Mean", a, b, c), (a + b + c) / 3)
    assert np.array_equal(folded("Max", a, b, c), np.maximum(np.maximum(a, b), c))


def test_shapes_that_do_not_broadcast_name_the_op():
    graph = Ir().main_graph
    a, b = graph.add_input("a", "float32", (3,)), graph.add_input("b", "float32", (4,))
    with pytest.raises(ShapeError, match=r"Add#0: inputs of shapes \[\(3,\), \(4,\)\]"):
        make(graph, "Add", [a, b])


# -- identities -------------------------------------------------------------------------------
def canonical(name, x_shape, const_value, const_shape=(), const_left=False, dtype="float32"):
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", dtype, x_shape)
    c = graph.add_constant("c", np.full(const_shape, const_value, dtype))
    op = make(graph, name, [c, x] if const_left else [x, c])
    graph.mark_output(op.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    return graph


@pytest.mark.parametrize(("name", "unit", "left"), [
    ("Add", 0, False), ("Add", 0, True), ("Mul", 1, False), ("Mul", 1, True),
    ("Sub", 0, False), ("Div", 1, False), ("Pow", 1, False)])
@pytest.mark.parametrize("const_shape", [(), (3,), (1, 3)])
def test_identities_fold_to_x(name, unit, left, const_shape):
    graph = canonical(name, (2, 3), unit, const_shape, const_left=left)
    assert folded_to(graph, ["x"])


@pytest.mark.parametrize("name", ["Add", "Mul"])
def test_a_widening_unit_constant_does_not_fold(name):
    graph = canonical(name, (3,), 0 if name == "Add" else 1, const_shape=(2, 3))
    [op] = graph.ops
    assert op.output(0).shape == (2, 3) and graph.output_ids == [op.output(0).id]


@pytest.mark.parametrize(("name", "unit"), [("Sub", 0), ("Div", 1)])
def test_left_units_of_non_commutative_ops_stay(name, unit):
    graph = canonical(name, (3,), unit, const_left=True)
    [op] = graph.ops
    assert op.input(0).id == "c"


def test_integer_identities_fold_too():
    graph = canonical("Add", (4,), 0, dtype="int32")
    assert folded_to(graph, ["x"])


def test_double_negation_and_double_not_vanish():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2,))
    b = graph.add_input("b", "bool", (2,))
    neg = make(graph, "Neg", [make(graph, "Neg", [x]).output(0)])
    nots = make(graph, "Not", [make(graph, "Not", [b]).output(0)])
    graph.mark_output(neg.output(0))
    graph.mark_output(nots.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert folded_to(graph, ["x", "b"])


def test_where_on_a_constant_condition_picks_a_branch_of_the_full_shape():
    ir = Ir()
    graph = ir.main_graph
    x, y = graph.add_input("x", "float32", (2, 3)), graph.add_input("y", "float32", (3,))
    always = graph.add_constant("always", np.ones((2, 3), bool))
    never = graph.add_constant("never", np.zeros((), bool))
    graph.mark_output(make(graph, "Where", [always, x, y]).output(0))
    kept = make(graph, "Where", [never, x, y])  # y is narrower than the result
    graph.mark_output(kept.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert passed_on_ids(graph)[0] == "x" and computing_ops(graph) == [kept]


def test_cast_to_the_same_dtype_is_dropped():
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "int64", (2,))
    graph.mark_output(make(graph, "Cast", ["x"], {"to": 7}).output(0))
    canonicalize(ir, REGISTRY)
    assert folded_to(graph, ["x"])


def test_commutative_flags():
    commutative = {name for name in ("Add", "Mul", "Max", "Min", "And", "Or", "Xor", "Equal",
                                     "Sub", "Div", "Pow", "Less", "Mod")
                   if REGISTRY.lookup(OpType("ai.onnx", name)).commutative}
    assert commutative == {"Add", "Mul", "Max", "Min", "And", "Or", "Xor", "Equal"}
