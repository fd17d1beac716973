"""Element types the IR does not model: the importer refuses them naming the type, and says
whether PopART's ONNX import would take it (its ``onnxutil::getDataType``). ONNX's two FNUZ
float8 types are PopART's FLOAT8_143 and FLOAT8_152, which the IR models: they import."""

from __future__ import annotations

import onnx
import onnx_conformance_cases as judge
import pytest
from onnx import TensorProto
from onnx import helper as oh

from popart_unwind.errors import ModelImportError
from popart_unwind.ir import Ir


def model_with_input_of(elem_type: int) -> onnx.ModelProto:
    graph = oh.make_graph([oh.make_node("Identity", ["x"], ["y"])], "g",
                          [oh.make_tensor_value_info("x", elem_type, [2])],
                          [oh.make_tensor_value_info("y", elem_type, [2])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)])


@pytest.mark.parametrize(("elem_type", "popart"), [
    (TensorProto.FLOAT8E4M3FN, "refuses it too, and no PopART type holds its values (its "
                               "FLOAT8_143 has exponent bias 8, not 7"),
    (TensorProto.FLOAT8E5M2, "refuses it too, and no PopART type holds its values (its "
                             "FLOAT8_152 has exponent bias 16, not 15"),
    (TensorProto.FLOAT8E8M0, "refuses it too"),
    (TensorProto.STRING, "takes it as its STRING type"),
    (TensorProto.COMPLEX64, "takes it as its COMPLEX64 type"),
    (TensorProto.INT4, "refuses it too"),
    (TensorProto.UINT4, "refuses it too"),
    (TensorProto.FLOAT4E2M1, "refuses it too"),
    (TensorProto.INT2, "refuses it too"),
])
def test_unmodelled_element_types_are_refused_saying_what_popart_does(elem_type, popart):
    name = TensorProto.DataType.Name(elem_type)
    with pytest.raises(ModelImportError) as caught:
        Ir.from_onnx(model_with_input_of(elem_type))
    message = str(caught.value)
    assert f"has ONNX element type {name}, which the IR does not model" in message
    assert f"PopART's ONNX import {popart}" in message
    assert judge.refusal(caught.value).outcome == judge.REFUSED_TYPE


@pytest.mark.parametrize(("elem_type", "dtype"), [
    (TensorProto.FLOAT8E4M3FNUZ, "float8_e4m3fnuz"),
    (TensorProto.FLOAT8E5M2FNUZ, "float8_e5m2fnuz")])
def test_popart_float8_types_import(elem_type, dtype):
    ir = Ir.from_onnx(model_with_input_of(elem_type))
    assert [(t.dtype, t.shape) for t in ir.main_graph.outputs] == [(dtype, (2,))]
