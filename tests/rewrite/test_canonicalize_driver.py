"""The greedy driver: fixpoints, caps, lying patterns, and the global rules."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_cases import expected_types, import_every_way, node_cases, output_types

from popart_unwind.errors import CanonicalizationError
from popart_unwind.ir import Ir, OpType
from popart_unwind.ops import REGISTRY, OpDef, OpRegistry
from popart_unwind.rewrite import Pattern, Rewriter, canonicalize, pattern

TEST = "test"


def make(graph, name, inputs, attributes=None, *, version=13, domain="ai.onnx", registry=None):
    registry = registry or REGISTRY
    op = graph.create_op(OpType(domain, name, version), inputs, 1, attributes)
    for tensor, (dtype, shape) in zip(op.outputs, registry.lookup(op).infer(op), strict=True):
        tensor.dtype, tensor.shape = dtype, tuple(shape)
    return op


def _same(op):
    return [(op.input(0).dtype, op.input(0).shape)]


def registry_with(*patterns, side_effects=False, fold=None):
    """A registry of one test op type, ``test.Op``, carrying ``patterns``."""
    registry = OpRegistry()
    registry.register(OpDef("Op", domain=TEST, infer=_same, patterns=tuple(patterns),
                            side_effects=side_effects, fold=fold))
    return registry


def one_op_graph(registry, attributes=None):
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "float32", (2,))
    op = make(graph, "Op", ["x"], attributes, domain=TEST, registry=registry)
    graph.mark_output(op.output(0))
    return ir, op


# -- fixpoints ----------------------------------------------------------------------------
def transposes_ir():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    once = make(graph, "Transpose", [x], {"perm": [1, 0]}).output(0)
    graph.mark_output(make(graph, "Transpose", [once], {"perm": [1, 0]}).output(0))
    return ir


def test_a_rewriter_handed_in_makes_and_records_every_change():
    ir = transposes_ir()
    rewriter = Rewriter(REGISTRY)
    stats = canonicalize(ir, REGISTRY, rewriter=rewriter)
    assert stats.changed and rewriter.changes >= stats.rewrites > 0
    # the output keeps its id: one Identity of x holds it
    [holder] = ir.main_graph.ops
    assert holder.is_type("Identity") and holder.input(0).id == "x"
    assert ir.main_graph.output_ids == ["Transpose1:0"]
    again = Rewriter(REGISTRY)
    assert not canonicalize(ir, REGISTRY, rewriter=again).changed and again.changes == 0


def test_a_rewriter_with_another_op_registry_is_refused():
    ir = transposes_ir()
    before = ir.to_json()
    with pytest.raises(CanonicalizationError, match="must use the op registry"):
        canonicalize(ir, REGISTRY, rewriter=Rewriter(OpRegistry()))
    assert ir.to_json() == before


def test_a_chain_of_transposes_reaches_a_fixpoint_in_few_iterations():
    ir = Ir()
    graph = ir.main_graph
    tensor = graph.add_input("x", "float32", (2, 3, 4))
    for perm in ([1, 0, 2], [2, 0, 1], [0, 2, 1], [1, 2, 0], [2, 1, 0]):
        tensor = make(graph, "Transpose", [tensor], {"perm": perm}).output(0)
    graph.mark_output(tensor)
    stats = canonicalize(ir, REGISTRY, test_convergence=True)
    assert stats.converged and stats.changed and stats.iterations <= 3
    [op] = graph.ops
    expected = np.arange(24).reshape(2, 3, 4)
    for perm in ([1, 0, 2], [2, 0, 1], [0, 2, 1], [1, 2, 0], [2, 1, 0]):
        expected = np.transpose(expected, perm)
    got = np.transpose(np.arange(24).reshape(2, 3, 4), op.attributes["perm"])
    assert np.array_equal(got, expected)
    ir.verify()


def test_a_dead_chain_goes_in_one_iteration():
    ir = Ir()
    graph = ir.main_graph
    tensor = graph.add_input("x", "float32", (3,))
    for _ in range(20):
        tensor = make(graph, "Relu", [tensor]).output(0)
    stats = canonicalize(ir, REGISTRY)
    assert not graph.ops and stats.iterations == 1 and stats.applied == (("dead-code", 20),)


def test_a_clean_graph_is_left_alone():
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "float32", (3,))
    graph.mark_output(make(graph, "Relu", ["x"]).output(0))
    before = ir.to_json(include_data=True)
    stats = canonicalize(ir, REGISTRY)
    assert (stats.changed, stats.iterations, stats.rewrites, stats.converged) == (
        False, 1, 0, True)
    assert ir.to_json(include_data=True) == before


# -- lying and cycling patterns -----------------------------------------------------------
def test_a_pattern_claiming_success_without_change_is_detected():
    @pattern("Op", name="liar")
    def liar(op, rewriter):
        return True

    ir, _ = one_op_graph(registry_with(liar))
    with pytest.raises(CanonicalizationError, match=r"'liar' reported success on op Op#0"):
        canonicalize(ir, registry_with(liar))


def test_a_pattern_changing_without_claiming_success_is_detected():
    class Silent(Pattern):
        name, op_types = "silent", ("Op",)

        def match_and_rewrite(self, op, rewriter):
            rewriter.set_attribute(op, "touched", 1)
            return False

    registry = registry_with(Silent())
    ir, _ = one_op_graph(registry)
    with pytest.raises(CanonicalizationError, match=r"'silent' changed the IR at op Op#0"):
        canonicalize(ir, registry)


def test_a_pattern_raising_a_python_error_is_named():
    @pattern("Op", name="broken")
    def broken(op, rewriter):
        return op.attributes["missing"]

    registry = registry_with(broken)
    ir, _ = one_op_graph(registry)
    with pytest.raises(CanonicalizationError, match=r"broken failed on op Op#0: KeyError"):
        canonicalize(ir, registry)


@pattern("Op", name="flip-on")
def _flip_on(op, rewriter):
    if op.attributes.get("state") != 0:
        return False
    rewriter.set_attribute(op, "state", 1)
    return True


@pattern("Op", name="flip-off")
def _flip_off(op, rewriter):
    if op.attributes.get("state") != 1:
        return False
    rewriter.set_attribute(op, "state", 0)
    return True


def test_a_cycling_pair_of_patterns_hits_the_iteration_cap():
    registry = registry_with(_flip_on, _flip_off)
    ir, _ = one_op_graph(registry, {"state": 0})
    stats = canonicalize(ir, registry, max_iterations=6)
    assert not stats.converged and stats.iterations == 6 and stats.rewrites == 6
    assert stats.applied == (("flip-off", 3), ("flip-on", 3))
    ir, _ = one_op_graph(registry, {"state": 0})
    with pytest.raises(CanonicalizationError, match=r"iteration cap \(10\).*flip-(on|off) on Op#0"):
        canonicalize(ir, registry, test_convergence=True)


def test_the_rewrite_cap_stops_the_driver():
    registry = registry_with(_flip_on, _flip_off)
    ir, _ = one_op_graph(registry, {"state": 0})
    stats = canonicalize(ir, registry, max_iterations=100, max_rewrites=4)
    assert not stats.converged and stats.rewrites == 4
    with pytest.raises(CanonicalizationError, match=r"rewrite cap \(4\)"):
        canonicalize(ir, registry, max_rewrites=4, test_convergence=True)


def test_caps_must_be_positive():
    with pytest.raises(CanonicalizationError, match="max_iterations"):
        canonicalize(Ir(), REGISTRY, max_iterations=0)


def test_a_pattern_breaking_the_output_shape_is_caught():
    @pattern("Transpose", name="bad-perm")
    def bad_perm(op, rewriter):
        if op.attributes["perm"] == [1, 0]:
            return False
        rewriter.set_attribute(op, "perm", [1, 0])
        return True

    registry = OpRegistry()
    registry.register(OpDef("Transpose", infer=REGISTRY.lookup(OpType("ai.onnx", "Transpose"))
                            .infer, patterns=(bad_perm,)))
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "float32", (2, 3))
    graph.mark_output(make(graph, "Transpose", ["x"], {"perm": [0, 1]}).output(0))
    with pytest.raises(CanonicalizationError, match="'bad-perm' changed op Transpose#0"):
        canonicalize(ir, registry)


def test_a_fold_giving_the_wrong_shape_is_caught():
    registry = registry_with(fold=lambda op, constants: [np.zeros((5,), np.float32)])
    ir, _ = one_op_graph(registry)
    with pytest.raises(CanonicalizationError, match=r"\(float32 \(2,\)\) cannot be replaced"):
        canonicalize(ir, registry)


def shape_operand_ir(output_shape):
    """x (2, 3, 4) reshaped to ``Shape(y)`` of a y (6, 4), then passed on by an Identity to
    an output typed ``output_shape``: the reshape's shape is unknown until Shape folds."""
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3, 4))
    y = graph.add_input("y", "float32", (6, 4))
    target = make(graph, "Shape", [y]).output(0)
    reshape = graph.create_op(OpType("ai.onnx", "Reshape", 13), [x, target], 1)
    reshaped = reshape.output(0)
    reshaped.dtype = "float32"  # typed by dtype only, as inference leaves it
    identity = graph.create_op(OpType("ai.onnx", "Identity", 13), [reshaped], 1)
    out = identity.output(0)
    out.dtype, out.shape = "float32", output_shape
    graph.mark_output(out)
    return ir, out.id


