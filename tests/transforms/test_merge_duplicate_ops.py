"""MergeDuplicateOps: the same computation on the same tensors happens once."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transform_testing import TEST_OPS, add_op, call, chain_ir, evaluate, identity_subgraph, out

from popart_unwind import transforms
from popart_unwind.ir import Ir

MERGE = transforms.MergeDuplicateOps(op_registry=TEST_OPS)
apply = transforms.registry.apply


def two_consumers(first: dict, second: dict, type_name="Relu", domain="ai.onnx"):
    """x feeds two ``type_name`` ops (attributes and settings from ``first``/``second``),
    each read by a Neg; the model's output adds the two Negs."""
    ir = Ir()
    main = ir.main_graph
    x = main.add_input("x", "float32", (2, 3))
    ops, negs = [], []
    for spec in (dict(first), dict(second)):
        attributes = spec.pop("attributes", None)
        ops.append(add_op(main, type_name, [x], attributes=attributes, domain=domain, **spec))
        negs.append(out(add_op(main, "Neg", [out(ops[-1])])))
    main.mark_output(out(add_op(main, "Add", negs)))
    return ir, ops


def test_duplicates_merge_into_the_lowest_id_op():
    ir, (first, _) = two_consumers({}, {})
    main = ir.main_graph
    assert apply(MERGE, main) is True
    assert [op.type.name for op in main.ops] == ["Relu", "Neg", "Add"]
    assert main.ops[0] is first
    (add,) = [op for op in main.ops if op.is_type("Add")]
    assert add.input(0) is add.input(1)  # the two Negs merged as well
    ir.verify()
    assert apply(MERGE, main) is False


@pytest.mark.parametrize(("first", "second"), [
    ({"attributes": {"alpha": 1.0}}, {"attributes": {"alpha": 2.0}}),
    ({"attributes": {"flag": True}}, {"attributes": {"flag": 1}}),
    ({"attributes": {"axes": np.array([0, 1])}}, {"attributes": {"axes": np.array([1, 0])}}),
    ({"attributes": {"axes": np.array([0, 1], np.int64)}},
     {"attributes": {"axes": np.array([0, 1], np.int32)}}),
    ({"attributes": {"alpha": 1.0}}, {}),
    ({"vgraph_id": 0}, {"vgraph_id": 1}),
    ({"pipeline_stage": 0}, {}),
    ({"execution_phase": 1}, {"execution_phase": 2}),
])
def test_ops_differing_in_attributes_or_placement_stay_apart(first, second):
    ir, _ = two_consumers(first, second)
    assert apply(MERGE, ir.main_graph) is False
    assert len(ir.main_graph.ops) == 5


@pytest.mark.parametrize("value", [np.array([[1.5, 2.0]]), [1, [2, 3]], {"k": (1, 2)},
                                   math.nan, np.float32(0.5), "same"])
def test_attributes_compare_by_value(value):
    copy = value.copy() if isinstance(value, np.ndarray) else value
    ir, _ = two_consumers({"attributes": {"a": value}}, {"attributes": {"a": copy}})
    assert apply(MERGE, ir.main_graph) is True


def test_attributes_that_cannot_be_compared_by_value_prevent_merging():
    ir, _ = two_consumers({"attributes": {"a": object()}}, {"attributes": {"a": object()}})
    assert apply(MERGE, ir.main_graph) is False


def test_names_and_scopes_do_not_matter():
    ir, _ = two_consumers({"name": "one", "scope": "a"}, {"name": "two", "scope": "b"})
    assert apply(MERGE, ir.main_graph) is True


@pytest.mark.parametrize(("name", "domain"), [("Print", "ai.onnx"),
                                              ("MyCustomOp", "com.example"),
                                              ("ReluInplace", "ai.onnx"),
                                              ("RandomNormalLike", "ai.onnx")])
def test_side_effecting_opaque_inplace_and_random_ops_never_merge(name, domain):
    ir, _ = two_consumers({}, {}, type_name=name, domain=domain)
    assert apply(MERGE, ir.main_graph) is False
    assert [op.type.name for op in ir.main_graph.ops].count(name) == 2


def test_ops_calling_graphs_never_merge():
    ir = chain_ir()
    main = ir.main_graph
    sub = identity_subgraph(ir, "sub", n_inputs=1)
    calls = [call(main, sub, [main.inputs[0]]).output(0) for _ in range(2)]
    main.mark_output(out(add_op(main, "Add", calls)))
    assert apply(MERGE, main) is False


