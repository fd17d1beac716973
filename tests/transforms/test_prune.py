"""Prune: what the outputs and side effects need stays; everything else goes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transform_testing import TEST_OPS, add_op, call, chain_ir, identity_subgraph, out

from popart_unwind import transforms
from popart_unwind.errors import TransformError
from popart_unwind.ir import Ir, TensorType

Prune = transforms.Prune
PRUNE = Prune(op_registry=TEST_OPS)
apply = transforms.registry.apply


def op_names(graph):
    return [op.type.name for op in graph.ops]


def test_a_dead_branch_and_what_only_it_reads_are_removed():
    ir = chain_ir()
    main = ir.main_graph
    bias = main.add_variable("bias", np.zeros((2, 3), np.float32))
    table = main.add_constant("table", np.ones((2, 3), np.float32))
    dead = add_op(main, "Mul", [main.ops[0].output(0), bias])
    add_op(main, "Add", [out(dead), table])
    dead_id = out(dead).id
    assert apply(PRUNE, main) is True
    assert op_names(main) == ["Relu", "Add", "Neg"]
    assert not main.has_tensor("bias") and not main.has_tensor("table")
    assert not main.has_tensor(dead_id)
    ir.verify()
    assert apply(PRUNE, main) is False


def test_main_graph_inputs_and_streams_stay_even_when_unused():
    ir = chain_ir()
    main = ir.main_graph
    main.add_input("unused_input", "float32", (4,))
    main.add_tensor("stream", "float32", (4,), TensorType.STREAM)
    main.add_variable("unused_weight", np.zeros(4, np.float32))
    assert apply(PRUNE, main) is True
    assert main.has_tensor("unused_input") and main.has_tensor("stream")
    assert not main.has_tensor("unused_weight")


@pytest.mark.parametrize(("name", "domain"), [("Print", "ai.onnx"),
                                              ("MyCustomOp", "com.example"),
                                              ("ReluInplace", "ai.onnx")])
def test_ops_with_side_effects_stay_with_everything_they_read(name, domain):
    """Print is declared side-effecting; an opaque op is assumed to be; an in-place op
    modifies its input."""
    ir = chain_ir()
    main = ir.main_graph
    feeder = add_op(main, "Mul", [main.inputs[0], main.inputs[0]])
    effect = add_op(main, name, [out(feeder)], domain=domain)
    assert apply(PRUNE, main) is False
    assert main.op(effect.id) is effect and main.op(feeder.id) is feeder


def test_the_real_registry_treats_unknown_ops_as_side_effecting():
    ir = chain_ir()
    main = ir.main_graph
    add_op(main, "Opaque", [main.inputs[0]], domain="com.example")
    assert transforms.registry.apply("Prune", ir) is False


def test_subgraphs_are_pruned_inside_but_keep_their_inputs_and_outputs():
    ir = chain_ir()
    main = ir.main_graph
    sub = identity_subgraph(ir, "sub", n_inputs=2)
    add_op(sub, "Neg", [sub.inputs[0]])  # dead inside the subgraph
    op = call(main, sub, [main.outputs[0], main.inputs[0]])
    main.output_ids = [op.output(0).id]  # output 1 of the call is unused
    assert apply(PRUNE, main) is True
    assert op_names(sub) == ["Relu", "Relu"]
    assert len(sub.input_ids) == 2 and len(sub.output_ids) == 2
    assert len(op.outputs) == 2
    assert transforms.checks.call_site_violations(ir) == []


def test_graphs_no_longer_called_are_removed_with_the_graphs_only_they_call():
    ir = chain_ir()
    main = ir.main_graph
    inner = identity_subgraph(ir, "inner", n_inputs=1)
    outer = identity_subgraph(ir, "outer", n_inputs=1)
    call(outer, inner, [outer.inputs[0]])
    call(main, outer, [main.outputs[0]])  # its output is unused: the call is dead
    identity_subgraph(ir, "never_called", n_inputs=1)
    assert apply(PRUNE, main) is True
    assert [g.id for g in ir.graphs] == [""]
    assert transforms.helpers.unreachable_graphs(ir) == []


def test_a_call_whose_callee_has_side_effects_stays():
    ir = chain_ir()
    main = ir.main_graph
    sub = identity_subgraph(ir, "sub", n_inputs=1, op="Print")
    op = call(main, sub, [main.outputs[0]])
    assert apply(PRUNE, main) is False
    assert main.op(op.id) is op and ir.has_graph("sub")


def test_a_subgraph_calling_itself_is_removed_when_dead():
    ir = chain_ir()
    loop = identity_subgraph(ir, "self", n_inputs=1)
    call(loop, loop, [loop.inputs[0]])
    assert apply(PRUNE, ir.main_graph) is True
    assert not ir.has_graph("self")


def test_pruning_every_op_of_the_main_graph_is_an_error():
    ir = chain_ir()
    ir.main_graph.output_ids = []
    with pytest.raises(TransformError, match="every op of the main graph"):
        apply(PRUNE, ir.main_graph)


def test_prune_preserves_every_condition_under_checking():
    placed = {"vgraph_id": 0, "pipeline_stage": 1, "execution_phase": 0,
              "batch_serialized_phase": 0}
    ir = chain_ir(**placed)
    add_op(ir.main_graph, "Mul", [ir.main_graph.inputs[0]] * 2, **placed)
    assert transforms.registry.apply(PRUNE, ir, check=True) is True


# -- property: exactly the ops an output or a side effect depends on survive -------------
@st.composite
def random_graphs(draw):
    """A random DAG of unary/binary ops over two inputs, some Print ops, some outputs."""
    ir = Ir()
    main = ir.main_graph
    tensors = [main.add_input("x", "float32", (2,)), main.add_input("y", "float32", (2,))]
    for _ in range(draw(st.integers(1, 12))):
        name = draw(st.sampled_from(["Add", "Mul", "Relu", "Neg", "Print"]))
        arity = 2 if name in ("Add", "Mul") else 1
        inputs = [draw(st.sampled_from(tensors)) for _ in range(arity)]
        tensors.append(out(add_op(main, name, inputs, shape=(2,))))
    produced = tensors[2:]
    for tensor in draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3)):
        main.mark_output(tensor)
    return ir


def needed_op_ids(graph):
    """Independent oracle: ops from which an output or a Print op can be reached."""
    needed = set()
    changed = True
    while changed:
        changed = False
        for op in graph.ops:
            if op.id in needed:
                continue
            feeds_needed = any(c.id in needed for t in op.outputs for c in t.consumers)
            if op.is_type("Print") or feeds_needed \
                    or any(t.is_graph_output() for t in op.outputs):
                needed.add(op.id)
                changed = True
    return needed


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_prune_keeps_exactly_what_outputs_and_side_effects_need(ir):
    main = ir.main_graph
    expected = sorted(needed_op_ids(main))
    outputs, before = list(main.output_ids), len(main.ops)
    changed = apply(PRUNE, main)
    assert [op.id for op in main.ops] == expected
    assert main.output_ids == outputs
    assert changed is (len(expected) < before)
    ir.verify()
    assert apply(PRUNE, main) is False
