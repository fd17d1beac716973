"""Pipeline: a stash for every tensor read again in a later pipeline stage of its IPU.

After PopART's Pipeline transform (``pipeline.cpp``, ``addStashRestoreOps``), for an IR
whose ops have IPUs, stages (InferPipelineStages) and copies between IPUs (InterIpuCopy).
When stage ``k`` reads a tensor made in stage ``s < k`` of the same IPU, the running
pipeline has moved on ``k - s`` micro-batches since; the tensor's values in between wait
in a stash:

- a **Stash** right after the tensor is made (in stage ``s``; for a model input or a copy
  from another IPU, the stage of its first reader), of ``max k - s + 1`` slots
  (``Pipeline::getStashSize``: on ``N`` IPUs a forward tensor of stage ``s`` restored by
  its backward stage ``2(N - 1) - s`` stashes ``2(N - 1 - s) + 1``);
- one **Restore** per later stage that reads it, whose readers then read the restored
  value.

Not stashed, as in PopART: weights and constants, and (ours) what is computed from them
alone (a transposed weight is the weight, constant over the step). Not stashed either: a
weight's gradient on its way to the weight's update. PopART's pipelined training
accumulates gradients (``enableGradientAccumulation``, which Graphcore's pipelined
configurations all set): each gradient is added to its weight's accumulator in the stage
that makes it, and the weights are updated once per step after the pipeline; the cost
model counts that accumulator (``docs/multi-ipu.md``).

A weight the step updates, copied between IPUs, is refused, as PopART refuses to copy a
variable when pipelining ("All pipeline stages using this tensor should be on the same
graph"): a split must keep such a weight's readers on one IPU (SplitByMemory keeps a
tied head with its table). A weight the step only reads (all of a forward model's) may
be copied, in its reader's stage: PopART's inference session holds its weights as
constants (``constantWeights``), which its pipeline copies so. ONNX exports need it: an
exporter shares a scalar between layers, or merges equal-valued initializers.

Scheduling: a Stash runs as soon as it can (so the tensor need not stay live for it); a
Restore runs only when nothing else can, the one whose reader came first in the schedule
first: just before its reader, as PopART's topological constraints place it.

Recomputation needs nothing more here: ExplicitRecompute's clones read the checkpoints
kept for them, which are then what is stashed (PopART's recompute-aware stashing).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, OpType
from popart_unwind.ir.tensor import TensorType
from popart_unwind.ir.weights import is_weight, weight_derived
from popart_unwind.ops.ipu_copy import is_ipu_copy, op_ipu
from popart_unwind.ops.stash import RESTORE, STASH, STASH_SIZE
from popart_unwind.training import loss_forward_ops

from .base import Transform
from .conditions import Condition
from .infer_pipeline_stages import gradient_chain_ops
from .registry import PIPELINE, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op, Tensor
    from popart_unwind.ops import OpRegistry
    from popart_unwind.rewrite import Rewriter

STASH_TYPE = OpType(GRAPHCORE_DOMAIN, STASH, 1)
RESTORE_TYPE = OpType(GRAPHCORE_DOMAIN, RESTORE, 1)


@register
@dataclasses.dataclass(frozen=True)
class Pipeline(Transform):
    """Add the stashes and restores (module docstring). Does nothing unless
    ``SessionOptions.enable_pipelining`` is set.

    Assumes every op has an IPU and a stage and reads only its own IPU's tensors
    (VGRAPH, PSTAGE, NO_IMPLICIT_COPY) and known shapes. Its ops get the IPU and stage
    they run in, so it keeps those conditions and every other."""

    id = 14
    name = PIPELINE
    assumes = frozenset({Condition.VGRAPH, Condition.PSTAGE, Condition.NO_IMPLICIT_COPY,
                         Condition.SHAPES_KNOWN})
    preserves = frozenset(Condition)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        if not ir.options.enable_pipelining:
            return False
        main = ir.main_graph
        schedule = main.schedule()
        _refuse_weight_copies(schedule, self.op_registry)
        position = {op.id: k for k, op in enumerate(schedule)}
        derived = weight_derived(schedule)
        loss = ir.final_loss_id
        forward = {op.id for op in loss_forward_ops(main, main.tensor(loss))} \
            if loss is not None and main.has_tensor(loss) else {op.id for op in schedule}
        gradients = gradient_chain_ops(
            schedule, {op.id for op in schedule if op.id not in forward}, self.op_registry)
        made = [t for op in schedule for t in op.outputs] + [
            t for t in main.producerless_tensors() if not is_weight(t)]
        for tensor in made:
            if tensor.id in derived or (tensor.producer is not None
                                        and tensor.producer.id in gradients):
                continue
            _stash(tensor, position, rewriter)
        return rewriter.changes > 0


def stage(op: Op) -> int:
    return op.settings.pipeline_stage


def updated_weights(schedule: list[Op], registry: OpRegistry) -> set[str]:
    """The ids of the weights the step computes new values of (a training step's
    updates); none in a forward model."""
    found = set()
    for op in schedule:
        index = registry.layout_rule(op).updated_weight(op)
        if index is not None:
            found.add(op.input(index).id)
    return found


def _refuse_weight_copies(schedule: list[Op], registry: OpRegistry) -> None:
    """A weight the step updates may not be copied between IPUs; one it only reads may
    (module docstring)."""
    updated = updated_weights(schedule, registry)
    for op in schedule:
        if not is_ipu_copy(op):
            continue
        for tensor in op.inputs:
            if is_weight(tensor) and tensor.tensor_type is TensorType.VARIABLE \
                    and tensor.id in updated:
                raise TransformError(
                    f"weight {tensor.id!r} is read on IPU {op_ipu(op)} and on IPU "
                    f"{op.attributes.get('destIpu')}: a pipelined model cannot copy a "
                    f"weight between IPUs (as PopART refuses it); place all its readers "
                    f"on one IPU")


def _stash(tensor: Tensor, position: dict[int, int], rewriter: Rewriter) -> None:
    readers = [op for op in tensor.consumers if not is_ipu_copy(op)]
    if not readers:
        return
    producer = tensor.producer
    home = stage(producer) if producer is not None and not is_ipu_copy(producer) \
        else min(stage(op) for op in readers)
    later = sorted({stage(op) for op in readers if stage(op) > home})
    if not later:
        return
    first = min(readers, key=lambda op: position[op.id])
    made_by = producer if producer is not None and not is_ipu_copy(producer) else first
    stash = rewriter.create_op(tensor.graph, STASH_TYPE, [tensor],
                               attributes={STASH_SIZE: later[-1] - home + 1}, like=made_by)
    _place(stash, op_ipu(first), home, rewriter)
    rewriter.set_schedule_priority(stash, 1.0)
    for restore_stage in later:
        here = sorted((op for op in readers if stage(op) == restore_stage),
                      key=lambda op: position[op.id])
        restore = rewriter.create_op(tensor.graph, RESTORE_TYPE, [stash.output(0)],
                                     attributes={STASH_SIZE: later[-1] - home + 1},
                                     like=here[0])
        _place(restore, op_ipu(here[0]), restore_stage, rewriter)
        rewriter.set_schedule_priority(restore, -1.0 - position[here[0].id])
        for reader in here:
            for index, read in list(reader.input_map().items()):
                if read is tensor:
                    rewriter.set_input(reader, index, restore.output(0))


def _place(op: Op, ipu: int, pipeline_stage: int, rewriter: Rewriter) -> None:
    rewriter.set_placement(op, "vgraph_id", ipu)
    rewriter.set_placement(op, "pipeline_stage", pipeline_stage)