def test_an_output_whose_shape_waits_for_a_fold_is_typed_before_it_is_replaced():
    ir, name = shape_operand_ir((6, 4))
    stats = canonicalize(ir, REGISTRY, test_convergence=True)
    graph = ir.main_graph
    [op] = graph.ops
    assert op.type.name == "Reshape" and op.input(1).data.tolist() == [6, 4]
    assert graph.output_ids == [name] and graph.outputs[0].shape == (6, 4)
    assert dict(stats.applied)["type-outputs"] == 1


def test_a_replacement_contradicting_a_typed_output_is_still_refused():
    ir, _ = shape_operand_ir((4, 6))
    with pytest.raises(CanonicalizationError, match=r"\(float32 \(4, 6\)\) cannot be replaced"):
        canonicalize(ir, REGISTRY)


@pytest.mark.parametrize(("module", "name"), [
    ("softmax_cross_entropy_loss", "test_sce_none_log_prob_expanded"),
    ("softmax_cross_entropy_loss", "test_sce_mean_weight_ii_4d_log_prob_expanded"),
    ("softmax_cross_entropy_loss", "test_sce_NCd1d2d3d4d5_mean_weight_log_prob_expanded"),
    ("attention", "test_attention_4d_gqa_causal_nonpad_decode_expanded"),
])
def test_expanded_onnx_losses_and_attention_canonicalize_keeping_their_outputs(module, name):
    case = node_cases(module)[name]
    for ir in import_every_way(case.model):
        canonicalize(ir, REGISTRY)
        assert ir.main_graph.output_ids == [o.name for o in case.model.graph.output]
        assert output_types(ir) == expected_types(case)


