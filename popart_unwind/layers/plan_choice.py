"""Matmul plans chosen with the layouts they imply, before the layouts themselves.

Each fully connected layer of a training step (``layers.fully_connected``) computes one cube
of work in up to three passes; so does each convolution layer (``layers.convolution``), its
forward convolution's im2col, with its weight gradient and, when pointwise, its data
gradient. Poplibs never plans a convolution's passes together, so for convolution layers
only the planner's choice below weighs a joint plan (costed over the passes the layer
computes, with no rearrangement charged to separate plans).

A layer's passes can share one partition of the cube (a joint plan: each tensor of the
layer — weights, activations, gradients — is wanted in one layout by every pass that reads
it, and the weight gradient comes out where the weights lie) or each take its own cheapest
partition (separate plans: fewer cycles for the passes themselves, but every pass wants
its operands in another layout). Poplibs weighs the two
on the passes' own cycles (``plan_options.poplibs_plans``); the planner weighs them on
the passes' cycles plus the copies their layouts leave where the planner decides them:

- a producer-less tensor (the weights, an input) read by several passes is laid out by the
  planner once; under separate plans each further reader wants another layout and its
  tiles receive their share of the tensor within that pass's exchange; a joint plan
  wants one layout, which the planner can give;
- the weight update adds the weight gradient to the weights: under separate plans the
  gradient comes out in the weight-update pass's layout, which the update receives in an
  exchange step of its own (with its sync). (Laying the weights out where the gradient
  comes out instead moves the cost to the passes and the ops that follow them, which
  measure worse on the benchmark models.)

Separate plans are also charged what Poplibs charges them: rearranging the backward pass's
input (the output gradient) and, unless the update's copy above stands for it, the weight
update's output (``plan_options.separate_plans``).

The option taken is the one with the fewest estimated cycles among those whose passes
receive no more estimated bytes (the same terms, in bytes; partial sums left out, as the
cost report leaves them out of its exchanged bytes) than the plans Poplibs would choose
for the layer: a plan never buys cycles with more exchange than Poplibs' plans move.

Beyond that, activations and gradients keep their producers' layouts, which the choice
does not know (the passes' own cycles assume every operand where the plan wants it).
Separate plans are assumed to want distinct layouts of every shared tensor (different
matmul shapes are cut differently). A joint partition is the one Poplibs would share (the
best for all three passes); the options are compared on the passes the layer's ops
compute. The choice is per layer and local; the cost model then measures the whole step.
``SessionOptions.matmul_plans`` selects this ("with_layouts", the default),
Poplibs' own choice ("poplibs") or every matmul planned alone ("alone").
"""

from __future__ import annotations

from popart_unwind.errors import PlanError
from popart_unwind.ir import Ir
from popart_unwind.layers.convolution import convolution_layers
from popart_unwind.layers.fully_connected import FullyConnectedLayer, fully_connected_layers
from popart_unwind.layers.plan_options import (
    LayerPlans,
    broadcast_elements,
    joint_plans,
    poplibs_plans,
    rearranged_elements,
    separate_plans,
)
from popart_unwind.machine.interface import MatmulPlan, TileMachine, cube_tensor
from popart_unwind.ops.linalg import op_key
from popart_unwind.ops.registry import OpRegistry
from popart_unwind.options import MATMUL_PLAN_CHOICES

OpPlans = dict[tuple[str, int], MatmulPlan]
#: The keys of one layer's ops, in the order of its passes.
LayerKeys = list[tuple[str, int]]


def choose_plans(ir: Ir, target: TileMachine, registry: OpRegistry,
                 how: str = "with_layouts", skip: frozenset[int] = frozenset()) -> OpPlans:
    """The plan of every matmul op that is a pass of a fully connected layer and, under
    ``with_layouts``, of every convolution that is a pass of a convolution layer (the
    others are planned alone), chosen as ``how`` says (``MATMUL_PLAN_CHOICES``); the
    layers whose forward op's id is in ``skip`` are planned alone too. Recomputed ops get
    their originals' plans."""
    plans, _ = layer_plans(ir, target, registry, how, skip)
    return with_recomputed(ir, plans)


def layer_plans(ir: Ir, target: TileMachine, registry: OpRegistry,
                how: str = "with_layouts", skip: frozenset[int] = frozenset()
                ) -> tuple[OpPlans, list[LayerKeys]]:
    """What :func:`choose_plans` chooses, before recomputed ops are given their originals'
    plans, and the keys of each layer's ops (so that a caller moving the plans round the
    tiles can keep a layer's passes together)."""
    if how not in MATMUL_PLAN_CHOICES:
        raise PlanError(f"matmul_plans must be one of {MATMUL_PLAN_CHOICES}, got {how!r}")
    plans: OpPlans = {}
    layers: list[LayerKeys] = []
    if how != "alone":
        _choose_layer_plans(ir, target, registry, how, skip, plans, layers)
    return plans, layers


def with_recomputed(ir: Ir, plans: OpPlans) -> OpPlans:
    """``plans``, each recomputed op given its original's plan: Poplibs plans a clone with
    the same parameters and options, so its plan is the original's (from its plan
    cache)."""
    copied = dict(plans)
    for graph in ir.graphs:
        for op in graph.ops:
            original = (graph.id, op.settings.recomputed_from)
            if op.settings.recomputed_from >= 0 and original in plans:
                copied[op_key(op)] = plans[original]
    return copied


