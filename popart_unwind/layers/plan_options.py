"""Plans for the passes of a fully connected layer: each planned alone, or all three sharing
one partition of the layer's cube (Poplibs' joint plan), and Poplibs' choice between them.

A training step computes each fully connected layer three times over one cube of work
[G, M, K, N]: the forward pass X·W, the backward pass dY·Wᵀ and the weight update Xᵀ·dY.
With ``fullyConnectedPass`` set (PopART sets it on every matmul of a training graph),
Poplibs' planner (``createPlan`` in lib/poplin/ConvPlan.cpp) plans the forward pass twice:
jointly, one partition costed as the sum of the three passes it implies, so that weights,
activations and gradients are laid out once for all three; and separately, each pass its
own cheapest partition, charged for rearranging the backward pass's input and the weight
update's output into the layouts the other passes left. It keeps the separate plans only
when they take fewer cycles. docs/ipu-model.md ("Plans as decisions") and docs/baseline.md
(section 6) say what the model keeps of this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from popart_unwind.machine.interface import (
    MatmulCost,
    MatmulPartition,
    MatmulPlan,
    TileMachine,
    on_shared_buses,
    pass_dims,
)

#: The cube axes (rows, inner, columns) of the three passes in Poplibs' own orientation.
CANONICAL_AXES = {"TRAINING_FWD": "mkn", "TRAINING_BWD": "mnk", "TRAINING_WU": "kmn"}


@dataclasses.dataclass(frozen=True)
class PassOp:
    """One pass of a layer as an op computes it: its Poplibs pass name and its cube axes."""

    fc_pass: str
    axes: str


@dataclasses.dataclass(frozen=True)
class LayerPlans:
    """One plan per pass op (in the order asked), what they cost together, and the cycles
    of the rearrangements Poplibs charges them, by pass (none for a joint plan)."""

    plans: tuple[MatmulPlan, ...]
    cost: MatmulCost
    rearrangements: tuple[tuple[str, int], ...] = ()

    @property
    def joint(self) -> bool:
        return all(plan.joint for plan in self.plans)

    @property
    def rearrangement_cycles(self) -> int:
        return sum(cycles for _, cycles in self.rearrangements)

    def rearranged(self, fc_pass: str) -> int:
        """The cycles Poplibs charges pass ``fc_pass`` for rearranging (0 if none)."""
        return sum(cycles for name, cycles in self.rearrangements if name == fc_pass)

    @property
    def cycles(self) -> int:
        return self.cost.cycles + self.rearrangement_cycles


def pass_cost(target: TileMachine, plan: MatmulPlan, dtype: str) -> MatmulCost:
    """What one pass costs under its plan (its own matmul cut as the plan says)."""
    return target.matmul_cost(*plan.dims, dtype, plan.own_partition, plan.shared_operand,
                              plan.memory_proportion)


def joint_plans(target: TileMachine, cube: tuple[int, int, int, int], dtype: str,
                ops: Sequence[PassOp], count: int = 1,
                over: Sequence[str] | None = None,
                memory_proportion: float | None = None) -> list[LayerPlans]:
    """The ``count`` best partitions of ``cube`` shared by every pass op, best first, each
    costed as the sum of the passes ``over`` (cube axes). By default, as in Poplibs, all
    three passes, whichever the ops compute (a pass a step computes may be one the
    recognition did not find). ``memory_proportion`` (here and below): the layer's own
    bound on its plans' temporary memory, if it sets one (``MatmulPlan``)."""
    passes = list(CANONICAL_AXES.values()) if over is None else list(over)
    return [_sharing(target, cube, dtype, ops, partition, memory_proportion)
            for partition in target.matmul_candidates(cube, dtype, passes, count,
                                                      memory_proportion)]


