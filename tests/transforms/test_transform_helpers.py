"""Helpers: placement inheritance, reserved names, reachability, call sites in step."""

import numpy as np
import pytest
from transform_testing import TEST_OPS, add_op, call, chain_ir, identity_subgraph, onnx, out

from popart_unwind import transforms
from popart_unwind.errors import IrError
from popart_unwind.ir import Ir, OpSettings, OpType
from popart_unwind.ir.names import TRANSFORM_PREFIX, reserved_id
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter

helpers = transforms.helpers
call_site_violations = transforms.checks.call_site_violations
LOOP = OpType("ai.onnx", "Loop", 13)
IF = OpType("ai.onnx", "If", 13)


def assert_in_step(ir):
    ir.verify(require_shapes=True)
    assert call_site_violations(ir) == []


def remove_subgraph_input(graph, index):
    """``helpers.remove_subgraph_input`` through a rewriter, which must record the change."""
    rewriter = Rewriter(REGISTRY)
    helpers.remove_subgraph_input(graph, index, rewriter)
    assert rewriter.changes > 0
    return rewriter


def remove_subgraph_output(graph, index):
    """``helpers.remove_subgraph_output`` through a rewriter, which must record the change."""
    rewriter = Rewriter(REGISTRY)
    helpers.remove_subgraph_output(graph, index, rewriter)
    assert rewriter.changes > 0
    return rewriter


# -- ops a transform creates (Rewriter.create_op), reserved ids ----------------------------
def test_created_ops_inherit_every_set_placement_attribute_and_the_scope():
    ir = chain_ir()
    main = ir.main_graph
    neighbour = main.ops[0]
    neighbour.settings = OpSettings(name="n", scope="block1", vgraph_id=2, execution_phase=5)
    op = Rewriter(REGISTRY).create_op(main, onnx("Neg"), [main.outputs[0]], like=neighbour)
    assert op.settings == OpSettings(scope="block1", vgraph_id=2, execution_phase=5)


def test_created_op_outputs_carry_the_transform_prefix_and_inferred_shapes():
    ir = chain_ir()
    main = ir.main_graph
    op = Rewriter(TEST_OPS).create_op(main, onnx("Relu"), [main.outputs[0]], like=main.ops[0],
                                      num_outputs=2)
    assert [t.id for t in op.outputs] == [f"{TRANSFORM_PREFIX}Relu{op.id}:0",
                                          f"{TRANSFORM_PREFIX}Relu{op.id}:1"]
    assert [t.shape for t in op.outputs] == [(2, 3), (2, 3)]


def test_created_op_shapes_wait_for_inference_when_an_input_shape_is_unknown():
    ir = chain_ir()
    main = ir.main_graph
    main.outputs[0].shape = None
    rewriter = Rewriter(TEST_OPS)
    op = rewriter.create_op(main, onnx("Relu"), [main.outputs[0]], like=main.ops[0])
    assert op.output(0).shape is None
    assert rewriter.changes == 1


def test_reserved_tensor_ids_are_fresh():
    main = Ir().main_graph
    first = reserved_id(main, TRANSFORM_PREFIX, "acc")
    main.add_constant(first, np.zeros(1))
    assert first == f"{TRANSFORM_PREFIX}acc"
    assert reserved_id(main, TRANSFORM_PREFIX, "acc") == f"{TRANSFORM_PREFIX}acc__1"


# -- reachability ------------------------------------------------------------------------
def test_reachability_follows_calls_through_nested_graphs_and_both_if_branches():
    ir = chain_ir()
    main = ir.main_graph
    inner = identity_subgraph(ir, "inner", n_inputs=1)
    outer = identity_subgraph(ir, "outer", n_inputs=1)
    call(outer, inner, [outer.inputs[0]])
    call(main, outer, [main.outputs[0]])
    identity_subgraph(ir, "then", n_inputs=0)
    identity_subgraph(ir, "else", n_inputs=0)
    identity_subgraph(ir, "dead", n_inputs=1)
    assert [g.id for g in helpers.reachable_graphs(ir)] == ["", "inner", "outer"]
    cond = main.add_constant("cond", np.array(True))
    main.create_op(IF, [cond], 0, {"then_branch": "then", "else_branch": "else",
                                   "then_inputs": [], "else_inputs": [],
                                   "then_outputs": [], "else_outputs": []})
    assert [g.id for g in helpers.unreachable_graphs(ir)] == ["dead"]
    assert [op.debug_name() for op in helpers.call_sites(ir.graph("inner"))] == \
        [op.debug_name() for op in ir.graph("outer").ops if op.is_type("Call")]


