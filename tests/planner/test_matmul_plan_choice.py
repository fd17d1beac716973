"""Matmul plans chosen with layouts: a layer's passes sharing one partition let one weight
layout serve every pass and the update; the three ways of choosing plans; and the choice
against an exhaustive search over every layer's options, each planned with the exact
unwinding solver and costed by the cost model."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from popart_unwind.transforms import run_pipeline
from popart_unwind.transforms.unwind_layouts import plan_ir

from popart_unwind.baselines import popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir import Ir
from popart_unwind.layers import (
    broadcast_elements,
    choose_plans,
    estimated_bytes,
    estimated_cycles,
    fully_connected_layers,
    joint_plans,
    separate_plans,
)
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.machine.interface import MatmulPlan, plan_operand_readers, plan_operand_tiles
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.linalg import op_key

LEARNING_RATE = np.float32(0.01)


def training_step(widths: tuple[int, ...], rows: int = 24) -> Ir:
    """A stack of PyTorch-style Linear layers without biases, as a training step would
    compute them: each y = x @ w^T forward; a loss whose gradient is the output times a
    constant; backward dx = dy @ w and dw = dy^T @ x; each weight updated, w - lr * dw."""
    b = Builder()
    x = b.add_input_tensor("float32", (rows, widths[0]), "x")
    activations, weights = [x], []
    for index, (inner, cols) in enumerate(itertools.pairwise(widths)):
        w = b.add_initialized_input_tensor(np.zeros((cols, inner), np.float32), f"w{index}")
        weights.append(w)
        activations.append(b.ai_onnx.matmul(
            [activations[-1], b.ai_onnx.transpose([w], perm=[1, 0])], name=f"fwd{index}"))
    scale = b.add_initialized_input_tensor(np.float32(2.0), "scale")
    gradient = b.ai_onnx.mul([activations[-1], scale], name="loss_gradient")
    lr = b.add_initialized_input_tensor(LEARNING_RATE, "lr")
    for index in reversed(range(len(weights))):
        w = weights[index]
        dw = b.ai_onnx.matmul([b.ai_onnx.transpose([gradient], perm=[1, 0]),
                               activations[index]], name=f"wu{index}")
        b.add_output_tensor(b.ai_onnx.sub([w, b.ai_onnx.mul([dw, lr])], name=f"update{index}"))
        gradient = b.ai_onnx.matmul([gradient, w], name=f"bwd{index}")
    b.add_output_tensor(gradient)
    ir = b.ir()
    run_pipeline(ir)
    return ir


#: A layer this small is planned jointly (one partition for its three passes) under the IPU
#: Model's former figures (matmul compute at the peak rate alone, a 90-cycle sync, no shared
#: exchange buses); under Poplibs' vertex estimates, the measured syncs and the super tiles'
#: shared buses its passes are cheaper planned apart. The tests of what a joint plan
#: implies use the former.
JOINT_WINS = {"vertex_costs": False, "sync_cycles": 90, "tiles_per_exchange_bus": 1}


def small_target() -> TileTarget:
    return TileTarget(IpuModel(tiles_per_ipu=32, min_bytes_per_tile=16))


def op_named(ir: Ir, name: str):
    return next(op for op in ir.main_graph.ops if op.name == name)


def plan_and_cost(ir: Ir, target: TileTarget, **kwargs):
    plan = plan_ir(ir, target, write=False, **kwargs)
    mappings = {(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors}
    return plan, evaluate(ir, target, mappings, op_plans=plan.op_plans)


def test_one_layer_is_recognised_with_its_three_passes():
    ir = training_step((16, 12))
    [layer] = fully_connected_layers(ir)
    assert [op.name for op in layer.ops()] == ["fwd0", "bwd0", "wu0"]
    assert [layer.axes_of(op) for op in layer.ops()] == ["mkn", "mnk", "nmk"]
    assert layer.producerless == {"lhs", "rhs"}  # x and w; dy is computed


def test_passes_sharing_a_partition_want_the_weight_where_the_update_has_its_gradient():
    ir = training_step((16, 12))
    target = small_target()
    [layer] = fully_connected_layers(ir)
    ops, passes = layer.passes()
    [joint] = joint_plans(target, layer.cube, "float32", passes)
    planned = target.with_plans({op_key(op): plan for op, plan in
                                 zip(ops, joint.plans, strict=True)})
    fwd, bwd, wu = (op_named(ir, name) for name in ("fwd0", "bwd0", "wu0"))
    rule = REGISTRY.layout_rule(fwd)
    w_t = rule.operand_tiles(fwd, 1, planned).reshape(16, 12)  # w^T as the forward reads it
    w = rule.operand_tiles(bwd, 1, planned).reshape(12, 16)  # w as the backward reads it
    dw = rule.output_tiles(wu, [None, None], planned)[0].reshape(12, 16)  # the gradient
    np.testing.assert_array_equal(w_t.T, w)
    np.testing.assert_array_equal(dw, w)
    # planned alone, the three disagree
    alone = small_target()
    assert not np.array_equal(rule.operand_tiles(fwd, 1, alone).reshape(16, 12).T,
                              rule.operand_tiles(bwd, 1, alone).reshape(12, 16))


@pytest.mark.parametrize("how", ["with_layouts", "poplibs"])
def test_a_joint_layer_leaves_nothing_to_save_on_its_weight(how):
    ir = training_step((64, 48))
    target = TileTarget(IpuModel(tiles_per_ipu=64, **JOINT_WINS))
    ir.options = dataclasses.replace(ir.options, matmul_plans=how)
    plan, cost = plan_and_cost(ir, target)
    assert all(p.joint for p in plan.op_plans.values()) and len(plan.op_plans) == 3
    readers = {"fwd0", "bwd0", "update0"}
    rows = [row for row in cost.ops if row.name in readers]
    assert len(rows) == 3 and all(row.avoidable_bytes == 0 for row in rows)
    for row in cost.ops:  # each pass computes and sums partials as its plan says
        if row.type == "MatMul":
            chosen = plan.op_plans[("", row.op_id)]
            pass_cost = target.matmul_cost(*chosen.dims, "float32", chosen.own_partition,
                                           chosen.shared_operand)
            assert (row.compute_cycles, row.partials_cycles) == \
                (pass_cost.compute_cycles, pass_cost.reduction_cycles)
    ir.options = dataclasses.replace(ir.options, matmul_plans="alone")
    alone, alone_cost = plan_and_cost(ir, target)
    assert alone.op_plans == {}
    assert sum(row.avoidable_bytes for row in alone_cost.ops if row.name in readers) > 0
    assert cost.exchange_bytes < alone_cost.exchange_bytes


def test_the_ways_of_choosing_plans():
    ir = training_step((32, 24, 16))
    target = small_target()
    assert choose_plans(ir, target, REGISTRY, "alone") == {}
    poplibs = choose_plans(ir, target, REGISTRY, "poplibs")
    assert poplibs == popart_baseline(ir, target).op_plans
    ours = choose_plans(ir, target, REGISTRY, "with_layouts")
    assert set(ours) == set(poplibs) == {op_key(op) for layer in fully_connected_layers(ir)
                                         for op in layer.ops()}
    for key, chosen in ours.items():
        op = next(op for op in ir.main_graph.ops if op_key(op) == key)
        assert chosen.dims == REGISTRY.layout_rule(op).dims(op)
    assert choose_plans(ir, target, REGISTRY, "with_layouts") == ours  # deterministic
    with pytest.raises(ValueError, match="matmul_plans"):
        choose_plans(ir, target, REGISTRY, "fastest")


def layer_options(ir: Ir, target: TileTarget, count: int):
    """Each layer's options: its ``count`` best joint partitions and its separate plans."""
    found = []
    for layer in fully_connected_layers(ir):
        ops, passes = layer.passes()
        options = [*joint_plans(target, layer.cube, "float32", passes, count),
                   separate_plans(target, layer.cube, "float32", passes)]
        found.append((layer, ops, options))
    return found