def separate_plans(target: TileMachine, cube: tuple[int, int, int, int], dtype: str,
                   ops: Sequence[PassOp], charged: bool = True,
                   memory_proportion: float | None = None) -> LayerPlans:
    """Each pass op planned alone, as its own cube, with Poplibs' rearrangements charged
    unless ``charged`` is false: the backward pass's input (dY, [G, M, N]) and the weight
    update's output (dW, [G, K, N]) each copied over the tiles of its pass."""
    plans_tuple = tuple(
        MatmulPlan(own, target.matmul_plan(*own, dtype, memory_proportion), "mkn",
                   op.fc_pass, memory_proportion=memory_proportion)
        for op in ops for own in [pass_dims(cube, op.axes)])
    if not charged:
        return LayerPlans(plans_tuple, _summed(target, plans_tuple, dtype))
    rearrangements = tuple(
        (plan.fc_pass, target.rearrangement_cycles(rearranged_elements(cube, plan.fc_pass),
                                                   dtype, plan.partition.tiles_used))
        for plan in plans_tuple if rearranged_elements(cube, plan.fc_pass))
    return LayerPlans(plans_tuple, _summed(target, plans_tuple, dtype), rearrangements)


def rearranged_elements(cube: tuple[int, int, int, int], fc_pass: str) -> int:
    """Elements Poplibs rearranges for pass ``fc_pass`` of a layer planned separately: the
    backward pass's input dY [G, M, N] and the weight update's output dW [G, K, N]."""
    g, m, k, n = cube
    return {"TRAINING_BWD": g * m * n, "TRAINING_WU": g * k * n}.get(fc_pass, 0)


def broadcast_elements(target: TileMachine, plan: MatmulPlan, dtype: str) -> int:
    """Elements the tiles of ``plan`` receive of its op's two operands when each lies in
    the plan's own layout: every element of the LHS block goes to the other tiles of its
    column split, every element of the RHS block to the other tiles of its row split, once
    per serial step. The operand its cube's row split reads in neighbouring pairs
    (``MatmulPlan.shared_operand``), when that split is even and the plan starts on a super
    tile, reaches each pair once: half the split's count."""
    g, m, k, n = plan.dims
    own = plan.own_partition
    lhs_readers, rhs_readers = own.cols - 1, own.rows - 1
    if on_shared_buses(target, plan):  # the shared operand's split is the cube's rows
        if plan.shared_operand == "rhs":
            rhs_readers = own.rows // 2
        elif plan.shared_operand == "lhs":
            lhs_readers = own.cols // 2
    steps = target.matmul_cost(*plan.dims, dtype, own, plan.shared_operand,
                               plan.memory_proportion).serial
    return g * m * k * lhs_readers + g * k * n * rhs_readers * steps


def poplibs_plans(target: TileMachine, cube: tuple[int, int, int, int], dtype: str,
                  ops: Sequence[PassOp], memory_proportion: float | None = None
                  ) -> LayerPlans:
    """What Poplibs chooses for a layer whose forward pass is planned with
    ``fullyConnectedPass`` TRAINING_FWD: the joint plan, its partition costed over all three
    passes whichever are computed, unless the three passes planned separately, with their
    rearrangements, take strictly fewer cycles (``separatePlanHasLowerCost`` without a
    memory bound)."""
    every_pass = [PassOp(name, axes) for name, axes in CANONICAL_AXES.items()]
    proportion = memory_proportion
    [joint] = joint_plans(target, cube, dtype, every_pass, memory_proportion=proportion)
    if separate_plans(target, cube, dtype, every_pass,
                      memory_proportion=proportion).cycles < joint.cycles:
        return separate_plans(target, cube, dtype, ops, memory_proportion=proportion)
    return _sharing(target, cube, dtype, ops, joint.plans[0].partition, proportion)


def _sharing(target: TileMachine, cube: tuple[int, int, int, int], dtype: str,
             ops: Sequence[PassOp], partition: MatmulPartition,
             memory_proportion: float | None = None) -> LayerPlans:
    plans = tuple(MatmulPlan(cube, partition, op.axes, op.fc_pass, joint=True,
                             memory_proportion=memory_proportion) for op in ops)
    return LayerPlans(plans, _summed(target, plans, dtype))


def _summed(target: TileMachine, plans: Sequence[MatmulPlan], dtype: str) -> MatmulCost:
    total = MatmulCost(0, 0, 0, 0)
    for plan in plans:
        total = total + pass_cost(target, plan, dtype)
    return total
