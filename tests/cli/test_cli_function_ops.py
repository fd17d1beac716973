"""A decoder layer as an opset-23 export writes it (RMSNormalization, RotaryEmbedding,
Attention: ops ONNX defines by function bodies) planned by the command."""

from __future__ import annotations

import json

import numpy as np
import onnx
from cli_runner import run
from conftest import save_alone
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

from popart_unwind.ir import Ir

BATCH, SEQ, HEADS, HEAD, VOCAB = 2, 8, 4, 8, 32
HIDDEN = HEADS * HEAD


def decoder_layer() -> onnx.ModelProto:
    """Embedding, RMSNorm, Q/K/V projections, rotary embeddings on Q and K, causal
    attention, output projection and residual, a final RMSNorm and an LM head."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32),
                                       name)

    angles = np.arange(SEQ)[:, None] / 10000 ** (np.arange(HEAD // 2) / (HEAD // 2))
    initializers = [
        weight("embed", VOCAB, HIDDEN), weight("wq", HIDDEN, HIDDEN),
        weight("wk", HIDDEN, HIDDEN), weight("wv", HIDDEN, HIDDEN),
        weight("wo", HIDDEN, HIDDEN), weight("head", HIDDEN, VOCAB),
        numpy_helper.from_array(np.ones(HIDDEN, np.float32), "norm1"),
        numpy_helper.from_array(np.ones(HIDDEN, np.float32), "norm2"),
        numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
        numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin"),
        numpy_helper.from_array(np.tile(np.arange(SEQ), (BATCH, 1)).astype(np.int64), "pos"),
        numpy_helper.from_array(np.array([BATCH, SEQ, HEADS, HEAD], np.int64), "heads"),
        numpy_helper.from_array(np.array([BATCH, SEQ, HIDDEN], np.int64), "hidden"),
    ]
    nodes = [
        oh.make_node("Gather", ["embed", "ids"], ["x"], name="embed"),
        oh.make_node("RMSNormalization", ["x", "norm1"], ["xn"], name="input_norm",
                     epsilon=1e-6),
    ]
    for part in ("q", "k", "v"):
        nodes += [oh.make_node("MatMul", ["xn", f"w{part}"], [f"{part}2"], name=f"{part}_proj"),
                  oh.make_node("Reshape", [f"{part}2", "heads"], [f"{part}3"],
                               name=f"{part}_split"),
                  oh.make_node("Transpose", [f"{part}3"], [f"{part}4"], perm=[0, 2, 1, 3],
                               name=f"{part}_heads")]
    nodes += [
        oh.make_node("RotaryEmbedding", ["q4", "cos", "sin", "pos"], ["qr"], name="q_rotary"),
        oh.make_node("RotaryEmbedding", ["k4", "cos", "sin", "pos"], ["kr"], name="k_rotary"),
        oh.make_node("Attention", ["qr", "kr", "v4"], ["att"], name="attention", is_causal=1),
        oh.make_node("Transpose", ["att"], ["att2"], perm=[0, 2, 1, 3], name="merge"),
        oh.make_node("Reshape", ["att2", "hidden"], ["att3"], name="merge_heads"),
        oh.make_node("MatMul", ["att3", "wo"], ["o"], name="o_proj"),
        oh.make_node("Add", ["x", "o"], ["h"], name="residual"),
        oh.make_node("RMSNormalization", ["h", "norm2"], ["hn"], name="final_norm",
                     epsilon=1e-6),
        oh.make_node("MatMul", ["hn", "head"], ["logits"], name="lm_head"),
    ]
    graph = oh.make_graph(
        nodes, "decoder",
        [oh.make_tensor_value_info("ids", TensorProto.INT64, [BATCH, SEQ])],
        [oh.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, SEQ, VOCAB])],
        initializer=initializers)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_the_layer_imports_with_the_shape_onnx_computes():
    model = decoder_layer()
    ids = np.random.default_rng(1).integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64)
    (want,) = ReferenceEvaluator(model).run(None, {"ids": ids})
    ir = Ir.from_onnx(model)
    ops = {op.type.name for op in ir.main_graph.ops}
    assert not ops & {"Attention", "RotaryEmbedding", "RMSNormalization"}
    assert ir.main_graph.outputs[0].shape == want.shape
    assert ir.metadata["expanded_functions"] == \
        "Attention:1,RMSNormalization:2,RotaryEmbedding:2"


def test_the_layer_is_planned_by_the_command(tmp_path):
    path = save_alone(decoder_layer(), tmp_path / "model", "decoder.onnx")
    plan = tmp_path / "plan.json"
    status, _, err = run("plan", str(path), "--tiles", "16", "--out", str(plan),
                           "--baseline", "none", "--quiet")
    assert (status, err) == (0, "")
    planned = json.loads(plan.read_text())
    assert not set(planned["ops_without_rule"]) & {"Attention", "RotaryEmbedding",
                                                   "RMSNormalization"}
    assert {"ids", "wq", "wk", "wv", "wo", "head"} <= set(planned["tensors"])
