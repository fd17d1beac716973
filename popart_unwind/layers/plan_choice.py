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

Nor with a fuller tile. A joint plan lays a layer's weight gradient out where the weights
lie, by one partition of the cube, which may use fewer tiles than Poplibs' plans of the
layer; the optimizer's states, which PopART clones from the gradient
(``layers.optimizer_state``: with Adam, two float32 states per weight), stay there for the
whole program, and every plan starts at tile 0, so the small layers' states stack on the
lowest tiles. So do a convolution layer's weights under a joint plan, which Poplibs never
makes for convolutions. The choices are therefore checked together, IPU by IPU: those
always-live bytes the chosen plans put on each tile (the states where the weight-update
pass leaves the gradient; a convolution's weights where its forward pass's plan wants
them) are summed over the layers and held against the fullest tile Poplibs' plans of the
same layers would leave. While ours is fuller, the layer adding most to that tile takes
instead the fastest of its options that fills no tile more than Poplibs' plans of it (its
``bounded`` option). A fully connected layer's weights are not counted: Poplibs plans its
passes jointly itself, and counting them gave up most of ViT's exchange savings through
ONNX for a peak already below PopART's (docs/planner.md, "Matmul plans").

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

import dataclasses

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.ir import Ir
from popart_unwind.layers.convolution import convolution_layers
from popart_unwind.layers.fully_connected import FullyConnectedLayer, fully_connected_layers
from popart_unwind.layers.optimizer_state import state_bytes_per_element
from popart_unwind.layers.plan_options import (
    LayerPlans,
    broadcast_elements,
    joint_plans,
    poplibs_plans,
    rearranged_elements,
    separate_plans,
)
from popart_unwind.machine.interface import (
    MatmulPlan,
    TileMachine,
    cube_tensor,
    plan_operand_tiles,
)
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
    choices: list[_Choice] = []
    for layer in layers:
        if layer.fwd.id in skip:
            continue
        ops, passes = layer.passes()
        dtype = layer.fwd.input(0).dtype
        if how == "poplibs":
            chosen = poplibs_plans(target, layer.cube, dtype, passes,
                                   layer.memory_proportion)
        else:
            choices.append(_choose(target, layer, passes, dtype))
            chosen = choices[-1].taken
        for op, plan in zip(ops, chosen.plans, strict=True):
            plans[op_key(op)] = plan
        grouped.append([op_key(op) for op in ops])
    for choice in _no_fuller_than_poplibs(choices):
        for op, plan in zip(choice.layer.ops(), choice.taken.plans, strict=True):
            plans[op_key(op)] = plan


@dataclasses.dataclass
class _Choice:
    """A layer's options as the step-wide tile bound weighs them: the one taken, the
    fastest that fills no tile more than Poplibs' plans of the layer (``bounded``), and
    each one's always-live bytes per tile, with Poplibs' own plans'."""

    layer: FullyConnectedLayer
    taken: LayerPlans
    bounded: LayerPlans
    taken_bytes: np.ndarray
    bounded_bytes: np.ndarray
    poplibs_bytes: np.ndarray


def _choose(target: TileMachine, layer: FullyConnectedLayer, passes: list,
            dtype: str) -> _Choice:
    """The fastest option within Poplibs' exchange, and the fastest within its exchange
    and the fullest tile its plans leave of the layer's weights and states."""
    over = None if layer.poplibs_joint else [p.axes for p in passes]
    proportion = layer.memory_proportion
    options = [*joint_plans(target, layer.cube, dtype, passes, over=over,
                            memory_proportion=proportion),
               separate_plans(target, layer.cube, dtype, passes,
                              charged=layer.poplibs_joint, memory_proportion=proportion)]
    own = (poplibs_plans(target, layer.cube, dtype, passes, proportion)
           if layer.poplibs_joint
           else options[-1])  # Poplibs plans a convolution's passes each alone
    states = (0 if layer.weights is None else state_bytes_per_element(
        layer.fwd.graph, layer.weights, target.dtype_size))
    bound = estimated_bytes(target, layer, own)
    allowed = [option for option in options
               if estimated_bytes(target, layer, option) <= bound]
    resident = {id(option): resident_bytes_per_tile(target, layer, option, states)
                for option in [*allowed, own]}
    fullest = resident[id(own)].max()

    def cycles(option: LayerPlans) -> int:
        return estimated_cycles(target, layer, option)

    taken = min(allowed, key=cycles)
    bounded = min((option for option in allowed if resident[id(option)].max() <= fullest),
                  key=cycles, default=own)
    return _Choice(layer, taken, bounded, resident[id(taken)],
                   resident.get(id(bounded), resident[id(own)]), resident[id(own)])


def _no_fuller_than_poplibs(choices: list[_Choice]) -> list[_Choice]:
    """Where the layers' weights and optimizer states, all plans starting at tile 0, would
    fill some tile of an IPU more than Poplibs' plans of the same layers fill its fullest,
    take the bounded option of the layer adding most to that tile, then the next, until
    they do not (or no layer can lower it). The layers whose choice changed, in order."""
    by_ipu: dict[int, list[_Choice]] = {}
    for choice in choices:
        by_ipu.setdefault(choice.layer.fwd.settings.vgraph_id, []).append(choice)
    changed: list[_Choice] = []
    for _, group in sorted(by_ipu.items()):
        limit = sum(choice.poplibs_bytes for choice in group).max()
        total = sum(choice.taken_bytes for choice in group)
        while total.max() > limit:
            tile = int(total.argmax())
            relief = [int(c.taken_bytes[tile] - c.bounded_bytes[tile]) for c in group]
            best = max(range(len(group)), key=lambda i: relief[i])
            if relief[best] <= 0:
                break
            choice = group[best]
            total = total - choice.taken_bytes + choice.bounded_bytes
            choice.taken, choice.taken_bytes = choice.bounded, choice.bounded_bytes
            changed.append(choice)
    return changed


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
    dtype = layer.fwd.input(0).dtype
    size = target.dtype_size(dtype)
    received = sum(broadcast_elements(target, plan, dtype) for plan in option.plans)
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


def resident_bytes_per_tile(target: TileMachine, layer: FullyConnectedLayer,
                            option: LayerPlans, state_bytes: int) -> np.ndarray:
    """Bytes of the layer's producer-less weights' optimizer states (``state_bytes`` per
    weight element) on each tile under ``option``, its plans starting at tile 0, where the
    weight-update pass leaves the gradient; for a convolution layer, whose passes Poplibs
    never plans together, the weights too, where the forward pass's plan wants them. None
    when the weights are computed."""
    per_tile = np.zeros(target.num_tiles, np.int64)
    if "rhs" not in layer.producerless:
        return per_tile
    dtype = layer.fwd.input(0).dtype
    weight_bytes = 0 if layer.poplibs_joint else target.dtype_size(dtype)
    for op, plan in zip(layer.ops(), option.plans, strict=True):
        for operand in ("rhs", "output"):
            name, _ = cube_tensor(layer.axes_of(op), operand)
            if name != "rhs":
                continue
            size = state_bytes if operand == "output" else (
                weight_bytes if plan.fc_pass == "TRAINING_FWD" else 0)
            if size:
                tiles = np.asarray(plan_operand_tiles(target, plan.starting_at(0), operand,
                                                      dtype))
                per_tile += np.bincount(tiles.reshape(-1).astype(np.int64),
                                        minlength=target.num_tiles)[:target.num_tiles] * size
    return per_tile


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