# -- global rules -------------------------------------------------------------------------
def test_dead_code_keeps_side_effecting_and_opaque_ops_and_graph_outputs():
    registry = OpRegistry()
    registry.register(OpDef("Pure", domain=TEST, infer=_same))
    registry.register(OpDef("Effect", domain=TEST, infer=_same, side_effects=True))
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "float32", (2,))
    make(graph, "Pure", ["x"], domain=TEST, registry=registry)
    effect = make(graph, "Effect", ["x"], domain=TEST, registry=registry)
    opaque = graph.create_op(OpType(TEST, "Unknown"), ["x"])
    kept = make(graph, "Pure", ["x"], domain=TEST, registry=registry)
    graph.mark_output(kept.output(0))
    canonicalize(ir, registry)
    assert graph.ops == [effect, opaque, kept]


def test_equal_constants_are_uniqued_and_the_spare_removed():
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "float32", (3,))
    a = graph.add_constant("a", np.arange(3, dtype=np.float32))
    graph.add_constant("b", np.arange(3, dtype=np.float32))
    graph.add_constant("c", np.arange(3, dtype=np.float64))
    first = make(graph, "Sub", ["x", "a"])
    second = make(graph, "Sub", ["x", "b"])
    graph.mark_output(first.output(0))
    graph.mark_output(second.output(0))
    graph.mark_output("c")
    stats = canonicalize(ir, REGISTRY)
    assert second.input(1) is a and not graph.has_tensor("b") and graph.has_tensor("c")
    assert dict(stats.applied)["unique-constants"] == 1


