"""Ops that draw random numbers: Dropout's outputs per opset, and its fold outside training;
RandomUniform and RandomNormal typed from their attributes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from op_building import build

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.shape_inference import infer_op


def test_dropout_outputs_a_bool_mask_and_folds_outside_training():
    op = build("Dropout", [(2, 3)], outputs=2, version=13)
    infer_op(op)
    assert [(t.dtype, t.shape) for t in op.outputs] == [("float32", (2, 3)), ("bool", (2, 3))]
    x, mask = REGISTRY.lookup(op).fold(op, [None])
    assert x is op.input(0) and mask.dtype == bool and mask.all()
    training = build("Dropout", [(2, 3), None, np.array(True)], version=13)
    infer_op(training)
    assert REGISTRY.lookup(training).fold(training, [None, None, np.array(True)]) is None
    assert training.input(2).tensor_type is TensorType.CONST


def test_random_uniform_and_normal_take_shape_and_type_from_attributes():
    """As ONNX's shape inference types them; they draw, so they are never merged."""
    for name in ("RandomUniform", "RandomNormal"):
        for attributes in ({"shape": [2, 3]}, {"shape": [4], "dtype": TensorProto.FLOAT16},
                           {"shape": [1, 0], "dtype": TensorProto.DOUBLE}):
            node = oh.make_node(name, [], ["y"], **attributes)
            model = oh.make_model(oh.make_graph([node], "g", [],
                                                [onnx.ValueInfoProto(name="y")]),
                                  opset_imports=[oh.make_opsetid("", 18)])
            [want] = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output
            want_shape = tuple(d.dim_value for d in want.type.tensor_type.shape.dim)
            [y] = Ir.from_onnx(model).main_graph.outputs
            assert y.shape == want_shape
            assert y.dtype == {1: "float32", 10: "float16", 11: "float64"}[
                want.type.tensor_type.elem_type]
            assert REGISTRY.draws_random(y.producer)
        op = build(name, [], {"shape": [2], "dtype": TensorProto.INT32})
        with pytest.raises(ShapeError):
            infer_op(op)