# -- Call sites --------------------------------------------------------------------------
def call_ir(n_calls=2):
    """Main calls ``sub`` (inputs a, b, c; outputs Relu(a), Neg(c), Relu(c)) n times."""
    ir = Ir()
    main = ir.main_graph
    sub = ir.create_graph("sub")
    a, _, c = (sub.add_input(f"sub/{n}", "float32", (2, 3)) for n in "abc")
    for name, source in (("Relu", a), ("Neg", c), ("Relu", c)):
        sub.mark_output(out(add_op(sub, name, [source])))
    xs = [main.add_input(f"x{i}", "float32", (2, 3)) for i in range(3)]
    sites = [call(main, sub, xs) for _ in range(n_calls)]
    for op in sites:
        main.mark_output(op.output(0))
        main.mark_output(op.output(2))
    return ir, sub, sites


def test_removing_a_call_subgraph_input_drops_and_renumbers_every_call_site():
    ir, sub, sites = call_ir()
    remove_subgraph_input(sub, 1)
    assert sub.input_ids == ["sub/a", "sub/c"]
    for op in sites:
        assert [(i, t.id) for i, t in op.input_map().items()] == [(0, "x0"), (1, "x2")]
    assert_in_step(ir)


def test_removing_a_call_subgraph_output_drops_and_renumbers_every_call_site():
    ir, sub, sites = call_ir()
    kept = [[op.output(0).id, op.output(2).id] for op in sites]
    remove_subgraph_output(sub, 1)
    assert len(sub.output_ids) == 2
    assert [[t.id for t in op.outputs] for op in sites] == kept
    assert_in_step(ir)


def test_a_used_input_or_output_is_not_removed():
    ir, sub, _ = call_ir()
    before = ir.to_json()
    with pytest.raises(IrError, match=r"input 0 .* is still used"):
        remove_subgraph_input(sub, 0)
    with pytest.raises(IrError, match=r"output 2 .* is still used"):
        remove_subgraph_output(sub, 2)
    assert ir.to_json() == before


def test_the_main_graph_interface_and_bad_indices_are_refused():
    ir, sub, _ = call_ir()
    with pytest.raises(IrError, match="interface"):
        remove_subgraph_input(ir.main_graph, 0)
    with pytest.raises(IrError, match="no output 7"):
        remove_subgraph_output(sub, 7)


# -- Loop sites --------------------------------------------------------------------------
def loop_ir():
    """A Loop carrying a and b, with an implicit input e the body ignores."""
    ir = Ir()
    main = ir.main_graph
    body = ir.create_graph("body")
    body.add_input("body/i", "int64", ())
    cond = body.add_input("body/cond", "bool", ())
    a, b = (body.add_input(f"body/{n}", "float32", (2, 3)) for n in "ab")
    body.add_input("body/e", "float32", (2, 3))
    body.mark_output(cond)
    body.mark_output(out(add_op(body, "Relu", [a])))
    body.mark_output(out(add_op(body, "Neg", [b])))
    trips = main.add_constant("trips", np.array(3, np.int64))
    keep_going = main.add_constant("keep_going", np.array(True))
    xs = [main.add_input(f"x{n}", "float32", (2, 3)) for n in "abe"]
    loop = main.create_op(LOOP, [trips, keep_going, *xs], 2, {"body": "body"})
    for tensor in loop.outputs:
        tensor.shape = (2, 3)
    main.mark_output(loop.output(0))
    return ir, body, loop


