"""The Rewriter: every change is recorded, constants are uniqued, replacements keep types."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import CanonicalizationError, ShapeError
from popart_unwind.ir import Ir, OpSettings, OpType, TensorType
from popart_unwind.ir.names import CONSTANT_PREFIX, FOLDED_PREFIX, TRANSFORM_PREFIX
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter


def make(graph, name, inputs, attributes=None, *, version=13, settings=None):
    op = graph.create_op(OpType("ai.onnx", name, version), inputs, 1, attributes, settings)
    for tensor, (dtype, shape) in zip(op.outputs, REGISTRY.lookup(op).infer(op), strict=True):
        tensor.dtype, tensor.shape = dtype, tuple(shape)
    return op


@pytest.fixture
def graph():
    graph = Ir().main_graph
    graph.add_input("x", "float32", (2, 3))
    return graph


def test_constant_is_uniqued_by_dtype_shape_and_bytes(graph):
    rewriter = Rewriter(REGISTRY)
    first = rewriter.constant(graph, np.arange(3, dtype=np.int64))
    again = rewriter.constant(graph, np.arange(3, dtype=np.int64))
    other_dtype = rewriter.constant(graph, np.arange(3, dtype=np.int32))
    assert again is first and other_dtype is not first
    assert first.id.startswith(CONSTANT_PREFIX) and first.tensor_type is TensorType.CONST
    assert rewriter.changes == 2


def test_negative_zero_is_a_different_constant(graph):
    rewriter = Rewriter(REGISTRY)
    plus = rewriter.constant(graph, np.array(0.0, np.float32))
    minus = rewriter.constant(graph, np.array(-0.0, np.float32))
    assert plus is not minus


def test_constant_reuses_an_existing_const_tensor(graph):
    existing = graph.add_constant("c", np.ones((2,), np.float32))
    rewriter = Rewriter(REGISTRY)
    assert rewriter.constant(graph, np.ones((2,), np.float32)) is existing
    assert rewriter.changes == 0


def test_replace_op_with_a_value_makes_a_folded_constant(graph):
    neg = make(graph, "Neg", ["x"])
    graph.mark_output(neg.output(0))
    rewriter = Rewriter(REGISTRY)
    rewriter.replace_op(neg, [np.zeros((2, 3), np.float32)])
    [out] = graph.outputs
    assert out.id == FOLDED_PREFIX + "Neg0:0"
    assert out.tensor_type is TensorType.CONST and not graph.ops
    graph.ir.verify()


def test_replace_op_refuses_a_different_shape_or_dtype(graph):
    neg = make(graph, "Neg", ["x"])
    graph.mark_output(neg.output(0))
    rewriter = Rewriter(REGISTRY)
    with pytest.raises(CanonicalizationError, match="cannot be replaced"):
        rewriter.replace_op(neg, [np.zeros((3, 2), np.float32)])
    with pytest.raises(CanonicalizationError, match="dtype"):
        rewriter.replace_op(neg, [np.zeros((2, 3), np.float64)])
    with pytest.raises(CanonicalizationError, match="own output"):
        rewriter.replace_op(neg, [neg.output(0)])


def test_replace_op_redirects_readers_and_graph_outputs(graph):
    ident = make(graph, "Identity", ["x"])
    relu = make(graph, "Relu", [ident.output(0)])
    graph.mark_output(ident.output(0))
    rewriter = Rewriter(REGISTRY)
    rewriter.replace_op(ident, [graph.tensor("x")])
    assert relu.input(0).id == "x" and graph.output_ids == ["x"]
    touched, _, _ = rewriter.take_record()
    assert relu in touched


def test_create_op_inherits_placement_and_scope_and_infers_shapes(graph):
    settings = OpSettings(name="n", scope="block", vgraph_id=1, pipeline_stage=2)
    like = make(graph, "Relu", ["x"], settings=settings)
    rewriter = Rewriter(REGISTRY)
    created = rewriter.create_op(graph, "Transpose", [graph.tensor("x")], {"perm": [1, 0]},
                                 like=like)
    assert created.type == OpType("ai.onnx", "Transpose", 13)
    assert created.settings.scope == "block" and created.settings.vgraph_id == 1
    assert created.settings.pipeline_stage == 2 and created.settings.name == ""
    out = created.output(0)
    assert out.id.startswith(TRANSFORM_PREFIX) and out.shape == (3, 2)
    assert out.dtype == "float32"


def test_create_op_without_a_shape_rule_is_refused(graph):
    rewriter = Rewriter(REGISTRY)
    with pytest.raises(CanonicalizationError, match="no shape rule"):
        rewriter.create_op(graph, OpType("custom", "Mystery"), [graph.tensor("x")])
    assert not graph.ops


def test_create_op_with_bad_shapes_leaves_nothing_behind(graph):
    rewriter = Rewriter(REGISTRY)
    with pytest.raises(ShapeError):
        rewriter.create_op(graph, "Transpose", [graph.tensor("x")], {"perm": [0, 0]})
    assert not graph.ops and [t.id for t in graph.tensors] == ["x"]


def test_setting_what_is_already_there_records_nothing(graph):
    op = make(graph, "Transpose", ["x"], {"perm": [1, 0]})
    rewriter = Rewriter(REGISTRY)
    rewriter.set_attribute(op, "perm", (1, 0))
    rewriter.set_input(op, 0, graph.tensor("x"))
    assert rewriter.changes == 0
    rewriter.set_attribute(op, "perm", [0, 1])
    assert rewriter.changes == 1
    _, modified, _ = rewriter.take_record()
    assert modified == [op]


def test_losing_the_last_use_of_a_constant_is_reported(graph):
    const = graph.add_constant("c", np.ones((2, 3), np.float32))
    add = make(graph, "Add", ["x", const])
    rewriter = Rewriter(REGISTRY)
    rewriter.set_input(add, 1, graph.tensor("x"))
    _, _, loose = rewriter.take_record()
    assert loose == [const]


def test_a_scalar_and_a_one_element_vector_are_different_constants(graph):
    rewriter = Rewriter(REGISTRY)
    scalar = rewriter.constant(graph, np.array(1.0, np.float32))
    vector = rewriter.constant(graph, np.array([1.0], np.float32))
    assert scalar is not vector and scalar.shape == () and vector.shape == (1,)
