"""PopART's float8 types in the IR and in ONNX models: the dtype tables agree with ONNX's and
``ml_dtypes``' definitions; ONNX's own Cast node tests to and from the two float8 types PopART
has import with ONNX's shapes and types, fold to the values ONNX's reference run gives, and
plan; float8 weights import as weights."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_conformance_cases as judge
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator
from onnx_node_cases import import_every_way, node_cases, output_types

from popart_unwind.ir import Ir, OpType
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX, FLOAT8_DTYPES, ONNX_DTYPES, numpy_dtype
from popart_unwind.ir.tensor import TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.target import DTYPE_SIZES

FNUZ = {TensorProto.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
        TensorProto.FLOAT8E5M2FNUZ: "float8_e5m2fnuz"}


def test_dtype_tables_agree_with_onnx_and_numpy():
    """Each IR dtype: ONNX's number for it, and a size equal to its numpy type's (bfloat16,
    held widened in numpy, is 2 bytes); the float8 types one byte each."""
    assert set(DTYPE_SIZES) == set(ONNX_DTYPES)
    for name, number in ONNX_DTYPES.items():
        assert DTYPE_OF_ONNX[number] == name
        if name != "bfloat16":
            assert str(oh.tensor_dtype_to_np_dtype(number)) == name
            assert DTYPE_SIZES[name] == numpy_dtype(name).itemsize
    for number, name in FNUZ.items():
        assert ONNX_DTYPES[name] == number and DTYPE_SIZES[name] == 1
        assert numpy_dtype(name) == np.dtype(getattr(ml_dtypes, name))
    assert set(FNUZ.values()) == FLOAT8_DTYPES


#: Cast's node tests to or from the FNUZ types (other modules' cases may have been collected
#: already: CastLike's, expanded ones).
CAST_CASES = {name: case for name, case in node_cases("cast").items()
              if name.startswith("test_cast_") and "FNUZ" in name
              and not name.endswith("_expanded")}


def test_onnx_has_the_fnuz_cast_cases():
    """Casts to and from both types, saturating and not (a rename would test nothing)."""
    assert len(CAST_CASES) == 12


@pytest.mark.parametrize("name", sorted(CAST_CASES))
def test_cast_node_case_imports_with_onnx_types(name):
    """As generated and with our shape rules alone: ONNX's reference output's type and
    shape."""
    case = CAST_CASES[name]
    [reference] = case.data_sets[0][1]
    shape, dtype = judge.reference_signature(reference)
    assert dtype in ONNX_DTYPES
    for ir in import_every_way(case.model):
        assert output_types(ir) == [(dtype, shape)], name


@pytest.mark.parametrize("name", sorted(CAST_CASES))
def test_cast_node_case_folds_to_onnx_values(name):
    """The case's input as a constant: our fold equals ONNX's expected output, bit for bit
    (NaN codes included)."""
    case = CAST_CASES[name]
    [node] = case.model.graph.node
    [x], [reference] = case.data_sets[0]
    x = x if isinstance(x, np.ndarray) else numpy_helper.to_array(x)
    want = numpy_helper.to_array(reference) if isinstance(reference, onnx.TensorProto) \
        else reference
    graph = Ir().main_graph
    attributes = {a.name: oh.get_attribute_value(a) for a in node.attribute}
    op = graph.create_op(OpType("ai.onnx", "Cast", 21), [graph.add_constant("x", x)], 1,
                         attributes)
    [(dtype, _)] = REGISTRY.lookup(op).infer(op)
    op.output(0).dtype = dtype
    [value] = REGISTRY.lookup(op).fold(op, [x])
    assert value.dtype == want.dtype, name
    if want.dtype.itemsize == 1:
        np.testing.assert_array_equal(value.view(np.uint8), want.view(np.uint8), name)
    else:
        np.testing.assert_array_equal(value, want, name)


@pytest.mark.parametrize("to", sorted(FNUZ))
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_fold_saturates_as_onnx_reference(to, saturate):
    """Out of range, infinite and NaN values, against ONNX's reference evaluator."""
    x = np.array([1e6, -1e6, 250, -250, 61440, np.inf, -np.inf, np.nan, 1.3, -1e-9, 0.0],
                 np.float32)
    graph = oh.make_graph([oh.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [oh.make_tensor_value_info("y", to, x.shape)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    [want] = ReferenceEvaluator(model).run(None, {"x": x})
    ir = Ir().main_graph
    op = ir.create_op(OpType("ai.onnx", "Cast", 21), [ir.add_constant("x", x)], 1,
                      {"to": to, "saturate": saturate})
    [value] = REGISTRY.lookup(op).fold(op, [x])
    assert value.view(np.uint8).tolist() == want.view(np.uint8).tolist()


def test_a_float8_model_plans_and_its_weights_are_weights():
    """A float8 weight cast up and added to float16 data: planned end to end."""
    weight = np.linspace(-3, 3, 64 * 32).reshape(64, 32).astype(ml_dtypes.float8_e4m3fnuz)
    nodes = [oh.make_node("Cast", ["w"], ["w16"], to=TensorProto.FLOAT16),
             oh.make_node("Add", ["x", "w16"], ["y"])]
    graph = oh.make_graph(nodes, "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT16, [64, 32])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT16, [64, 32])],
                          initializer=[numpy_helper.from_array(weight, "w")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])
    ir = Ir.from_onnx(model)
    w = ir.main_graph.tensor("w")
    assert (w.dtype, w.tensor_type) == ("float8_e4m3fnuz", TensorType.VARIABLE)
    assert judge.plan_case(ir).outcome == judge.PLANNED
