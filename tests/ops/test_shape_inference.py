"""The shape inference driver: rules applied in schedule order, seeded shapes checked or
kept, opaque and undecided ops left alone, subgraphs entered before their callers."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_cases import expected_types, import_alone, node_cases, output_types

from popart_unwind.errors import IrError, ShapeError
from popart_unwind.ir import GRAPHCORE_DOMAIN, Ir, OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.shape_inference import check_shapes, infer_op, infer_shapes
from popart_unwind.rewrite import Rewriter


def onnx_op(graph, name, inputs, attributes=None, outputs=1, version=18):
    return graph.create_op(OpType("ai.onnx", name, version), inputs, outputs, attributes)


def chain(ir=None):
    """x (2, 3) -> MatMul w (3, 4) -> ReduceSum(axis 1, keepdims 0) -> y (2,)."""
    ir = ir or Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    w = graph.add_variable("w", np.ones((3, 4), np.float32))
    matmul = onnx_op(graph, "MatMul", [x, w])
    axes = graph.add_constant("axes", np.array([1], np.int64))
    reduce = onnx_op(graph, "ReduceSum", [matmul.output(0), axes], {"keepdims": 0})
    graph.mark_output(reduce.output(0))
    return ir, matmul, reduce


def test_infer_shapes_walks_the_schedule_and_reports_change_once():
    ir, matmul, reduce = chain()
    assert infer_shapes(ir) is True
    assert matmul.output(0).shape == (2, 4) and reduce.output(0).shape == (2,)
    assert infer_shapes(ir) is False
    check_shapes(ir)
    ir.verify()


def test_infer_shapes_writes_every_type_through_the_rewriter_it_is_handed():
    ir, matmul, reduce = chain()
    rewriter = Rewriter(REGISTRY)
    assert infer_shapes(ir, rewriter=rewriter) is True
    assert rewriter.log == [f"{matmul.output(0).id!r} is now float32 (2, 4)",
                            f"{reduce.output(0).id!r} is now float32 (2,)"]
    assert infer_shapes(ir, rewriter=rewriter) is False and rewriter.changes == 2


def test_a_seeded_shape_must_agree_with_the_rule():
    ir, matmul, _ = chain()
    matmul.output(0).shape = (2, 5)
    with pytest.raises(ShapeError, match=r"MatMul#0 output 0 .*gives float32 \(2, 4\)"):
        infer_shapes(ir)


def test_check_shapes_finds_a_wrong_or_missing_shape():
    ir, _, reduce = chain()
    infer_shapes(ir)
    reduce.output(0).shape = (3,)
    with pytest.raises(ShapeError, match="ReduceSum#1"):
        check_shapes(ir)
    reduce.output(0).shape = None
    with pytest.raises(ShapeError, match="has no shape"):
        check_shapes(ir)


def test_opaque_ops_keep_seeded_shapes_and_unknown_ones_fail_only_verification():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    opaque = graph.create_op(OpType("custom", "Mystery"), [x], 2)
    opaque.output(0).shape = (6,)
    after = onnx_op(graph, "Neg", [opaque.output(0)])
    later = onnx_op(graph, "Neg", [opaque.output(1)])
    infer_shapes(ir)
    assert opaque.output(0).shape == (6,) and after.output(0).shape == (6,)
    assert later.output(0).shape is None
    ir.verify(require_shapes=False)
    with pytest.raises(IrError, match="has no shape"):
        ir.verify()


def test_undecided_rules_keep_seeds_and_trust_seeded_keeps_them_on_rule_errors():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    repeats = graph.add_input("repeats", "int64", (2,))
    tile = onnx_op(graph, "Tile", [x, repeats])
    infer_shapes(ir)
    assert tile.output(0).shape is None
    tile.output(0).shape = (4, 3)
    infer_shapes(ir)
    assert tile.output(0).shape == (4, 3)
    shape = graph.add_input("shape", "int64", (2,))  # a computed target shape
    reshape = onnx_op(graph, "Reshape", [x, shape])
    reshape.output(0).shape = (3, 2)
    infer_shapes(ir, trust_seeded=True)
    assert reshape.output(0).shape == (3, 2)


def test_subgraphs_are_inferred_before_their_callers_and_unreached_graphs_too():
    ir = Ir()
    body = ir.create_graph("body")
    inner = onnx_op(body, "Softmax", [body.add_input("t", "float32", (2, 3))])
    body.mark_output(inner.output(0))
    spare = ir.create_graph("spare")
    unreached = onnx_op(spare, "Relu", [spare.add_input("u", "float32", (5,))])
    x = ir.main_graph.add_input("x", "float32", (2, 3))
    call = ir.main_graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), [x], 1,
                                   {"callee": "body"})
    infer_shapes(ir)
    assert call.output(0).shape == (2, 3) and unreached.output(0).shape == (5,)
    assert infer_shapes(ir.main_graph) is False


def test_infer_op_fails_loudly_on_a_rule_with_too_few_outputs():
    ir = Ir()
    graph = ir.main_graph
    op = onnx_op(graph, "MatMul", [graph.add_input("a", "float32", (2, 2)),
                                   graph.add_input("b", "float32", (2, 2))], outputs=2)
    with pytest.raises(ShapeError, match="gives 1 output"):
        infer_op(op)


def test_inference_is_deterministic_json():
    texts = set()
    for _ in range(2):
        ir, _, _ = chain()
        infer_shapes(ir)
        texts.add(ir.to_json())
    assert len(texts) == 1


# -- shape operands computed from shapes ----------------------------------------------------
def test_a_shape_operand_computed_from_shapes_and_constants_decides_the_shape():
    """Reshape x (2, 3, 4) to Concat(Shape(x)[:1], [-1]): (2, 12), as ONNX's inference
    propagates the value, with no Const tensor for the target."""
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3, 4))
    shape = onnx_op(graph, "Shape", [x], {"end": 1}).output(0)
    rest = graph.add_constant("rest", np.array([-1], np.int64))
    target = onnx_op(graph, "Concat", [shape, rest], {"axis": 0}).output(0)
    reshape = onnx_op(graph, "Reshape", [x, target])
    graph.mark_output(reshape.output(0))
    infer_shapes(ir)
    assert reshape.output(0).shape == (2, 12)


def test_a_shape_operand_that_depends_on_data_or_a_variable_stays_undecided():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3, 4))
    streamed = graph.add_input("target", "int64", (2,))
    weight = graph.add_variable("weight", np.array([2, 12], np.int64))
    doubled = onnx_op(graph, "Add", [weight, weight]).output(0)
    by_stream = onnx_op(graph, "Reshape", [x, streamed])
    by_variable = onnx_op(graph, "Reshape", [x, doubled])
    infer_shapes(ir)
    assert by_stream.output(0).shape is None and by_variable.output(0).shape is None


@pytest.mark.parametrize(("module", "name"), [
    ("attention", "test_attention_3d_expanded"),
    ("attention", "test_attention_4d_attn_mask_expanded"),
    ("rotaryembedding", "test_rotary_embedding_expanded"),
    ("groupnormalization", "test_group_normalization_example_expanded"),
    ("flexattention", "test_flexattention_expanded_ver26"),
])
def test_expanded_onnx_functions_get_their_shapes_from_our_rules_alone(module, name):
    case = node_cases(module)[name]
    assert output_types(import_alone(case.model)) == expected_types(case)


def test_a_shape_operand_read_by_many_paths_is_evaluated_once_per_tensor():
    """Thirty levels of Max(t, t) over Shape(x): 2**30 paths, thirty tensors."""
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3, 4))
    target = onnx_op(graph, "Shape", [x]).output(0)
    for _ in range(30):
        target = onnx_op(graph, "Max", [target, target], version=13).output(0)
    reshape = onnx_op(graph, "Reshape", [x, target])
    infer_shapes(ir)
    assert reshape.output(0).shape == (2, 3, 4)