@pytest.mark.parametrize("widths", [(16, 12), (24, 16, 8), (8, 20, 12)])
def test_the_choice_against_every_combination_of_layer_options(widths):
    """Exhaustive search: every combination of each layer's options, the layouts of each
    found by the exact solver, the step costed by the cost model. The planner's choice is
    one of those combinations, so none costs less. Its estimate knows neither the layouts
    the activations will have nor what the passes' result layouts cost the ops after them,
    so it can miss the best: on these steps it is 0%, 8.3% and 3.4% above it (at this
    size a sync, 90 cycles, outweighs moving a whole tensor)."""
    ir = training_step(widths)
    target = small_target()
    exact = dataclasses.replace(ir.options, unwind_algorithm="exact")
    options = layer_options(ir, target, count=2)
    totals = []
    for combination in itertools.product(*(choices for _, _, choices in options)):
        op_plans = {op_key(op): plan for (_, ops, _), chosen in zip(options, combination,
                                                                    strict=True)
                    for op, plan in zip(ops, chosen.plans, strict=True)}
        _, cost = plan_and_cost(ir, target, options=exact, op_plans=op_plans)
        totals.append(cost.cycles)
    _, ours = plan_and_cost(ir, target, options=exact)
    assert min(totals) <= ours.cycles <= 1.10 * min(totals)


