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
