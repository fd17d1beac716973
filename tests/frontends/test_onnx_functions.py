"""ONNX function ops imported through their function bodies (``frontends/onnx_functions.py``).

Oracles: ONNX's shape inference and ``onnx.reference.ReferenceEvaluator`` on the model as
written; the imported graph's values are computed with each op's own numpy fold
(``fold_oracle``), and the expanded ModelProto is run by the reference evaluator too.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from fold_oracle import fold_all
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator
from onnx_conformance_cases import onnx_inference_unavailable
from onnx_node_cases import import_alone
from popart_unwind.transforms import plan_ir, run_pipeline

from popart_unwind.errors import UnsupportedModelError
from popart_unwind.frontends import onnx_functions
from popart_unwind.frontends.onnx_functions import expand_functions
from popart_unwind.ir import Ir
from popart_unwind.ir.op import ONNX_DOMAIN, OpType
from popart_unwind.ops.coverage import has_layout_rule
from popart_unwind.ops.registry import REGISTRY
from popart_unwind.target import IpuModel, TileTarget

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, opset, initializers=(), functions=()):
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [oh.make_tensor_value_info(n, t, None) for n, t in outputs],
                          initializer=list(initializers))
    opsets = [oh.make_opsetid("", opset)] + [oh.make_opsetid(f.domain, 1) for f in functions]
    return oh.make_model(graph, opset_imports=opsets, functions=list(functions))


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == I64:
            feeds[value.name] = rng.integers(0, 3, size=shape).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _attention() -> onnx.ModelProto:
    """3-D inputs with heads given by attributes, a boolean causal mask: GQA (4 query
    heads over 2 key/value heads)."""
    mask = oh.make_tensor("mask", TensorProto.BOOL, [3, 5],
                          np.tril(np.ones((3, 5), bool), 2).ravel().tolist())
    node = oh.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="attn",
                        q_num_heads=4, kv_num_heads=2)
    return _model([node], [("q", F32, [2, 3, 16]), ("k", F32, [2, 5, 8]),
                           ("v", F32, [2, 5, 8])], [("y", F32)], 23, [mask])


def _rms() -> onnx.ModelProto:
    node = oh.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", epsilon=1e-3,
                        axis=-1)
    return _model([node], [("x", F32, [2, 3, 8]), ("scale", F32, [8])], [("y", F32)], 23)


def _rotary() -> onnx.ModelProto:
    """4-D input (batch, heads, sequence, head size), position ids, half rotated."""
    node = oh.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="rope",
                        rotary_embedding_dim=4)
    return _model([node], [("x", F32, [2, 2, 3, 8]), ("cos", F32, [6, 2]),
                           ("sin", F32, [6, 2]), ("pos", I64, [2, 3])], [("y", F32)], 23)


def _group_norm() -> onnx.ModelProto:
    node = oh.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], name="gn",
                        num_groups=2, epsilon=1e-4)
    return _model([node], [("x", F32, [2, 4, 3, 3]), ("scale", F32, [4]),
                           ("bias", F32, [4])], [("y", F32)], 21)


def _sce(opset: int = 23) -> onnx.ModelProto:
    """Weights, an ignored class and both outputs; the body is written for opset 13."""
    node = oh.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels", "weights"],
                        ["loss", "log_prob"], name="sce", reduction="mean", ignore_index=1)
    return _model([node], [("scores", F32, [4, 3, 2]), ("labels", I64, [4, 2]),
                           ("weights", F32, [3])], [("loss", F32), ("log_prob", F32)], opset)


MODELS = {"Attention": _attention, "RMSNormalization": _rms, "RotaryEmbedding": _rotary,
          "GroupNormalization": _group_norm, "SoftmaxCrossEntropyLoss": _sce}


def _oracle_types(model: onnx.ModelProto) -> list[tuple[str, tuple[int, ...]]]:
    """The outputs' dtypes and shapes as the reference evaluator computes them, checked
    against ONNX's shape inference wherever it gives a shape."""
    outputs = ReferenceEvaluator(model).run(None, _feeds(model))
    types = [(np.asarray(v).dtype.name, tuple(np.shape(v))) for v in outputs]
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for value, (_, shape) in zip(inferred.graph.output, types, strict=True):
        if value.type.tensor_type.HasField("shape"):
            assert tuple(d.dim_value for d in value.type.tensor_type.shape.dim) == shape
    return types


