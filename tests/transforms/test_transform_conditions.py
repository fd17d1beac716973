"""The condition checker on hand-built IRs: each of PopART's conditions, and ours."""

import pytest
from transform_testing import add_op, chain_ir, identity_subgraph, out

from popart_unwind import transforms
from popart_unwind.ir import Ir

Condition = transforms.Condition
check_condition, check_conditions = transforms.check_condition, transforms.check_conditions

PLACEMENT = {Condition.VGRAPH: "vgraph_id", Condition.PSTAGE: "pipeline_stage",
             Condition.EPHASE: "execution_phase", Condition.BPHASE: "batch_serialized_phase"}
FULLY_PLACED = {"vgraph_id": 0, "pipeline_stage": 0, "execution_phase": 0,
                "batch_serialized_phase": 0}


def test_every_condition_holds_on_a_fully_placed_plain_model():
    assert check_conditions(chain_ir(**FULLY_PLACED)) == {c: [] for c in Condition}


def test_conditions_are_listed_in_seed_order_with_ours_last():
    assert [c.name for c in Condition] == ["NO_INPLACE", "NO_IPU_COPY", "NO_IMPLICIT_COPY",
                                           "VGRAPH", "PSTAGE", "EPHASE", "BPHASE",
                                           "SHAPES_KNOWN"]


def test_an_inplace_op_in_a_subgraph_breaks_no_inplace():
    ir = chain_ir()
    sub = ir.create_graph("sub")
    t = sub.add_input("sub/x", "float32", (2, 3))
    sub.mark_output(out(add_op(sub, "ReluInplace", [t])))
    violations = check_condition(ir, Condition.NO_INPLACE)
    assert len(violations) == 1
    assert "ReluInplace" in violations[0] and "'sub'" in violations[0]


def test_an_ipu_copy_anywhere_breaks_no_ipu_copy():
    ir = chain_ir()
    main = ir.main_graph
    copy = add_op(main, "IpuCopy", [main.outputs[0]], domain="ai.graphcore")
    assert check_condition(ir, Condition.NO_IPU_COPY) == [
        f"op {copy.debug_name()} is an IpuCopy"]


def implicit_copy_ir(copy_between: bool, consumer_vgraph=1):
    ir = Ir()
    main = ir.main_graph
    x = main.add_input("x", "float32", (2, 3))
    relu = add_op(main, "Relu", [x], vgraph_id=0)
    source = out(relu)
    if copy_between:
        source = out(add_op(main, "IpuCopy", [source], domain="ai.graphcore", vgraph_id=0))
    neg = add_op(main, "Neg", [source], vgraph_id=consumer_vgraph)
    main.mark_output(out(neg))
    return ir, neg


def test_reading_a_tensor_produced_on_another_ipu_is_an_implicit_copy():
    ir, neg = implicit_copy_ir(copy_between=False)
    (violation,) = check_condition(ir, Condition.NO_IMPLICIT_COPY)
    assert neg.debug_name() in violation and "virtual graph 1" in violation
    assert "virtual graph 0" in violation


def test_an_ipu_copy_makes_the_move_explicit():
    ir, _ = implicit_copy_ir(copy_between=True)
    assert check_condition(ir, Condition.NO_IMPLICIT_COPY) == []


def test_ops_on_the_same_ipu_or_unplaced_make_no_implicit_copy():
    assert check_condition(implicit_copy_ir(False, consumer_vgraph=0)[0],
                           Condition.NO_IMPLICIT_COPY) == []
    assert check_condition(implicit_copy_ir(False, consumer_vgraph=-1)[0],
                           Condition.NO_IMPLICIT_COPY) == []


@pytest.mark.parametrize("condition", list(PLACEMENT))
def test_a_main_graph_op_without_the_setting_breaks_its_placement_condition(condition):
    field = PLACEMENT[condition]
    ir = chain_ir(**FULLY_PLACED)
    unplaced = ir.main_graph.ops[1]
    setattr(unplaced.settings, field, unplaced.settings.__dataclass_fields__[field].default)
    assert check_condition(ir, condition) == [
        f"op {unplaced.debug_name()} of the main graph has no {field}"]
    others = [c for c in Condition if c is not condition]
    assert all(check_condition(ir, c) == [] for c in others)


@pytest.mark.parametrize("condition", list(PLACEMENT))
def test_placement_conditions_concern_the_main_graph_only(condition):
    ir = chain_ir(**FULLY_PLACED)
    identity_subgraph(ir, "sub")  # its ops carry no placement at all
    assert check_condition(ir, condition) == []


def test_shapes_known_names_each_tensor_without_a_shape():
    ir = chain_ir()
    ir.main_graph.ops[0].output(0).shape = None
    sub = identity_subgraph(ir, "sub", n_inputs=1)
    sub.ops[0].output(0).shape = None
    assert check_condition(ir, Condition.SHAPES_KNOWN) == [
        "tensor 'Relu0:0' has no shape", "tensor 'Relu3:0' (graph 'sub') has no shape"]


def test_condition_values_describe_them():
    assert "virtual graph" in Condition.VGRAPH.value
    assert "IpuCopy" in Condition.NO_IPU_COPY.value
