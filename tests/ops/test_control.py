"""Control-flow ops: Call, Loop, If and Scan take their shapes from the graphs they run, and
have side effects exactly when their bodies do."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import ShapeError
from popart_unwind.ir import GRAPHCORE_DOMAIN, Ir, OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.control import loop_trip_count, seed_callee_inputs
from popart_unwind.ops.shape_inference import infer_op, infer_shapes


def onnx_op(graph, name, inputs, attributes=None, outputs=1):
    return graph.create_op(OpType("ai.onnx", name, 18), inputs, outputs, attributes)


def doubling_body(ir, graph_id="body", shape=(2, 3)):
    body = ir.create_graph(graph_id)
    x = body.add_input("x", "float32", shape)
    add = onnx_op(body, "Add", [x, x])
    body.mark_output(add.output(0))
    return body


def test_call_takes_the_callees_output_types_and_checks_inputs():
    ir = Ir()
    doubling_body(ir)
    a = ir.main_graph.add_input("a", "float32", (2, 3))
    call = ir.main_graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), [a], 1, {"callee": "body"})
    assert infer_shapes(ir)
    assert (call.output(0).dtype, call.output(0).shape) == ("float32", (2, 3))
    b = ir.main_graph.add_input("b", "float32", (3, 2))
    wrong = ir.main_graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), [b], 1, {"callee": "body"})
    with pytest.raises(ShapeError, match="does not match"):
        infer_op(wrong)


def loop(ir, trip_count, cond_passes_through=True, scan=True, implicit=False):
    """Loop(M, cond, v): body (i, cond, v[, w]) -> (cond, v + v[ + w][, v])."""
    body = ir.create_graph("loop_body")
    body.add_input("i", "int64", ())
    cond_in = body.add_input("cond", "bool", ())
    v = body.add_input("v", "float32", None)  # typed from the call site
    inputs = [v, v]
    if implicit:
        inputs[1] = body.add_input("w", "float32", (4,))
    total = onnx_op(body, "Add", inputs).output(0)
    cond_out = (onnx_op(body, "Identity", [cond_in]).output(0) if cond_passes_through
                else onnx_op(body, "Not", [cond_in]).output(0))
    body.mark_output(cond_out)
    body.mark_output(total)
    if scan:
        body.mark_output(onnx_op(body, "Identity", [total]).output(0))
    main = ir.main_graph
    m = (main.add_constant("M", np.array(trip_count, np.int64)) if trip_count is not None
         else main.add_input("M", "int64", ()))
    v0 = main.add_input("v0", "float32", (4,))
    inputs = [m, None, v0] + ([main.add_input("w_outer", "float32", (4,))] if implicit else [])
    attributes = {"body": "loop_body"} | ({"num_implicit_inputs": 1} if implicit else {})
    return onnx_op(main, "Loop", inputs, attributes, outputs=2 if scan else 1)


@pytest.mark.parametrize("implicit", [False, True])
def test_loop_stacks_scan_outputs_when_the_trip_count_is_constant(implicit):
    ir = Ir()
    op = loop(ir, 5, implicit=implicit)
    infer_shapes(ir)
    assert ir.graph("loop_body").tensor("v").shape == (4,)  # typed from the call site
    assert [t.shape for t in op.outputs] == [(4,), (5, 4)]
    assert loop_trip_count(op) == 5
    ir.verify()


@pytest.mark.parametrize(("trip_count", "passes"), [(None, True), (5, False)])
def test_loop_scan_outputs_stay_undecided_without_a_known_trip_count(trip_count, passes):
    ir = Ir()
    op = loop(ir, trip_count, cond_passes_through=passes)
    infer_shapes(ir)
    assert loop_trip_count(op) is None
    assert [t.shape for t in op.outputs] == [(4,), None]
    op.output(1).shape = (3, 4)  # a seeded shape is kept
    infer_shapes(ir)
    assert op.output(1).shape == (3, 4)


def if_op(ir, else_shape=(3,), else_dtype="float32"):
    main = ir.main_graph
    cond = main.add_input("cond", "bool", ())
    a = main.add_input("a", "float32", (3,))
    b = main.add_input("b", else_dtype, else_shape)
    for name, source, shape, dtype in (("then", "a", (3,), "float32"),
                                       ("else", "b", else_shape, else_dtype)):
        branch = ir.create_graph(name)
        x = branch.add_input(source, dtype, shape)
        branch.mark_output(onnx_op(branch, "Neg", [x]).output(0))
    return onnx_op(main, "If", [cond, a, b], {
        "then_branch": "then", "else_branch": "else", "then_inputs": [[1, 0]],
        "else_inputs": [[2, 0]], "then_outputs": [[0, 0]], "else_outputs": [[0, 0]]})


def test_if_takes_the_branches_agreeing_shape():
    ir = Ir()
    op = if_op(ir)
    infer_shapes(ir)
    assert op.output(0).shape == (3,)
    ir.verify()


def test_if_with_branches_of_different_shapes_is_undecided_and_of_different_dtypes_an_error():
    ir = Ir()
    op = if_op(ir, else_shape=(4,))
    infer_shapes(ir)
    assert op.output(0).shape is None
    with pytest.raises(ShapeError, match="branches give float32 and int32"):
        infer_shapes(_fresh_if(else_dtype="int32"))


def _fresh_if(**kwargs):
    ir = Ir()
    if_op(ir, **kwargs)
    return ir


def scan(ir, xs_shape=(4, 7), axis=1, out_axis=0):
    body = ir.create_graph("scan_body")
    state = body.add_input("s", "float32", None)
    x_t = body.add_input("x_t", "float32", None)
    new_state = onnx_op(body, "Add", [state, x_t]).output(0)
    body.mark_output(new_state)
    body.mark_output(onnx_op(body, "Neg", [new_state]).output(0))
    main = ir.main_graph
    s0 = main.add_input("s0", "float32", (4,))
    xs = main.add_input("xs", "float32", xs_shape)
    return onnx_op(main, "Scan", [s0, xs], {"body": "scan_body", "num_scan_inputs": 1,
                                            "scan_input_axes": [axis],
                                            "scan_output_axes": [out_axis]}, outputs=2)


@pytest.mark.parametrize(("out_axis", "expected"), [(0, (7, 4)), (1, (4, 7)), (-1, (4, 7))])
def test_scan_slices_inputs_and_stacks_outputs_on_their_axes(out_axis, expected):
    ir = Ir()
    op = scan(ir, out_axis=out_axis)
    assert seed_callee_inputs(op)
    assert ir.graph("scan_body").tensor("x_t").shape == (4,)
    infer_shapes(ir)
    assert [t.shape for t in op.outputs] == [(4,), expected]


def test_side_effects_follow_the_body():
    ir = Ir()
    doubling_body(ir)
    a = ir.main_graph.add_input("a", "float32", (2, 3))
    call = ir.main_graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), [a], 1, {"callee": "body"})
    assert not REGISTRY.has_side_effects(call)
    body = ir.graph("body")
    body.create_op(OpType("custom", "Print"), [body.tensor("x")], 0)
    assert REGISTRY.has_side_effects(call)
    assert REGISTRY.has_side_effects(call)  # a predicate is truthy: never wrongly erased
