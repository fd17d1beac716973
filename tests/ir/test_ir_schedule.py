"""Schedules and errors of the IR core: topological, lowest op id first among ready ops,
typed errors naming what is wrong."""

from __future__ import annotations

import pytest

from popart_unwind.errors import IrError
from popart_unwind.ir import Ir, OpType


def op(graph, name, inputs):
    return graph.create_op(OpType("ai.onnx", name, 18), inputs, 1)


def test_schedule_is_topological_with_lowest_ready_id_first():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2,))
    late = op(graph, "Neg", [x])                  # id 0
    waits = op(graph, "Add", [x, x])              # id 1
    graph.disconnect_input(waits, 1)
    uses_late = op(graph, "Relu", [late.output(0)])  # id 2
    graph.connect_input(waits, 1, uses_late.output(0))
    assert [o.id for o in graph.schedule()] == [0, 2, 1]


def test_errors_name_the_missing_thing():
    ir = Ir()
    with pytest.raises(IrError, match="no tensor 'nope' in the main graph"):
        ir.main_graph.tensor("nope")
    with pytest.raises(IrError, match="no graph with id 'g'"):
        ir.graph("g")
    with pytest.raises(IrError, match="main graph cannot be removed"):
        ir.remove_graph("")
    ir.main_graph.add_input("x", "float32", (1,))
    with pytest.raises(IrError, match="already exists"):
        ir.main_graph.add_input("x", "float32", (1,))


def test_a_called_graph_cannot_be_removed():
    ir = Ir()
    body = ir.create_graph("body")
    body.mark_output(body.add_input("t", "float32", (1,)))
    x = ir.main_graph.add_input("x", "float32", (1,))
    ir.main_graph.create_op(OpType("ai.graphcore", "Call"), [x], 1, {"callee": "body"})
    with pytest.raises(IrError, match="still called by Call#0"):
        ir.remove_graph("body")


def test_inputs_and_outputs_read_in_index_order_however_they_were_connected():
    ir = Ir()
    graph = ir.main_graph
    xs = [graph.add_input(f"x{i}", "float32", (2,)) for i in range(4)]
    concat = graph.create_op(OpType("ai.onnx", "Concat", 18), [], 0)
    for index in (2, 0, 3, 1):
        graph.connect_input(concat, index, xs[index])
    assert [t.id for t in concat.inputs] == ["x0", "x1", "x2", "x3"]
    assert list(concat.input_map()) == [0, 1, 2, 3]
    graph.disconnect_input(concat, 1)
    graph.connect_input(concat, 1, xs[3])
    assert [t.id for t in concat.inputs] == ["x0", "x3", "x2", "x3"]
    for index in (1, 0):
        graph.create_output(concat, index, f"y{index}")
    assert [t.id for t in concat.outputs] == ["y0", "y1"]
    assert list(concat.output_map()) == [0, 1]