def test_unused_constants_are_dead():
    ir = Ir()
    graph = ir.main_graph
    graph.add_constant("unused", np.ones(2, np.float32))
    graph.add_variable("weight", np.ones(2, np.float32))
    canonicalize(ir, REGISTRY)
    assert [t.id for t in graph.tensors] == ["weight"]


def test_constant_operands_of_commutative_ops_move_right():
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "float32", (3,))
    const = graph.add_constant("c", np.full(3, 2, np.float32))
    add = make(graph, "Add", [const, "x"])
    sub = make(graph, "Sub", [const, "x"])
    for op in (add, sub):
        graph.mark_output(op.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert [t.id for t in add.inputs] == ["x", "c"]
    assert [t.id for t in sub.inputs] == ["c", "x"]


def test_constant_ops_become_const_tensors_and_fold_onwards():
    ir = Ir()
    graph = ir.main_graph
    graph.add_input("x", "float32", (3,))
    two = make(graph, "Constant", [], {"value": np.full(3, 2, np.float32)})
    three = make(graph, "Constant", [], {"value_float": 3.0})
    total = make(graph, "Add", [two.output(0), three.output(0)])
    out = make(graph, "Mul", ["x", total.output(0)])
    graph.mark_output(out.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert graph.ops == [out]
    assert np.array_equal(out.input(1).data, np.full(3, 5, np.float32))
    assert out.input(1).id.startswith("Folded___")


def test_subgraph_inputs_and_outputs_are_kept():
    ir = Ir()
    body = ir.create_graph("body")
    body.add_input("body/x", "float32", (2,))
    body.add_input("body/unused", "float32", (2,))
    ident = make(body, "Identity", ["body/x"])
    body.mark_output(ident.output(0))
    main = ir.main_graph
    main.add_input("x", "float32", (2,))
    call = main.create_op(OpType("ai.graphcore", "Call"), ["x", "x"], 1, {"callee": "body"})
    call.output(0).shape = (2,)
    main.mark_output(call.output(0))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert body.input_ids == ["body/x", "body/unused"] and body.output_ids == ["body/x"]
    assert not body.ops and main.ops == [call]
    ir.verify()


def test_bottom_up_reaches_the_same_graph():
    def build():
        ir = Ir()
        graph = ir.main_graph
        tensor = graph.add_input("x", "float32", (2, 3))
        zero = graph.add_constant("zero", np.zeros((), np.float32))
        tensor = make(graph, "Add", [zero, tensor]).output(0)
        tensor = make(graph, "Transpose", [tensor], {"perm": [1, 0]}).output(0)
        tensor = make(graph, "Transpose", [tensor], {"perm": [1, 0]}).output(0)
        graph.mark_output(make(graph, "Relu", [tensor]).output(0))
        return ir

    top, bottom = build(), build()
    canonicalize(top, REGISTRY, test_convergence=True)
    canonicalize(bottom, REGISTRY, top_down=False, test_convergence=True)
    assert top.to_json(include_data=True) == bottom.to_json(include_data=True)
    assert [op.type.name for op in top.main_graph.ops] == ["Relu"]