def test_loop_call_sites_follow_body_input_and_output_removal():
    ir, body, loop = loop_ir()
    assert_in_step(ir)
    remove_subgraph_input(body, 4)
    assert [t.id for t in loop.inputs] == ["trips", "keep_going", "xa", "xb"]
    remove_subgraph_output(body, 2)  # op output 1, unused
    assert [t.id for t in loop.outputs] == [f"Loop{loop.id}:0"]
    assert body.output_ids[0] == "body/cond" and len(body.output_ids) == 2
    assert_in_step(ir)


def test_loop_iteration_and_condition_slots_are_fixed():
    _, body, _ = loop_ir()
    with pytest.raises(IrError, match=r"input 0 .* belongs to its call site Loop"):
        remove_subgraph_input(body, 0)  # the iteration number
    with pytest.raises(IrError, match=r"output 0 .* belongs to its call site Loop"):
        remove_subgraph_output(body, 0)  # the continue condition


# -- If sites ----------------------------------------------------------------------------
def if_ir(then_reads=0):
    """If(cond, a, b): the then branch reads its input ``then_reads`` (a or b) and ignores
    the other; the else branch reads b; two outputs."""
    ir = Ir()
    main = ir.main_graph
    then, other = ir.create_graph("then"), ir.create_graph("else")
    then_ins = [then.add_input(f"then/{n}", "float32", (2, 3)) for n in "ab"]
    e_b = other.add_input("else/b", "float32", (2, 3))
    for graph, source in ((then, then_ins[then_reads]), (other, e_b)):
        graph.mark_output(out(add_op(graph, "Relu", [source])))
        graph.mark_output(out(add_op(graph, "Neg", [source])))
    cond = main.add_input("cond", "bool", ())
    a, b = main.add_input("a", "float32", (2, 3)), main.add_input("b", "float32", (2, 3))
    op = main.create_op(IF, [cond, a, b], 2, {
        "then_branch": "then", "else_branch": "else",
        "then_inputs": [[1, 0], [2, 1]], "else_inputs": [[2, 0]],
        "then_outputs": [[0, 0], [1, 1]], "else_outputs": [[0, 0], [1, 1]]})
    for tensor in op.outputs:
        tensor.shape = (2, 3)
    main.mark_output(op.output(1))
    return ir, then, other, op


def test_an_if_input_stays_while_the_other_branch_reads_it():
    ir, then, _, op = if_ir()
    assert_in_step(ir)
    remove_subgraph_input(then, 1)
    assert [t.id for t in op.inputs] == ["cond", "a", "b"]
    assert op.attributes["then_inputs"] == [[1, 0]]
    assert op.attributes["else_inputs"] == [[2, 0]]
    assert_in_step(ir)


def test_an_if_input_no_branch_reads_goes_and_the_maps_are_renumbered():
    ir, then, _, op = if_ir(then_reads=1)
    remove_subgraph_input(then, 0)
    assert [(i, t.id) for i, t in op.input_map().items()] == [(0, "cond"), (1, "b")]
    assert op.attributes["then_inputs"] == [[1, 0]]
    assert op.attributes["else_inputs"] == [[1, 0]]
    assert_in_step(ir)


def test_removing_an_if_branch_output_removes_the_op_output_from_both_maps():
    ir, then, other, op = if_ir()
    second = op.output(1).id
    remove_subgraph_output(then, 0)
    assert [t.id for t in op.outputs] == [second]
    assert op.attributes["then_outputs"] == [[0, 0]]
    assert op.attributes["else_outputs"] == [[0, 1]]
    assert len(other.output_ids) == 2
    assert_in_step(ir)


def test_checks_list_a_call_site_out_of_step():
    ir, sub, _ = call_ir(n_calls=1)
    sub.add_input("sub/d", "float32", (2, 3))
    (site,) = helpers.call_sites(sub)
    assert call_site_violations(ir) == [
        f"input 3 ('sub/d') of graph 'sub' is fed by no input of its call site "
        f"{site.debug_name()}"]