def _choose_layer_plans(ir: Ir, target: TileMachine, registry: OpRegistry, how: str,
                        skip: frozenset[int], plans: OpPlans,
                        grouped: list[LayerKeys]) -> None:
    """Fill ``plans`` with each layer's chosen plans and ``grouped`` with its ops' keys."""
    layers: list[FullyConnectedLayer] = list(fully_connected_layers(ir, registry))
    if how == "with_layouts":  # Poplibs plans each pass of a convolution alone
        layers += convolution_layers(ir, registry)
    for layer in layers:
        if layer.fwd.id in skip:
            continue
        ops, passes = layer.passes()
        dtype = layer.fwd.input(0).dtype
        if how == "poplibs":
            chosen = poplibs_plans(target, layer.cube, dtype, passes)
        else:
            over = None if layer.poplibs_joint else [p.axes for p in passes]
            options = [*joint_plans(target, layer.cube, dtype, passes, over=over),
                       separate_plans(target, layer.cube, dtype, passes,
                                      charged=layer.poplibs_joint)]
            own = (poplibs_plans(target, layer.cube, dtype, passes) if layer.poplibs_joint
                   else options[-1])  # Poplibs plans a convolution's passes each alone
            bound = estimated_bytes(target, layer, own)
            chosen = min((option for option in options
                          if estimated_bytes(target, layer, option) <= bound),
                         key=lambda option: estimated_cycles(target, layer, option))
        for op, plan in zip(ops, chosen.plans, strict=True):
            plans[op_key(op)] = plan
        grouped.append([op_key(op) for op in ops])


def estimated_cycles(target: TileMachine, layer: FullyConnectedLayer,
                     option: LayerPlans) -> int:
    """The passes' own cycles plus the copies their wanted layouts leave (the module
    docstring says how they are counted)."""
    dtype = layer.fwd.input(0).dtype
    elements = {name: layer.tensor_elements(name) for name in ("lhs", "rhs", "output")}
    if option.joint:  # one layout of each tensor; Poplibs charges no rearrangement
        return option.cost.cycles
    cycles = option.cost.cycles + option.rearranged("TRAINING_BWD")
    updated = _updates_weights(layer, option)
    for name, readers in _readers(layer, option).items():
        if name not in layer.producerless:
            continue
        copy = target.receive_cycles(_share(target, elements[name], dtype, readers))
        cycles += (len(readers) - 1) * copy
        if name == "rhs" and updated:
            # the update receives the gradient in an exchange step of its own
            wu = [plan for plan in option.plans if plan.fc_pass == "TRAINING_WU"]
            cycles += target.exchange_cycles(_share(target, elements[name], dtype, wu))
    return cycles + (0 if updated else option.rearranged("TRAINING_WU"))


def estimated_bytes(target: TileMachine, layer: FullyConnectedLayer,
                    option: LayerPlans) -> int:
    """The bytes the passes receive, counted as :func:`estimated_cycles` counts their
    cycles: each pass's operands broadcast from the plan's own layout to the tiles that
    read them, and, for separate plans, every further reader's copy of a producer-less
    tensor, the update's copy of the weight gradient and Poplibs' rearrangements. Partial
    sums are left out, as the cost report leaves them out of its exchanged bytes (it
    counts them in cycles)."""
    size = target.dtype_size(layer.fwd.input(0).dtype)
    received = sum(broadcast_elements(plan) for plan in option.plans)
    if option.joint:
        return received * size
    updated = _updates_weights(layer, option)
    for name, readers in _readers(layer, option).items():
        if name in layer.producerless:
            received += (len(readers) - 1) * layer.tensor_elements(name)
    if updated:
        received += layer.tensor_elements("rhs")
    for fc_pass, _ in option.rearrangements:
        if fc_pass == "TRAINING_BWD" or not updated:
            received += rearranged_elements(layer.cube, fc_pass)
    return received * size


def _share(target: TileMachine, elements: int, dtype: str,
           readers: list[MatmulPlan]) -> int:
    """Bytes of a tensor on each of the tiles of its widest reading pass."""
    tiles = max(plan.partition.tiles_used for plan in readers)
    return -(-elements * target.dtype_size(dtype) // tiles)


def _readers(layer: FullyConnectedLayer, option: LayerPlans) -> dict[str, list[MatmulPlan]]:
    """For each cube tensor ("lhs", "rhs", "output"), the plans of the passes reading it."""
    found: dict[str, list[MatmulPlan]] = {}
    for op, plan in zip(layer.ops(), option.plans, strict=True):
        for operand in ("lhs", "rhs"):
            name, _ = cube_tensor(layer.axes_of(op), operand)
            found.setdefault(name, []).append(plan)
    return found


def _updates_weights(layer: FullyConnectedLayer, option: LayerPlans) -> bool:
    """Whether the step updates producer-less weights with the gradient a weight-update
    pass of ``option`` computes."""
    return "rhs" in layer.producerless and any(
        plan.fc_pass == "TRAINING_WU" for plan in option.plans)