def test_inputs_must_match_index_by_index():
    ir = Ir()
    main = ir.main_graph
    x, y = main.add_input("x", "float32", (2,)), main.add_input("y", "float32", (2,))
    main.mark_output(out(add_op(main, "Add", [x, y], shape=(2,))))
    main.mark_output(out(add_op(main, "Add", [y, x], shape=(2,))))
    assert apply(MERGE, main) is False


def test_a_chain_of_duplicates_collapses_in_one_application():
    ir = Ir()
    main = ir.main_graph
    x = main.add_input("x", "float32", (2, 3))
    w = main.add_variable("w", np.ones((2, 3), np.float32))
    ends = []
    for _ in range(3):
        t = out(add_op(main, "Relu", [x]))
        t = out(add_op(main, "Mul", [t, w]))
        t = out(add_op(main, "Neg", [t]))
        ends.append(out(add_op(main, "Add", [t, x])))
    main.mark_output(out(add_op(main, "Mul", ends[1:])))
    for end in ends[:1]:
        main.mark_output(end)
    assert apply(MERGE, main) is True
    assert [op.type.name for op in main.ops] == ["Relu", "Mul", "Neg", "Add", "Mul"]
    assert apply(MERGE, main) is False


def test_a_graph_output_keeps_its_producer_and_its_name():
    ir = Ir()
    main = ir.main_graph
    x = main.add_input("x", "float32", (2, 3))
    internal = add_op(main, "Relu", [x])
    exported = add_op(main, "Relu", [x])
    main.mark_output(out(add_op(main, "Neg", [out(internal)])))
    main.mark_output(out(exported))
    exported_id = out(exported).id
    assert apply(MERGE, main) is True
    assert [op.id for op in main.ops if op.is_type("Relu")] == [exported.id]
    assert main.output_ids[1] == exported_id


def test_two_graph_outputs_are_both_kept():
    ir = Ir()
    main = ir.main_graph
    x = main.add_input("x", "float32", (2, 3))
    for _ in range(2):
        main.mark_output(out(add_op(main, "Relu", [x])))
    assert apply(MERGE, main) is False


def test_duplicates_merge_inside_subgraphs_too():
    ir = chain_ir()
    sub = identity_subgraph(ir, "sub", n_inputs=1)
    sub.mark_output(out(add_op(sub, "Neg", [out(add_op(sub, "Relu", [sub.inputs[0]]))])))
    assert apply(MERGE, ir.main_graph) is True
    assert [op.type.name for op in sub.ops] == ["Relu", "Neg"]


def test_merging_preserves_every_condition_under_checking():
    placed = {"vgraph_id": 1, "pipeline_stage": 0, "execution_phase": 0,
              "batch_serialized_phase": 0}
    ir, _ = two_consumers(dict(placed), dict(placed))
    assert transforms.registry.apply(MERGE, ir, check=True) is True


# -- property: merging changes no value and leaves no duplicate --------------------------
@st.composite
def graphs_with_duplicates(draw):
    ir = Ir()
    main = ir.main_graph
    tensors = [main.add_input("x", "float32", (4,)), main.add_input("y", "float32", (4,))]
    for _ in range(draw(st.integers(1, 14))):
        name = draw(st.sampled_from(["Add", "Mul", "Relu", "Neg"]))
        arity = 2 if name in ("Add", "Mul") else 1
        pool = tensors[:2] + tensors[-3:]  # recent tensors: many repeated computations
        inputs = [draw(st.sampled_from(pool)) for _ in range(arity)]
        tensors.append(out(add_op(main, name, inputs, shape=(4,))))
    for tensor in draw(st.lists(st.sampled_from(tensors[2:]), min_size=1, max_size=4)):
        main.mark_output(tensor)
    return ir


@settings(max_examples=60, deadline=None)
@given(graphs_with_duplicates(), st.integers(0, 2**31))
def test_merging_keeps_every_output_value_and_leaves_no_duplicates(ir, seed):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.normal(size=4), "y": rng.normal(size=4)}
    main = ir.main_graph
    before = evaluate(main, feeds)
    apply(MERGE, main)
    ir.verify()
    for got, want in zip(evaluate(main, feeds), before, strict=True):
        np.testing.assert_array_equal(got, want)
    keys = [(op.type.name, tuple(t.id for t in op.inputs)) for op in main.ops
            if not any(t.is_graph_output() for t in op.outputs)]
    assert len(keys) == len(set(keys))
    assert apply(MERGE, main) is False
