"""ExplicitRecompute: forward ops of a training step computed again for the backward pass,
so that their results need not stay live from the forward pass to the backward one.

After PopART's recomputation (``recompute.cpp`` chooses the ops, ``explicitrecompute.cpp``
clones them), for a step with no pipelining or execution phases:

- the forward ops are those the loss depends on (PopART's ``toLoss``);
- ``SessionOptions.recompute`` marks some of them: ``recompute_all`` every one that can be
  recomputed, ``norm_only`` the norms (``OpDef.norm``), ``standard`` every one outside the
  checkpoints — walking the forward schedule in PopART's decreasing intervals (about
  sqrt(2n) long, then shorter), the forward ops still awaited by later forward ops at the
  cheapest moment of each interval are checkpoints, their results kept;
- walking the forward schedule backwards, a marked op read by an op outside the forward
  pass (a backward op, or a clone made before it) gets one clone; a clone reads the clones
  of its marked producers and the originals of the rest, and every backward reader of a
  marked op's result reads the clone's instead.

Clones are created after every original op, in reverse forward order, so the schedule
(lowest id first among ready ops of equal priority; clones keep priority 0) runs a clone
only when no original op is ready: just before the backward pass needs it. A clone
records its original in ``OpSettings.recomputed_from``, which is how the fully connected
and convolution layers are still recognised through it (PopART marks a layer's passes
before recomputation).

An op cannot be recomputed when it has side effects, draws random numbers (our IR models
no seed inputs, so a second draw would differ; PopART recomputes a seeded Dropout), calls a
subgraph, or works in place. Unlike PopART, ``recompute_all`` also recomputes the forward
ops right before the loss (PopART's implicit recomputation turns those back into
checkpoints; its explicit one, which this follows, does not).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformWarning
from popart_unwind.machine import DTYPE_SIZES
from popart_unwind.training import loss_forward_ops

from .base import Transform
from .conditions import Condition, is_inplace
from .registry import EXPLICIT_RECOMPUTE, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op, Tensor
    from popart_unwind.ops import OpRegistry
    from popart_unwind.rewrite import Rewriter


@register
@dataclasses.dataclass(frozen=True)
class ExplicitRecompute(Transform):
    """Clone the marked forward ops of the main graph into the backward pass (module
    docstring). Reads ``SessionOptions.recompute``; with ``none``, or without a loss
    (``Ir.final_loss_id``), it changes nothing.

    Assumes shapes are known (clones are made with their shapes). Preserves every
    condition: a clone has its original's placement (so NO_IMPLICIT_COPY and the placement
    conditions stay as they were), and no in-place op or IpuCopy is ever recomputed (they
    are not recomputable), so NO_INPLACE, NO_IPU_COPY and SHAPES_KNOWN hold as before.
    """

    id = 6
    name = EXPLICIT_RECOMPUTE
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = frozenset(Condition)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        mode = ir.options.recompute
        if mode == "none":
            return False
        main = ir.main_graph
        if ir.final_loss_id is None or not main.has_tensor(ir.final_loss_id):
            warnings.warn(f"recompute={mode}: the model is no training step (it names no "
                          f"loss), so nothing is recomputed", TransformWarning, stacklevel=2)
            return False
        forward = loss_forward_ops(main, main.tensor(ir.final_loss_id))
        marked = marked_ops(forward, mode, self.op_registry)
        return _clone_into_backward(main, forward, marked, rewriter)


def marked_ops(forward: list[Op], mode: str, registry: OpRegistry) -> list[Op]:
    """The forward ops ``mode`` recomputes, in schedule order."""
    if mode == "recompute_all":
        chosen = forward
    elif mode == "norm_only":
        chosen = [op for op in forward if registry.is_norm(op)]
    else:
        kept = standard_checkpoints(forward)
        chosen = [op for op in forward if op.id not in kept]
    return [op for op in chosen if _recomputable(op, registry)]


def _recomputable(op: Op, registry: OpRegistry) -> bool:
    return not (registry.has_side_effects(op) or registry.draws_random(op)
                or op.called_graphs() or is_inplace(op, registry))


def standard_checkpoints(forward: list[Op]) -> frozenset[int]:
    """The ids of the ops ``standard`` keeps (PopART's ``annotateStandard``): over each of
    :func:`decreasing_intervals` of the forward schedule, the ops whose results later
    forward ops still await at the interval's cheapest step (fewest bytes awaited)."""
    live_sets = _live_sets(forward)
    sizes = [sum(_bytes(op) for op in live) for live in live_sets]
    kept: set[int] = set()
    for begin, end in decreasing_intervals(len(forward)):
        cheapest = min(range(begin, end), key=lambda i: (sizes[i], i))
        kept.update(op.id for op in live_sets[cheapest])
    return frozenset(kept)


def decreasing_intervals(count: int) -> list[tuple[int, int]]:
    """[0, count) cut into runs of k, k-1, ..., 1, then ones, with k the largest whole
    number such that 1 + ... + k < count, times 0.75 (PopART's ``getDecreasingIntervals``:
    checkpoints closer together where the backward pass comes back first)."""
    if count == 1:
        return [(0, 1)]
    size = int(int(math.sqrt(2.0 * count) - 1) * 0.75)
    intervals, begin = [], 0
    while size > 0 and begin + size <= count:
        intervals.append((begin, begin + size))
        begin, size = begin + size, size - 1
    intervals.extend((i, i + 1) for i in range(begin, count))
    return intervals


def _live_sets(forward: list[Op]) -> list[list[Op]]:
    """After each forward op, the forward ops whose results later forward ops still await
    (the op itself included: PopART's ``Graph::getLiveSets``)."""
    in_forward = {op.id for op in forward}
    awaited = {op.id: 0 for op in forward}
    producers: dict[int, list[Op]] = {}
    for op in forward:
        producers[op.id] = list({t.producer.id: t.producer for t in op.inputs
                                 if t.producer is not None
                                 and t.producer.id in in_forward}.values())
        for producer in producers[op.id]:
            awaited[producer.id] += 1
    live: dict[int, Op] = {}
    sets = []
    for op in forward:
        for producer in producers[op.id]:
            awaited[producer.id] -= 1
            if awaited[producer.id] == 0:
                live.pop(producer.id, None)
        live[op.id] = op
        sets.append(list(live.values()))
    return sets


def _bytes(op: Op) -> int:
    """The bytes of ``op``'s results (PopART's ``memOfOutputs``)."""
    return sum(t.nelms() * DTYPE_SIZES[t.dtype] for t in op.outputs)


def _clone_into_backward(graph: Graph, forward: list[Op], marked: list[Op],
                         rewriter: Rewriter) -> bool:
    forward_ids = {op.id for op in forward}
    clones: dict[int, Op] = {}
    for op in reversed(marked):
        # Cloned when a backward op reads it, or a clone made already (which reads the
        # originals until the rewiring below).
        if all(reader.id in forward_ids for t in op.outputs for reader in t.consumers):
            continue
        inputs = [op.input(i) if op.has_input(i) else None
                  for i in range(max(op.input_map(), default=-1) + 1)]
        clone = rewriter.create_op(graph, op.type, inputs, dict(op.attributes), like=op,
                                   num_outputs=max(op.output_map(), default=-1) + 1)
        rewriter.mark_recomputed(clone, op)
        rewriter.set_op_name(clone, f"{op.settings.name or op.type.name}/recomputed")
        clones[op.id] = clone
    if not clones:
        return False
    for original_id, clone in clones.items():
        original = graph.op(original_id)
        for index, tensor in clone.input_map().items():
            producer = tensor.producer
            if producer is not None and producer.id in clones:
                rewriter.set_input(clone, index, _matching_output(producer, tensor,
                                                                  clones[producer.id]))
        for index, tensor in original.output_map().items():
            for reader in list(tensor.consumers):
                if reader.id in forward_ids or reader.settings.recomputed_from >= 0:
                    continue
                for slot, read in reader.input_map().items():
                    if read is tensor:
                        rewriter.set_input(reader, slot, clone.output(index))
    return True


def _matching_output(original: Op, tensor: Tensor, clone: Op) -> Tensor:
    index = next(i for i, out in original.output_map().items() if out is tensor)
    return clone.output(index)
