"""InferPipelineStages: every main-graph op of a model placed on IPUs gets a pipeline stage.

After PopART's InferPipelineStages (``inferpipelinestages.cpp``) and autodiff's stage rule
(``gradgrowerop.cpp``). A stage is a run of ops on one IPU; the pipeline runs its stages
in order on every micro-batch, each stage on another micro-batch at once.

- **Given stages** (ONNX ``__pipeline_stage``, PopART's Builder ``pipelineStage``): every
  forward op must have one (PopART refuses a partial assignment); the ops of a stage
  share one IPU, and the stages are numbered 0 to ``K - 1`` without gaps.
- **Inferred forward stages.** PopART sets each op's stage to its IPU number, which breaks
  when the forward pass comes back to an IPU (GPT-2's tied LM head on the embedding's
  IPU: PopART refuses that model). We number the stages as PopTorch's ``BeginBlock`` does
  (``AutoStage.AutoIncrement``): a new stage each time the forward pass moves to another
  IPU. An op computed from the inputs runs in the earliest stage of its IPU not before
  the stages of what it reads, then, walking back, moves to the latest stage of its IPU
  not after its readers' (a loss's mask of the labels runs with the loss, not with the
  embedding on the same IPU); an op computed from weights and constants alone (a
  transposed weight, position ids) runs in the latest stage of its IPU not after its
  readers'.
  On a model whose IPUs follow one another (0, 1, 2, ...) both rules give PopART's stages.
- **Backward stages** (training: ``Ir.final_loss_id`` names a loss): with the loss in
  stage ``L``, the backward pass runs the IPUs' stages in reverse, stage ``2L - s`` on the
  IPU of forward stage ``s`` (PopART's ``maxPipelineStage - stage`` of the forward op a
  gradient op comes from). Each backward op runs in the earliest such stage of its IPU not
  before what it reads; then, walking back, an op whose results someone reads moves to the
  latest stage of its IPU not after its readers' (a recomputed forward op then runs where
  its result is needed, not where it could first run) — except an op computing one
  weight's gradient, which keeps the earliest (the gradient is accumulated where it is
  made).
  PopART places a gradient op with the forward op it comes from; a training step
  differentiated before import (a PyTorch program) places its backward pass by rules
  (docs/multi-ipu.md), which may put an op on an IPU the backward pass has already left
  (where a split cuts inside a layer). Such an op stays in the stage of what it reads,
  on that stage's IPU, and a TransformWarning says how many were moved.
- It runs before InterIpuCopy (as PopART's does), which then gives each copy the stage of
  what it copies (PopART's ``setIPUCopyPipelineStage``); an IR already holding copies is
  refused.

Checked (a TransformError naming the op): no tensor is read in a stage before the one it
is made in.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformError, TransformWarning
from popart_unwind.ir.weights import is_weight
from popart_unwind.ops.ipu_copy import is_ipu_copy, op_ipu
from popart_unwind.training import loss_forward_ops

from .base import ALL_CONDITIONS, Transform
from .conditions import Condition
from .inter_ipu_copy import complete_placement
from .registry import INFER_PIPELINE_STAGES, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op, Tensor
    from popart_unwind.ops import OpRegistry
    from popart_unwind.rewrite import Rewriter


@register
@dataclasses.dataclass(frozen=True)
class InferPipelineStages(Transform):
    """Give every main-graph op a pipeline stage (module docstring). Does nothing unless
    ``SessionOptions.enable_pipelining`` is set. Ops without an IPU (a partly placed
    model's backward pass) are placed first, as InterIpuCopy places them; guarantees
    VGRAPH and PSTAGE. It runs before InterIpuCopy, as in PopART (a backward
    op it moves to another IPU is then copied to and from there); it keeps every other
    condition but NO_IMPLICIT_COPY, which a moved op may break until the copies are
    made."""

    id = 13
    name = INFER_PIPELINE_STAGES
    assumes = frozenset({Condition.SHAPES_KNOWN})
    guarantees = frozenset({Condition.VGRAPH, Condition.PSTAGE})
    preserves = ALL_CONDITIONS - {Condition.NO_IMPLICIT_COPY}

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        if not ir.options.enable_pipelining:
            return False
        if ir.options.ipus < 2 or ir.options.virtual_graph_mode == "off":
            raise TransformError("pipelining needs a model over several IPUs: set ipus to 2 "
                                 "or more and virtual_graph_mode to manual or auto")
        main = ir.main_graph
        complete_placement(main, rewriter, self.op_registry)
        loss = ir.final_loss_id
        stages, moved = pipeline_stages(main, main.tensor(loss) if loss is not None
                                        and main.has_tensor(loss) else None,
                                        self.op_registry)
        for op_id, ipu in moved.items():
            rewriter.set_placement(main.op(op_id), "vgraph_id", ipu)
        if moved:
            first = main.op(min(moved))
            warnings.warn(f"{len(moved)} backward op(s) moved to another IPU to keep the "
                          f"pipeline's order (the first, {first.debug_name()}, was placed "
                          f"on an IPU the backward pass had already left)",
                          TransformWarning, stacklevel=2)
        for op in main.schedule():
            rewriter.set_placement(op, "pipeline_stage", stages[op.id])
        return rewriter.changes > 0


def pipeline_stages(graph: Graph, loss: Tensor | None, registry: OpRegistry
                    ) -> tuple[dict[int, int], dict[int, int]]:
    """Op id -> pipeline stage of every op of ``graph``, and op id -> new IPU of each
    backward op moved (module docstring)."""
    schedule = graph.schedule()
    forward = loss_forward_ops(graph, loss) if loss is not None else schedule
    forward_ids = {op.id for op in forward}
    copy = next((op for op in schedule if is_ipu_copy(op)), None)
    if copy is not None:
        raise TransformError(f"pipeline stages are inferred before the copies between IPUs "
                             f"are made (as in PopART), but {copy.debug_name()} is one: run "
                             f"InferPipelineStages before InterIpuCopy")
    backward = [op for op in schedule if op.id not in forward_ids]
    stages: dict[int, int] = {}
    order = _Stages(stages)
    given = [op for op in forward if op.settings.has("pipeline_stage")]
    if given:
        _take_given(forward, given, order)
    else:
        _forward_stages(forward, order)
    if loss is not None:
        backward_ids = {op.id for op in backward}
        _backward_stages(backward, order, gradient_chain_ops(schedule, backward_ids, registry))
    _check_order(schedule, stages)
    return stages, order.moved


class _Stages:
    """The stages found so far: each op's, and the IPU of each forward stage."""

    def __init__(self, stages: dict[int, int]) -> None:
        self.of = stages
        self.ipu_of_stage: list[int] = []
        #: Backward ops moved to another IPU: op id -> IPU.
        self.moved: dict[int, int] = {}

    def op_ipu(self, op: Op) -> int:
        return self.moved.get(op.id, op_ipu(op))

    @property
    def loss_stage(self) -> int:
        return len(self.ipu_of_stage) - 1

    def ipu(self, stage: int) -> int:
        """The IPU of ``stage``, a backward stage mirroring a forward one."""
        last = self.loss_stage
        return self.ipu_of_stage[stage if stage <= last else 2 * last - stage]

    def earliest(self, op: Op, lowest: int, highest: int, grow: bool) -> int | None:
        """The first stage from ``lowest`` on ``op``'s IPU (a new forward stage at the end
        when ``grow`` and there is none)."""
        ipu = self.op_ipu(op)
        for stage in range(lowest, highest + 1):
            if self.ipu(stage) == ipu:
                return stage
        if grow:
            self.ipu_of_stage.append(ipu)
            return self.loss_stage
        return None

    def latest(self, op: Op, lowest: int, highest: int) -> int | None:
        ipu = self.op_ipu(op)
        for stage in range(highest, lowest - 1, -1):
            if self.ipu(stage) == ipu:
                return stage
        return None


def _take_given(forward: list[Op], given: list[Op], order: _Stages) -> None:
    if len(given) != len(forward):
        missing = next(op for op in forward if not op.settings.has("pipeline_stage"))
        raise TransformError(f"op {missing.debug_name()} has no pipeline stage, but other "
                             f"forward ops have one: give every forward op a stage, or none")
    ipus: dict[int, int] = {}
    for op in forward:
        stage, ipu = op.settings.pipeline_stage, op_ipu(op)
        if ipus.setdefault(stage, ipu) != ipu:
            raise TransformError(f"op {op.debug_name()} is in pipeline stage {stage} on IPU "
                                 f"{ipu}, but stage {stage} runs on IPU {ipus[stage]}: a "
                                 f"stage's ops share one IPU")
        order.of[op.id] = stage
    if sorted(ipus) != list(range(len(ipus))):
        raise TransformError(f"the pipeline stages {sorted(ipus)} are not numbered 0 to "
                             f"{len(ipus) - 1} without gaps")
    order.ipu_of_stage = [ipus[stage] for stage in range(len(ipus))]


def _forward_stages(forward: list[Op], order: _Stages) -> None:
    from_inputs: set[int] = set()
    for op in forward:
        if any(_computed_from_inputs(t, from_inputs) for t in op.inputs):
            from_inputs.add(op.id)
            lowest = max((order.of[p.id] for t in op.inputs
                          if (p := t.producer) is not None and p.id in order.of), default=0)
            stage = order.earliest(op, lowest, order.loss_stage, grow=True)
            assert stage is not None
            order.of[op.id] = stage
    for op in reversed(forward):
        staged = [order.of[r.id] for t in op.outputs for r in t.consumers if r.id in order.of]
        if op.id in from_inputs:
            if staged:  # as late as its readers allow: a loss's mask of the labels
                order.of[op.id] = order.latest(op, order.of[op.id], min(staged)) \
                    or order.of[op.id]
            continue
        stage = order.latest(op, 0, min(staged, default=order.loss_stage))
        if stage is None:
            stage = order.earliest(op, 0, order.loss_stage, grow=True)
            assert stage is not None
        order.of[op.id] = stage


def _computed_from_inputs(tensor: Tensor, from_inputs: set[int]) -> bool:
    """Whether ``tensor`` depends on a model input (not on weights and constants alone)."""
    if tensor.producer is None:
        return not is_weight(tensor)
    return tensor.producer.id in from_inputs


def _backward_stages(backward: list[Op], order: _Stages, gradients: set[int]) -> None:
    last = order.loss_stage
    for op in backward:
        lowest = max([last, *(order.of[p.id] for t in op.inputs
                              if (p := t.producer) is not None and p.id in order.of)])
        stage = order.earliest(op, lowest, 2 * last, grow=False)
        if stage is None:  # the backward pass has left the op's IPU: it stays where it is
            stage = lowest
            order.moved[op.id] = order.ipu(lowest)
        order.of[op.id] = stage
    for op in reversed(backward):
        if op.id in gradients:
            continue
        readers = [order.of[r.id] for t in op.outputs for r in t.consumers]
        if not readers:
            continue
        later = order.latest(op, order.of[op.id], min(readers))
        if later is not None:
            order.of[op.id] = later


def gradient_chain_ops(schedule: list[Op], backward_ids: set[int], registry: OpRegistry
                       ) -> set[int]:
    """Ids of the backward ops computing one weight's gradient on its way to the update:
    the updates, and the ops reading a result of the backward pass whose results reach the
    update of that one weight alone (an input's gradient reaches every weight before it,
    and an op reading only forward results is no gradient yet)."""
    reached: dict[int, set[str]] = {}
    for op in reversed(schedule):
        if op.id not in backward_ids:
            continue
        updated = registry.layout_rule(op).updated_weight(op)
        found = {op.input(updated).id} if updated is not None else set()
        for tensor in op.outputs:
            for reader in tensor.consumers:
                found |= reached.get(reader.id, set())
        reached[op.id] = found
    return {op.id for op in schedule if op.id in backward_ids and len(reached[op.id]) == 1
            and (registry.layout_rule(op).updated_weight(op) is not None
                 or any(t.producer is not None and t.producer.id in backward_ids
                        for t in op.inputs))}


def _check_order(schedule: list[Op], stages: dict[int, int]) -> None:
    for op in schedule:
        for tensor in op.inputs:
            producer = tensor.producer
            if producer is not None and stages[producer.id] > stages[op.id]:
                raise TransformError(
                    f"op {op.debug_name()} in pipeline stage {stages[op.id]} reads "
                    f"{tensor.id!r}, which {producer.debug_name()} makes in the later stage "
                    f"{stages[producer.id]}")
