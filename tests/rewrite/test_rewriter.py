"""The Rewriter: every change is recorded, constants are uniqued, replacements keep types."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import CanonicalizationError, IrError, ShapeError
from popart_unwind.ir import Ir, OpSettings, OpType, TensorType
from popart_unwind.ir.names import CONSTANT_PREFIX, FOLDED_PREFIX, TRANSFORM_PREFIX
from popart_unwind.ir.tile_mapping import tile_mapping
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
    assert out.id == "Neg0:0"  # a main-graph output keeps its id, outside the pool
    assert out.tensor_type is TensorType.CONST and not graph.ops
    graph.ir.verify()


def test_replace_op_with_a_value_read_by_an_op_makes_a_folded_constant(graph):
    neg = make(graph, "Neg", ["x"])
    relu = make(graph, "Relu", [neg.output(0)])
    graph.mark_output(relu.output(0))
    rewriter = Rewriter(REGISTRY)
    assert rewriter.replace_op(neg, [np.zeros((2, 3), np.float32)])
    assert relu.input(0).id == FOLDED_PREFIX + "Neg0:0" and graph.ops == [relu]
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
    out_id = ident.output(0).id
    rewriter = Rewriter(REGISTRY)
    assert rewriter.replace_op(ident, [graph.tensor("x")])
    # readers move to x; the Identity stays, holding the output's id for the graph input
    assert relu.input(0).id == "x" and graph.output_ids == [out_id]
    assert graph.tensor(out_id).producer is ident
    touched, _, _ = rewriter.take_record()
    assert relu in touched
    assert not rewriter.replace_op(ident, [graph.tensor("x")]) and rewriter.changes == 1


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


# -- the primitives transforms use ---------------------------------------------------------
def test_setting_a_type_records_a_change_only_when_it_differs(graph):
    neg = graph.create_op(OpType("ai.onnx", "Neg", 13), ["x"])
    out = neg.output(0)
    rewriter = Rewriter(REGISTRY)
    rewriter.set_type(out, "float32", [2, 3])
    assert (out.dtype, out.shape) == ("float32", (2, 3)) and rewriter.changes == 1
    rewriter.set_type(out, "float32", (2, 3))
    assert rewriter.changes == 1
    with pytest.raises(IrError, match="unknown dtype"):
        rewriter.set_type(out, "float33", (2, 3))
    assert out.dtype == "float32" and rewriter.changes == 1


def test_an_equal_tile_mapping_is_no_change(graph):
    x = graph.tensor("x")
    rewriter = Rewriter(REGISTRY)
    mapping = tile_mapping(np.array([0, 0, 0, 1, 1, 1]), 2)
    rewriter.set_tile_mapping(x, mapping)
    assert x.tile_mapping is mapping and rewriter.changes == 1
    rewriter.set_tile_mapping(x, [[(0, 3)], [(3, 6)]])  # the same mapping as lists
    assert x.tile_mapping is mapping and rewriter.changes == 1
    rewriter.set_tile_mapping(x, None)
    assert x.tile_mapping is None and rewriter.changes == 2


def test_renaming_an_op_is_recorded(graph):
    op = make(graph, "Relu", ["x"])
    rewriter = Rewriter(REGISTRY)
    rewriter.set_op_name(op, "")
    assert rewriter.changes == 0
    rewriter.set_op_name(op, "act")
    assert op.name == "act" and rewriter.log == ["Relu#0 renamed 'act'"]


def test_inputs_and_outputs_move_to_free_slots_only(graph):
    op = graph.create_op(OpType("custom", "Pair"), [None, "x"], 3)
    unused, later = op.output(0).id, op.output(2).id
    rewriter = Rewriter(REGISTRY)
    rewriter.move_input(op, 1, 0)
    assert [(i, t.id) for i, t in op.input_map().items()] == [(0, "x")]
    rewriter.remove_output(op, 0)
    assert not graph.has_tensor(unused)
    with pytest.raises(IrError, match="already has an output at index 1"):
        rewriter.move_output(op, 2, 1)
    rewriter.remove_output(op, 1)
    rewriter.move_output(op, 2, 0)
    assert [(j, t.id) for j, t in op.output_map().items()] == [(0, later)]
    assert rewriter.changes == 4
    graph.ir.verify(require_shapes=False)


def test_a_used_output_is_not_removed(graph):
    op = make(graph, "Relu", ["x"])
    graph.mark_output(op.output(0))
    with pytest.raises(IrError, match="still used"):
        Rewriter(REGISTRY).remove_output(op, 0)


def test_graph_inputs_outputs_and_graphs_come_and_go_through_the_rewriter():
    ir = Ir()
    sub = ir.create_graph("sub")
    a = sub.add_input("a", "float32", (2,))
    sub.mark_output(a)
    rewriter = Rewriter(REGISTRY)
    b = rewriter.add_graph_input(sub, "b", "float32", (3,))
    assert sub.input_ids == ["a", "b"] and b.shape == (3,)
    with pytest.raises(IrError, match=r"input 0 \('a'\) of graph 'sub' is still used"):
        rewriter.remove_graph_input(sub, 0)
    rewriter.remove_graph_output(sub, 0)
    assert sub.output_ids == [] and sub.has_tensor("a")
    rewriter.remove_graph_input(sub, 0)
    assert sub.input_ids == ["b"] and not sub.has_tensor("a")
    rewriter.remove_graph(sub)
    assert not ir.has_graph("sub")
    assert rewriter.changes == 4
