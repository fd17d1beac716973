"""Index maps between subgraph ops and their graphs, as PopART defines them for Call, Loop
and If, and as ONNX Scan lays out its states, scan inputs and implicit inputs."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import IrError
from popart_unwind.ir import GRAPHCORE_DOMAIN, Ir, OpType
from popart_unwind.ops.control import CallOp, IfOp, LoopOp, ScanOp


def graph_with(ir, graph_id, inputs, outputs):
    graph = ir.create_graph(graph_id)
    for name in inputs:
        graph.add_input(name, "float32", (2,))
    for name in outputs:
        graph.add_tensor(name, "float32", (2,))
        graph.mark_output(name)
    return graph


def maps(op, graph, op_ins, graph_ins, op_outs, graph_outs):
    return ([op.op_in_to_subgraph_in_index(graph, i) for i in range(op_ins)],
            [op.subgraph_in_to_op_in_index(graph, i) for i in range(graph_ins)],
            [op.op_out_to_subgraph_out_index(graph, i) for i in range(op_outs)],
            [op.subgraph_out_to_op_out_index(graph, i) for i in range(graph_outs)])


def outer_inputs(ir, count):
    return [ir.main_graph.add_input(f"in{i}", "float32", (2,)) for i in range(count)]


def test_call_maps_index_to_index():
    ir = Ir()
    callee = graph_with(ir, "f", ["a", "b"], ["r"])
    op = ir.main_graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), outer_inputs(ir, 2), 1,
                                 {"callee": "f"})
    assert isinstance(op, CallOp)
    assert maps(op, callee, 3, 2, 2, 1) == ([0, 1, None], [0, 1], [0, None], [0])


def test_loop_skips_the_body_condition_output_and_keeps_implicit_inputs_last():
    ir = Ir()
    body = graph_with(ir, "body", ["i", "cond", "v", "implicit"], ["cond_out", "v_out", "s"])
    main = ir.main_graph
    m = main.add_constant("M", np.array(3, np.int64))
    op = main.create_op(OpType("ai.onnx", "Loop", 18), [m, None, *outer_inputs(ir, 2)], 2,
                        {"body": "body", "num_implicit_inputs": 1})
    assert isinstance(op, LoopOp)
    ins, graph_ins, outs, graph_outs = maps(op, body, 4, 4, 2, 3)
    assert ins == [0, 1, 2, 3]  # op input 1 (cond) is absent, its index still maps
    assert graph_ins == [0, None, 2, 3]
    assert outs == [1, 2] and graph_outs == [None, 0, 1]


def test_if_maps_through_its_branch_tables():
    ir = Ir()
    then_graph = graph_with(ir, "then", ["b", "a"], ["t"])
    else_graph = graph_with(ir, "else", ["c"], ["e"])
    cond = ir.main_graph.add_input("cond", "bool", ())
    op = ir.main_graph.create_op(OpType("ai.onnx", "If", 18), [cond, *outer_inputs(ir, 3)], 1, {
        "then_branch": "then", "else_branch": "else", "then_inputs": [[1, 1], [2, 0]],
        "else_inputs": [[3, 0]], "then_outputs": [[0, 0]], "else_outputs": [[0, 0]]})
    assert isinstance(op, IfOp)
    assert maps(op, then_graph, 4, 2, 1, 1) == ([None, 1, 0, None], [2, 1], [0], [0])
    assert maps(op, else_graph, 4, 1, 1, 1) == ([None, None, None, 0], [3], [0], [0])


def test_scan_maps_index_to_index():
    ir = Ir()
    body = graph_with(ir, "body", ["s", "x_t", "implicit"], ["s_out", "y_t"])
    op = ir.main_graph.create_op(OpType("ai.onnx", "Scan", 18), outer_inputs(ir, 3), 2,
                                 {"body": "body", "num_scan_inputs": 1,
                                  "num_implicit_inputs": 1})
    assert isinstance(op, ScanOp)
    assert maps(op, body, 3, 3, 2, 2) == ([0, 1, 2], [0, 1, 2], [0, 1], [0, 1])


def test_maps_refuse_a_graph_the_op_does_not_call():
    ir = Ir()
    graph_with(ir, "f", ["a"], ["r"])
    other = graph_with(ir, "g", ["a"], ["r"])
    op = ir.main_graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), outer_inputs(ir, 1), 1,
                                 {"callee": "f"})
    with pytest.raises(IrError, match="does not call graph 'g'"):
        op.op_in_to_subgraph_in_index(other, 0)