@pytest.mark.parametrize("op", sorted(MODELS))
def test_the_ops_are_unknown_to_the_registry(op):
    """What this file tests comes in by expansion, not by a rule of ours."""
    assert REGISTRY.lookup(OpType(ONNX_DOMAIN, op, 23)) is None


@pytest.mark.parametrize("op", sorted(MODELS))
def test_expansion_imports_with_onnx_shapes(op):
    model = MODELS[op]()
    want = _oracle_types(model)
    for ir in (Ir.from_onnx(model), import_alone(model)):
        assert [(t.dtype, t.shape) for t in ir.main_graph.outputs] == want
        assert op not in {o.type.name for o in ir.main_graph.ops}


@pytest.mark.parametrize("op", sorted(MODELS))
def test_expansion_computes_what_onnx_computes(op):
    """The imported ops' folds give the reference evaluator's values (on the model as
    written: ONNX's own implementation of the op), and so does the expanded model."""
    model = MODELS[op]()
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = fold_all(Ir.from_onnx(model), feeds)
    for ours, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    expanded = _expanded(model)
    for ours, theirs in zip(ReferenceEvaluator(expanded).run(None, feeds), want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def _expanded(model: onnx.ModelProto, knows=None) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    opsets = {(i.domain or ONNX_DOMAIN): i.version for i in copy.opset_import}
    inferred = onnx.shape_inference.infer_shapes(copy)
    return expand_functions(inferred, opsets, knows).model


def test_a_planned_attention_model_has_matmuls():
    model = _attention()
    ir = Ir.from_onnx(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_pipeline(ir)
        plan = plan_ir(ir, TileTarget(IpuModel(tiles_per_ipu=16)))
    matmuls = [op for op in ir.main_graph.ops if op.type.name == "MatMul"]
    assert len(matmuls) == 2  # Q·Kᵀ and the weights times V
    assert all(has_layout_rule(op) for op in matmuls)
    assert {"q", "k", "v"} <= {t.tensor_id for t in plan.tensors}
    assert ir.metadata["expanded_functions"] == "Attention:1"


def test_body_ops_keep_the_opset_of_their_body():
    """SoftmaxCrossEntropyLoss's body is written for opset 13: in a model of opset 23 its
    LogSoftmax is typed at 13, as the body means it."""
    ir = Ir.from_onnx(_sce(23))
    versions = {op.type.name: op.type.version for op in ir.main_graph.ops}
    assert versions["LogSoftmax"] == 13
    assert all(op.name.startswith("sce/") for op in ir.main_graph.ops)


def test_names_derive_from_the_node_and_are_deterministic():
    first, second = _expanded(_rms()), _expanded(_rms())
    assert first.SerializeToString() == second.SerializeToString()
    names = [node.name for node in first.graph.node]
    assert len(set(names)) == len(names) and all(n.startswith("rms/") for n in names)
    internal = {v for n in first.graph.node for v in n.output} - {"y"}
    assert all(v.startswith("rms/") for v in internal)


def test_names_taken_in_the_model_are_not_reused():
    """A value already named like an expansion's stem pushes the stem aside."""
    model = _rms()
    model.graph.node.insert(0, oh.make_node("Identity", ["x"], ["rms/XU"], name="taken"))
    model.graph.node[1].input[0] = "rms/XU"
    expanded = _expanded(model)
    assert [n.output[0] for n in expanded.graph.node].count("rms/XU") == 1
    assert all(n.name.startswith("rms__1/") for n in expanded.graph.node[1:])
    feeds = _feeds(model)
    np.testing.assert_allclose(ReferenceEvaluator(expanded).run(None, feeds)[0],
                               ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-6)


def test_attribute_references_fall_back_to_the_schema_default():
    """MeanVarianceNormalization's body reads ``axes`` into a Constant; without the
    attribute on the node the schema's default ([0, 2, 3]) applies."""
    node = oh.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn")
    model = _model([node], [("x", F32, [2, 3, 2, 2])], [("y", F32)], 18)
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(fold_all(Ir.from_onnx(model), feeds)[0], want, rtol=1e-5,
                               atol=1e-6)


def test_optional_inputs_and_outputs_left_empty():
    """No weights and no log_prob output: the body's optional branches go, and the
    unused output becomes an internal value."""
    node = oh.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels", ""], ["loss"],
                        name="sce", reduction="sum")
    model = _model([node], [("scores", F32, [3, 5]), ("labels", I64, [3])], [("loss", F32)],
                   23)
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    ir = Ir.from_onnx(model)
    assert ir.main_graph.outputs[0].shape == ()
    np.testing.assert_allclose(fold_all(ir, feeds)[0], want, rtol=1e-5)


def _knows_all_but(name: str):
    def knows(op_type: OpType) -> bool:
        return op_type.name != name and (
            REGISTRY.lookup(op_type) is not None or op_type.name == "Constant")
    return knows


def test_nested_function_calls_are_expanded_recursively():
    """SoftmaxCrossEntropyLoss's body calls LogSoftmax, itself a function: told the
    registry does not know it, the expansion expands that call in turn, with the types
    ONNX's inference of the outer body gives."""
    model = _sce(23)
    expanded = _expanded(model, _knows_all_but("LogSoftmax"))
    types = {node.op_type for node in expanded.graph.node}
    assert not types & {"SoftmaxCrossEntropyLoss", "LogSoftmax"}
    assert any(n.name.startswith("sce/LogSoftmax_") and n.name.count("/") == 2
               for n in expanded.graph.node)
    feeds = _feeds(model)
    for ours, theirs in zip(ReferenceEvaluator(expanded).run(None, feeds),
                            ReferenceEvaluator(model).run(None, feeds), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_nested_call_that_cannot_be_built_leaves_the_node():
    """NegativeLogLikelihoodLoss's body is built for its input types; inside
    SoftmaxCrossEntropyLoss its scores come from a Reshape whose shape ONNX's inference of
    the body leaves unknown, so the outer node stays (and the import refuses it)."""
    model = _sce(23)
    opsets = {ONNX_DOMAIN: 23}
    expansion = expand_functions(onnx.shape_inference.infer_shapes(model), opsets,
                                 _knows_all_but("NegativeLogLikelihoodLoss"))
    assert [node.op_type for node in expansion.model.graph.node] == \
        ["SoftmaxCrossEntropyLoss"]
    assert expansion.expanded == {}
    assert expansion.unbuilt == {"SoftmaxCrossEntropyLoss": "its body uses "
                                 "NegativeLogLikelihoodLoss, which the tool does not know"}


def test_nesting_deeper_than_the_bound_is_refused(monkeypatch):
    monkeypatch.setattr(onnx_functions, "MAX_DEPTH", 1)
    with pytest.raises(UnsupportedModelError, match="SoftmaxCrossEntropyLoss -> LogSoftmax"):
        _expanded(_sce(23), _knows_all_but("LogSoftmax"))


def test_nodes_in_subgraphs_are_expanded():
    """An RMSNormalization inside an If branch."""
    norm = oh.make_node("RMSNormalization", ["x", "scale"], ["normed"], name="rms")
    then = oh.make_graph([norm], "then", [], [oh.make_tensor_value_info("normed", F32, None)])
    other = oh.make_graph([oh.make_node("Identity", ["x"], ["same"])], "else", [],
                          [oh.make_tensor_value_info("same", F32, None)])
    node = oh.make_node("If", ["cond"], ["y"], name="branch", then_branch=then,
                        else_branch=other)
    model = _model([node], [("cond", TensorProto.BOOL, []), ("x", F32, [2, 4]),
                            ("scale", F32, [4])], [("y", F32)], 23)
    ir = Ir.from_onnx(model)
    branch = ir.graph("branch.then_branch")
    assert "ReduceMean" in {op.type.name for op in branch.ops}
    assert ir.main_graph.outputs[0].shape == (2, 4)
    feeds = _feeds(model)
    expanded = _expanded(model)
    for cond in (True, False):
        feeds["cond"] = np.array(cond)
        np.testing.assert_allclose(ReferenceEvaluator(expanded).run(None, feeds)[0],
                                   ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-6)


def test_a_local_function_calling_a_function_op():
    """The model's own functions are inlined first (``onnx.inliner``); the schema function
    they call is then expanded."""
    body = oh.make_function("local", "Norm", ["a", "s"], ["b"],
                            [oh.make_node("RMSNormalization", ["a", "s"], ["b"])],
                            [oh.make_opsetid("", 23)])
    node = oh.make_node("Norm", ["x", "scale"], ["y"], domain="local", name="norm")
    model = _model([node], [("x", F32, [2, 3, 8]), ("scale", F32, [8])], [("y", F32)], 23,
                   functions=[body])
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(fold_all(Ir.from_onnx(model), feeds)[0], want, rtol=1e-5)


def test_placement_is_copied_to_the_body():
    model = _rms()
    model.graph.node[0].attribute.append(oh.make_attribute("__ipu_number", 1))
    ir = Ir.from_onnx(model)
    assert {op.settings.vgraph_id for op in ir.main_graph.ops} == {1}


def test_an_op_without_a_function_is_still_refused_by_name():
    node = oh.make_node("Unique", ["x"], ["y"], name="uniq")
    model = _model([node], [("x", F32, [6])], [("y", F32)], 23)
    with pytest.raises(UnsupportedModelError, match=r"Unique \(node 'uniq'\); check"):
        Ir.from_onnx(model)


def test_a_body_that_needs_unknown_input_types_keeps_the_refusal():
    """Attention's body is built for its input types; fed by an op of a custom domain
    whose result ONNX cannot type, it cannot be built, and the refusal names it."""
    nodes = [oh.make_node("Foo", ["x"], ["q"], domain="com.example", name="foo"),
             oh.make_node("Attention", ["q", "q", "q"], ["y"], name="attn")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F32, [1, 2, 3, 4])],
                          [oh.make_tensor_value_info("y", F32, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 23),
                                                oh.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedModelError,
                       match=r"Attention \(node 'attn'; ONNX defines it by a function body, "
                             r"not expanded: .* the element type or rank of 'q' is unknown\)"):
        Ir.from_onnx(model)


def test_rules_alone_type_a_body_fed_by_graph_inputs():
    """Without ONNX's inference the declared input types still let the body be built."""
    with onnx_inference_unavailable():
        ir = Ir.from_onnx(_attention())
    assert ir.main_graph.outputs[0].shape == (2, 3, 16)


def test_a_constant_node_types_a_body_input_without_onnx_inference():
    """Attention's mask made by a Constant node: its type is read off the node."""
    model = _attention()
    mask = model.graph.initializer.pop()
    model.graph.node.insert(0, oh.make_node("Constant", [], ["mask"], value=mask))
    with onnx_inference_unavailable():
        ir = Ir.from_onnx(model)
    assert ir.main_graph.outputs[0].shape == (2, 3, 16)
    feeds = _feeds(model)
    np.testing.assert_allclose(fold_all(ir, feeds)[0],
                               ReferenceEvaluator(model).run(None, feeds)[0], rtol=1e-5,
                               atol=1e-6)


def test_a_local_function_of_another_opset_is_expanded_at_its_own():
    """``onnx.inliner`` leaves a call to a local function written for another opset; the
    expansion takes it, typing its ops at the function's opset: ReduceMean with an ``axes``
    attribute (opset 13), in a model of opset 23, where ``axes`` is an input; the attribute
    reference resolves to the call's value."""
    axes = oh.make_attribute_ref("axes", onnx.AttributeProto.INTS)
    reduce = oh.make_node("ReduceMean", ["a"], ["m"], keepdims=1)
    reduce.attribute.append(axes)
    body = oh.make_function("local", "Centre", ["a"], ["b"],
                            [reduce, oh.make_node("Sub", ["a", "m"], ["b"])],
                            [oh.make_opsetid("", 13)], attributes=["axes"])
    node = oh.make_node("Centre", ["x"], ["y"], domain="local", name="centre", axes=[1])
    model = _model([node], [("x", F32, [2, 3, 4])], [("y", F32)], 23, functions=[body])
    ir = Ir.from_onnx(model)
    reduce_op = next(op for op in ir.main_graph.ops if op.type.name == "ReduceMean")
    assert reduce_op.type.version == 13 and reduce_op.name == "centre/ReduceMean_0"
    feeds = _feeds(model)
    x = feeds["x"]
    np.testing.assert_allclose(fold_all(ir, feeds)[0], x - x.mean(axis=1, keepdims=True),
                               rtol=1e-6)
