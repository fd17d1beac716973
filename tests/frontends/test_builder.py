"""The Builder: a transformer block op by op with shapes known at each call, placement and
name scopes from context managers, subgraph calls, and errors raised where they are made."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import IrError, ShapeError
from popart_unwind.frontends.builder import Builder, onnx_op_name
from popart_unwind.ir import Builder as LazyBuilder
from popart_unwind.ir import TensorType
from popart_unwind.ops.control import CallOp

BATCH, SEQ, HIDDEN, HEADS = 2, 5, 16, 4
HEAD = HIDDEN // HEADS


def weight(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def attention_block(b: Builder, x: str) -> str:
    """Self-attention, residual and layer norm: matmuls, bias adds, reshape/transpose,
    softmax, layernorm."""
    heads = []
    for name in ("q", "k", "v"):
        with b.name_scope(name):
            w = b.add_initialized_input_tensor(weight(HIDDEN, HIDDEN), "weight")
            bias = b.add_initialized_input_tensor(weight(HIDDEN), "bias")
            projected = b.ai_onnx.add([b.ai_onnx.matmul([x, w]), bias])
            split = b.ai_onnx.reshape([projected, np.array([BATCH, SEQ, HEADS, HEAD])])
            heads.append(b.ai_onnx.transpose([split], perm=[0, 2, 1, 3]))
    q, k, v = heads
    scores = b.ai_onnx.matmul([q, b.ai_onnx.transpose([k], perm=[0, 1, 3, 2])])
    probs = b.ai_onnx.softmax([b.ai_onnx.mul([scores, np.array(HEAD ** -0.5, np.float32)])],
                              axis=-1)
    context = b.ai_onnx.transpose([b.ai_onnx.matmul([probs, v])], perm=[0, 2, 1, 3])
    merged = b.ai_onnx.reshape([context, np.array([BATCH, SEQ, HIDDEN])])
    gamma = b.add_initialized_input_tensor(np.ones(HIDDEN, np.float32), "gamma")
    beta = b.add_initialized_input_tensor(np.zeros(HIDDEN, np.float32), "beta")
    return b.ai_onnx.layer_normalization([b.ai_onnx.add([merged, x]), gamma, beta], axis=-1)


def test_a_transformer_block_builds_with_shapes_at_every_step():
    b = Builder()
    x = b.add_input_tensor("float32", (BATCH, SEQ, HIDDEN), "x")
    with b.name_scope("layer0"):
        y = attention_block(b, x)
    b.add_output_tensor(y)
    assert b.get_tensor_shape(y) == [BATCH, SEQ, HIDDEN]
    ir = b.ir()
    main = ir.main_graph
    assert main.tensor("x").tensor_type is TensorType.STREAM
    assert main.tensor("layer0/q/weight").tensor_type is TensorType.VARIABLE
    assert main.tensor("layer0/MatMul:0").shape == (BATCH, HEADS, SEQ, SEQ)
    counts = {}
    for op in main.ops:
        counts[op.type.name] = counts.get(op.type.name, 0) + 1
    assert counts == {"MatMul": 5, "Add": 4, "Reshape": 4, "Transpose": 5, "Mul": 1,
                      "Softmax": 1, "LayerNormalization": 1}
    assert all(op.type.version == 18 for op in main.ops)


def test_placement_context_managers_nest_and_restore():
    b = Builder()
    x = b.add_input_tensor(np.float32, (4,), "x")
    with b.virtual_graph(1), b.pipeline_stage(0):
        first = b.ai_onnx.relu([x])
        with b.virtual_graph(2), b.execution_phase(5), b.name_scope("inner"):
            second = b.ai_onnx.neg([first])
        third = b.ai_onnx.abs([second])
    fourth = b.ai_onnx.sigmoid([third])
    settings = {op.output(0).id: op.settings for op in b.graph.ops}
    assert [(s.vgraph_id, s.pipeline_stage, s.execution_phase) for s in settings.values()] == \
        [(1, 0, -2), (2, 0, 5), (1, 0, -2), (-1, -1, -2)]
    assert settings[second].name == "inner/Neg" and settings[second].scope == "inner"
    assert settings[fourth].scope == ""


def test_name_scopes_join_with_slashes():
    b = Builder()
    with b.name_scope("encoder"), b.name_scope("layer1"):
        x = b.add_input_tensor("float32", (2,), "x")
        y = b.ai_onnx.relu([x], name="act")
    assert (x, y) == ("encoder/layer1/x", "encoder/layer1/act:0")


def test_a_subgraph_call_makes_a_call_op_with_the_callees_shapes():
    b = Builder()
    x = b.add_input_tensor("float32", (3, 4), "x")
    sub = b.create_subgraph_builder()
    t = sub.add_input_tensor("float32", (3, 4), "t")
    w = sub.add_initialized_input_tensor(weight(4, 2), "w")
    sub.add_output_tensor(sub.ai_onnx.matmul([t, w]))
    sub.add_output_tensor(t)
    product, passed = b.call(sub, [x])
    again = b.ai_graphcore.call([x], 2, sub)
    b.add_output_tensor(product)
    ir = b.ir()
    calls = [op for op in ir.main_graph.ops if isinstance(op, CallOp)]
    assert [op.attributes["callee"] for op in calls] == ["subgraph0", "subgraph0"]
    assert b.get_tensor_shape(product) == [3, 2] and b.get_tensor_shape(passed) == [3, 4]
    assert again[0] != product
    assert ir.graph("subgraph0").tensor("t").tensor_type is TensorType.ACT_GRAD
    with pytest.raises(IrError, match="takes 1 input"):
        b.call(sub, [x, x])
    with pytest.raises(ShapeError, match="does not match"):
        b.call(sub, [b.add_input_tensor("float32", (4, 3), "other")])


def test_shape_errors_raise_at_the_call_and_leave_the_graph_unchanged():
    b = Builder()
    x = b.add_input_tensor("float32", (2, 3), "x")
    w = b.add_input_tensor("float32", (4, 5), "w")
    with pytest.raises(ShapeError, match="MatMul"):
        b.ai_onnx.matmul([x, w])
    assert b.graph.ops == []
    with pytest.raises(ShapeError, match="pass output_types"):
        b.op("Mystery", [x], domain="custom")
    y = b.op("Mystery", [x], domain="custom", output_types=[("int32", (7,))])
    assert (b.get_tensor_dtype(y), b.get_tensor_shape(y)) == ("int32", [7])
    assert b.graph.ops[0].type.version == 1


def test_generic_ops_attributes_and_op_names():
    b = Builder(opset=13)
    x = b.add_input_tensor("float32", (2, 6), "x")
    values, indices = b.op("TopK", [x, np.array([3])], {"axis": 1}, num_outputs=2)
    assert b.get_tensor_shape(values) == [2, 3] and b.get_tensor_dtype(indices) == "int64"
    c = b.ai_onnx.constant(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    assert b.graph.tensor(c).tensor_type is TensorType.CONST
    assert b.graph.ops[0].type.version == 13
    assert [onnx_op_name(n) for n in ("matmul", "layer_normalization", "reducesum", "top_k",
                                      "conv_transpose", "my_custom_op")] == \
        ["MatMul", "LayerNormalization", "ReduceSum", "TopK", "ConvTranspose", "MyCustomOp"]
    assert LazyBuilder is Builder


def test_ir_refuses_an_incomplete_subgraph():
    b = Builder()
    sub = b.create_subgraph_builder("body")
    sub.graph.add_tensor("dangling", "float32", (1,))
    with pytest.raises(IrError, match="dangling"):
        b.ir()
