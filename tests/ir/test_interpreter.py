"""The interpreter base every IR walk derives from: its two graph orders, its per-tensor
results, and the release of results no later op reads."""

from __future__ import annotations

import pytest

from popart_unwind.errors import IrError
from popart_unwind.ir import GRAPHCORE_DOMAIN, Ir, OpType
from popart_unwind.ir.interpreter import AT_FIRST_CALL, CALLEES_FIRST, Interpreter, key


def relu(graph, tensor, name):
    return graph.create_op(OpType("ai.onnx", "Relu", 18), [tensor], [name]).output(0)


def call(graph, callee, tensor, name):
    op = graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), [tensor], [name],
                         {"callee": callee.id})
    return op.output(0)


def nested_ir():
    """main: a = relu(x); b = call(outer, a); c = relu(b)
    outer: call(inner, relu(t)); inner: relu(u). A graph no one calls: spare."""
    ir = Ir()
    inner = ir.create_graph("inner")
    inner.mark_output(relu(inner, inner.add_input("u", "float32", (2,)), "inner/r"))
    outer = ir.create_graph("outer")
    t = outer.add_input("t", "float32", (2,))
    outer.mark_output(call(outer, inner, relu(outer, t, "outer/r"), "outer/c"))
    spare = ir.create_graph("spare")
    spare.mark_output(relu(spare, spare.add_input("s", "float32", (2,)), "spare/r"))
    main = ir.main_graph
    a = relu(main, main.add_input("x", "float32", (2,)), "a")
    main.mark_output(relu(main, call(main, outer, a, "b"), "c"))
    return ir


class Trace(Interpreter):
    """Records what the walk does; each op's result is the path of tensors leading to it."""

    def __init__(self, order):
        super().__init__()
        self.order = order
        self.events = []

    def placeholder(self, tensor):
        return tensor.id

    def enter_call(self, op, callee):
        self.events.append(f"enter {callee.id}")

    def run_op(self, op):
        self.events.append(op.output(0).id)
        self.write(op.output(0), f"{self.read(op.input(0))}>{op.output(0).id}")


def test_callees_first_walks_each_graph_after_the_graphs_it_calls():
    walk = Trace(CALLEES_FIRST)
    walk.run(nested_ir())
    assert walk.events == ["inner/r", "outer/r", "outer/c", "a", "b", "c", "spare/r"]


def test_at_first_call_enters_a_callee_just_before_its_first_call_site():
    walk = Trace(AT_FIRST_CALL)
    walk.run(nested_ir())
    assert walk.events == ["a", "enter outer", "outer/r", "enter inner", "inner/r",
                           "outer/c", "b", "c", "spare/r"]


def test_results_are_kept_per_tensor_and_read_back():
    walk = Trace(CALLEES_FIRST)
    ir = nested_ir()
    walk.run(ir)
    assert walk.env[("", "c")] == "x>a>b>c"
    assert walk.read(ir.main_graph.tensor("a")) == "x>a"
    assert walk.read(ir.graph("outer").tensor("outer/c")) == "t>outer/r>outer/c"


def test_released_results_leave_only_graph_outputs_and_placeholders():
    class Releasing(Trace):
        release_dead = True

        def __init__(self):
            super().__init__(CALLEES_FIRST)
            self.dropped = []

        def released(self, tensor_key):
            self.dropped.append(tensor_key)

    walk = Releasing()
    walk.run(nested_ir())
    assert sorted(walk.dropped) == [("", "a"), ("", "b"), ("outer", "outer/r")]
    assert set(walk.env) == {("", "x"), ("", "c"), ("inner", "u"), ("inner", "inner/r"),
                             ("outer", "t"), ("outer", "outer/c"), ("spare", "s"),
                             ("spare", "spare/r")}


def test_reading_a_tensor_without_a_result_names_it():
    ir = nested_ir()
    walk = Trace(CALLEES_FIRST)
    with pytest.raises(IrError, match="tensor 'u' of graph 'inner' is read before"):
        walk.read(ir.graph("inner").tensor("u"))
    assert key(ir.graph("inner").tensor("u")) == ("inner", "u")