def one_layer_options():
    """A one-layer step on 64 tiles: its target, layer, joint plans and separate plans."""
    ir = training_step((64, 48))
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    [layer] = fully_connected_layers(ir)
    _, passes = layer.passes()
    [joint] = joint_plans(target, layer.cube, "float32", passes)
    return target, layer, joint, separate_plans(target, layer.cube, "float32", passes)


def test_the_estimate_charges_separate_plans_for_their_copies():
    target, layer, joint, separate = one_layer_options()
    # a joint plan copies nothing; separate ones pay Poplibs' rearrangement of the output
    # gradient for the backward pass, copy x and w for each reader but the first (the
    # planner lays them out for one), and the gradient for the update in a step of its own
    assert estimated_cycles(target, layer, joint) == joint.cost.cycles
    _, m, k, n = layer.cube
    w_share = -(-k * n * 4 // max(p.partition.tiles_used for p in separate.plans[:2]))
    x_share = -(-m * k * 4 // max(p.partition.tiles_used
                                  for p in (separate.plans[0], separate.plans[2])))
    wu_share = -(-k * n * 4 // separate.plans[2].partition.tiles_used)
    assert estimated_cycles(target, layer, separate) == separate.cost.cycles + \
        separate.rearranged("TRAINING_BWD") + target.receive_cycles(w_share) + \
        target.receive_cycles(x_share) + target.exchange_cycles(wu_share)


def test_the_byte_estimate_counts_the_copies_the_cycle_estimate_charges():
    target, layer, joint, separate = one_layer_options()
    assert estimated_bytes(target, layer, joint) == \
        4 * sum(broadcast_elements(target, plan, "float32") for plan in joint.plans)
    # separate plans add x and w for their second readers, the gradient for the update
    # and the output gradient Poplibs rearranges for the backward pass
    _, m, k, n = layer.cube
    assert estimated_bytes(target, layer, separate) == 4 * (
        sum(broadcast_elements(target, plan, "float32") for plan in separate.plans)
        + m * k + 2 * k * n + m * n)


@settings(max_examples=60, deadline=None)
@given(cube=st.tuples(st.integers(1, 3), st.integers(1, 20), st.integers(1, 20),
                      st.integers(1, 20)),
       choice=st.integers(0, 2), axes=st.sampled_from(["mkn", "mnk", "kmn", "knm", "nmk",
                                                       "nkm"]))
def test_a_plan_broadcasts_its_operands_as_the_cost_model_counts(cube, choice, axes):
    """``broadcast_elements`` against the cost model: what the plan's tiles receive of
    each operand laid out where the plan wants it."""
    target = small_target()
    partitions = target.matmul_candidates(cube, "float32", ["mkn", "mnk", "kmn"], 3)
    assume(choice < len(partitions))
    plan = MatmulPlan(cube, partitions[choice], axes)
    received = sum(
        int(plan_operand_readers(target, plan, operand, "float32",
                                 plan_operand_tiles(target, plan, operand, "float32"))
            .received_bytes.sum())
        for operand in ("lhs", "rhs"))
    assert broadcast_elements(target, plan, "float32") * 4 == received


def test_the_baseline_plans_layers_as_poplibs_and_lays_the_weight_out_for_them():
    ir = training_step((64, 48))
    target = TileTarget(IpuModel(tiles_per_ipu=64, **JOINT_WINS))
    baseline = popart_baseline(ir, target)
    assert baseline.op_plans == choose_plans(ir, target, REGISTRY, "poplibs")
    assert popart_baseline(ir, target, fully_connected_pass=False).op_plans == {}
    # the forward matmul creates the weight with its plan's layout: the one the backward
    # pass reads and the update's gradient has, when the plan is joint
    assert all(plan.joint for plan in baseline.op_plans.values())
    cost = evaluate(ir, target, baseline.mappings, op_plans=baseline.op_plans)
    rows = [row for row in cost.ops if row.name in {"fwd0", "bwd0", "update0"}]
    assert len(rows) == 3 and all(row.avoidable_bytes == 0 for row in rows)
