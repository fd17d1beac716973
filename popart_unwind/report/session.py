"""One planning session end to end, without touching files: transforms, our plan, the
baselines, and every plan costed on the same IPU Model.

The baselines never see our mappings: the PopART heuristic and the linear plan return
mappings of their own, and the cost model scores each plan from its mappings on the one IR.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from popart_unwind.cost.walk import evaluate
from popart_unwind.errors import (
    IgnoredAttributeWarning,
    PlanError,
    TransformError,
    TransformWarning,
)
from popart_unwind.ir import Ir, TensorType
from popart_unwind.ir.tile_mapping import (
    ExpandedLayouts,
    TileIntervals,
    held_layout,
    tile_array,
)
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.machine.count_memo import remembered_counts
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.coverage import ops_without_rule
from popart_unwind.ops.ipu_copy import tensor_ipus
from popart_unwind.ops.linalg import MEMORY_PROPORTION_ATTRIBUTE
from popart_unwind.options import SessionOptions
from popart_unwind.report import forked
from popart_unwind.report.plan_file import TensorDecision
from popart_unwind.report.progress import StageProgress

#: What ``--baseline`` compares our plan with.
#: The most IPUs a machine is planned for: Graphcore's largest system, a Bow Pod1024.
#: A placement naming an IPU beyond it is refused rather than sizing a machine from it
#: (``__ipu_number`` 1,000,000 took 35 s and 1.3 GB to plan one matmul).
MAX_IPUS = 1024

BASELINE_PLANS = {"popart": ("popart", "linear"), "linear": ("linear",), "none": ()}

TensorKey = tuple[str, str]  # (graph id, tensor id)


@dataclasses.dataclass(frozen=True)
class PlannedOp:
    """A matmul or convolution: how each plan computes it and what it costs there."""

    graph_id: str
    op_id: int
    name: str
    type: str
    #: plan name -> the op's plan as the plan file records it
    plans: dict[str, dict[str, Any]]
    #: plan name -> the op's cycles (input exchange, partial sums, compute)
    cycles: dict[str, int]


@dataclasses.dataclass
class PlanRun:
    """Everything the outputs are made of."""

    ir: Ir
    model: IpuModel
    algorithm: str
    plan: Any  # transforms.unwind_layouts Plan
    decisions: list[TensorDecision]
    #: plan name ("ours", "popart", "linear") -> tensor key -> flat tiles
    layouts: dict[str, ExpandedLayouts]
    #: plan name -> tensor key -> (method, explanation), for the baselines
    methods: dict[str, dict[TensorKey, tuple[str, str]]]
    #: plan name -> cost report (cost.CostReport); empty until ``cost_plans``
    costs: dict[str, Any]
    #: op type -> how many ops of the planned IR have no layout rule (barriers)
    ops_without_rule: dict[str, int]
    #: plan name -> (graph id, op id) -> the matmul plan chosen for each op the plan chose
    #: one for (the others are planned alone)
    op_plans: dict[str, dict[tuple[str, int], Any]] = dataclasses.field(default_factory=dict)
    #: When the plan did not fit and the options asked for it, the memory settings tried
    #: (report.memory_search.MemorySearch); None otherwise
    memory_search: Any = None

    def summaries(self) -> dict[str, dict[str, Any]]:
        return {name: dict(report.summary()) for name, report in self.costs.items()}

    @functools.cached_property
    def planned_ops(self) -> list[PlannedOp]:
        """Every matmul and convolution with a plan (all graphs, schedule order): its plan
        and cycles under each plan costed (made once: the plan file and the report read
        it)."""
        rows = {name: {(row.graph_id, row.op_id): row for row in report.ops}
                for name, report in self.costs.items()}
        targets = {name: TileTarget(self.model).with_plans(self.op_plans.get(name, {}))
                   for name in self.costs}
        found = []
        for graph in self.ir.graphs:
            for op in graph.ops:
                rule = REGISTRY.layout_rule(op)
                records = {name: rule.plan_record(op, target)
                           for name, target in targets.items()}
                if all(record is None for record in records.values()):
                    continue
                found.append(PlannedOp(
                    graph.id, op.id, op.name or op.debug_name(), op.type.name,
                    {name: record for name, record in records.items() if record is not None},
                    {name: rows[name][(graph.id, op.id)].total_cycles for name in rows
                     if (graph.id, op.id) in rows[name]}))
        return found

    def weights_by_ipu(self) -> list[tuple[str, int, int]]:
        """(name, IPU, bytes) of each weight (Variable) of the main graph under our plan's
        placement, in the order the model first reads them."""
        main = self.ir.main_graph
        placed = tensor_ipus(self.ir) if self.model.ipus > 1 else {}
        schedule = main.schedule()
        loss = self.ir.final_loss_id
        if loss is not None and main.has_tensor(loss):  # the forward pass's order
            from popart_unwind.training import loss_forward_ops

            schedule = loss_forward_ops(main, main.tensor(loss))
        position = {op.id: k for k, op in enumerate(schedule)}
        weights = [t for t in main.producerless_tensors()
                   if t.tensor_type is TensorType.VARIABLE]
        weights.sort(key=lambda t: min((position[op.id] for op in t.consumers
                                        if op.id in position), default=len(position)))
        return [(t.id, placed.get((main.id, t.id), 0),
                 t.nelms() * self.model.dtype_size(t.dtype)) for t in weights]

    def planner(self) -> dict[str, Any]:
        """The solver's own account: its name and its score on the unwinding graph (the
        abstract layouts it solves over, not the plan's objective on concrete tiles, which
        the summary gives: named apart so that no two figures are both "objective")."""
        return {"algorithm": self.algorithm,
                "unwinding_score": float(self.plan.objective),
                "unwinding_upper_bound": float(self.plan.upper_bound),
                "proven_optimal": bool(getattr(self.plan, "proven_optimal", False))}


def _placement() -> tuple[str, ...]:
    """The placement transforms, which ``transform`` runs last before the planner."""
    from popart_unwind.transforms import registry

    return (registry.SPLIT_BY_MEMORY, registry.AUTO_VIRTUAL_GRAPH,
            registry.INFER_PIPELINE_STAGES, registry.INTER_IPU_COPY, registry.PIPELINE,
            registry.MERGE_COPIES)  # last before the planner


def leading_transforms(options: SessionOptions) -> list[str]:
    """The transforms ``transform`` runs first, in order: the session's pipeline less the
    planner and the placement transforms."""
    from popart_unwind.transforms import registry

    return [name for name in registry.pipeline_names(options)
            if name != registry.UNWIND_LAYOUTS and name not in _placement()]


def transform(ir: Ir, done: Collection[str] = ()) -> Ir:
    """The session's transform pipeline, less the planner (run next with our target) and
    the transforms ``done`` names (already run on ``ir``).

    Returns the IR the PopART baseline plans: ``ir`` itself, unless ours is split over
    IPUs by SplitByMemory; PopART's split is then AutoVirtualGraph's, made on a copy of
    the model taken before the split (sharing its weights). When that split cannot be
    pipelined (it copies a weight the step updates between IPUs, which PopART refuses
    when pipelining), the baseline takes ours, with a TransformWarning saying so."""
    from popart_unwind.transforms import registry

    names = [name for name in registry.pipeline_names(ir.options)
             if name != registry.UNWIND_LAYOUTS]
    placement = _placement()
    placing = [name for name in names if name in placement]
    registry.run_pipeline(ir, [name for name in names
                               if name not in placing and name not in done])
    split_ours = registry.SPLIT_BY_MEMORY in placing
    baseline = ir.copy() if split_ours else ir
    spare = ir.copy() if split_ours and ir.options.enable_pipelining else None
    registry.run_pipeline(ir, placing)
    if baseline is ir:
        return ir
    baseline.options = dataclasses.replace(ir.options, auto_split="popart")
    try:
        registry.run_pipeline(baseline, [name for name in registry.pipeline_names(
            baseline.options) if name in placement])
    except TransformError as error:
        if spare is None:
            raise
        warnings.warn(f"PopART's AutoVirtualGraph split cannot be pipelined ({error}); "
                      f"the PopART baseline is planned on our split", TransformWarning,
                      stacklevel=2)
        spare.options = ir.options
        registry.run_pipeline(spare, placing)
        return spare
    return baseline


def plan_session(ir: Ir, model: IpuModel, algorithm: str | None, baseline: str,
                 progress: StageProgress, baseline_ir: Ir | None = None) -> PlanRun:
    """Plan ``ir`` (already transformed) and cost it beside the baselines; the PopART
    baseline plans ``baseline_ir`` (``transform``'s answer; default ``ir``)."""
    return cost_plans(plan_ours(ir, model, algorithm, progress), baseline, progress,
                      baseline_ir)


def plan_ours(ir: Ir, model: IpuModel, algorithm: str | None,
              progress: StageProgress) -> PlanRun:
    """Our plan of ``ir`` (already transformed), not yet costed: ``cost_plans`` costs it.
    Apart from ``plan_session`` so that a plan the memory search may discard is costed
    without baselines, which would be planned and costed for nothing."""
    from popart_unwind.transforms.unwind_layouts import plan_ir

    options = ir.options
    model = machine_for(ir, model)
    _warn_unread_memory_proportions(ir)
    if algorithm is not None:
        options = dataclasses.replace(options, unwind_algorithm=algorithm)
    with progress.stage("plan"):
        plan = plan_ir(ir, TileTarget(model), options, progress=progress.update)
    decisions = _decisions(ir, plan, tensor_ipus(ir) if model.ipus > 1 else {})
    layouts = {"ours": ExpandedLayouts(
        {d.key: _held(d.tile_mapping, model, int(np.prod(d.shape))) for d in decisions},
        model.tiles_per_ipu)}
    methods: dict[str, dict[TensorKey, tuple[str, str]]] = {
        "ours": {(d.graph_id, d.tensor_id): (d.method, d.explanation) for d in decisions}}
    return PlanRun(ir, model, options.unwind_algorithm, plan, decisions, layouts, methods,
                   {}, ops_without_rule(ir), {"ours": dict(plan.op_plans)})


def cost_plans(run: PlanRun, baseline: str, progress: StageProgress,
               baseline_ir: Ir | None = None, side_by_side: bool = False) -> PlanRun:
    """``run`` with the baselines ``baseline`` names planned and every plan not yet costed
    costed (``run``, changed in place); the PopART baseline plans ``baseline_ir``
    (default ``run.ir``).

    With ``side_by_side`` (where the system can fork and this process has more than one
    core) the first plan is costed here while each other is costed in a child process
    forked from this one, as many at a time as there are cores (``report/forked.py``):
    the same reports, in less time, for each child's memory beside this process's. The
    command asks for it after a memory search, whose settings were costed so already;
    otherwise the walks run here, one after another, and count a layout two plans share
    once."""
    ir, model = run.ir, run.model
    planned_irs = {"popart": baseline_ir if baseline_ir is not None else ir}
    with progress.stage("baseline"):
        for name in BASELINE_PLANS[baseline]:
            run.layouts[name], run.methods[name], run.op_plans[name] = _baseline(
                name, planned_irs.get(name, ir), model)
    todo = [name for name in run.layouts if name not in run.costs]

    def walk(name: str) -> Any:
        return evaluate(planned_irs.get(name, ir), TileTarget(model),
                        mappings=run.layouts[name].held, op_plans=run.op_plans[name])

    with progress.stage("evaluate"):
        if side_by_side and len(todo) > 1 and forked.available() \
                and forked.usable_cores() > 1:
            here, apart = todo[0], todo[1:]

            def started(index: int, done: int) -> None:
                progress.update(apart[index], done, len(todo))

            def meanwhile() -> None:
                progress.update(here, 0, len(todo))
                run.costs[here] = walk(here)

            answers = forked.run_forked([functools.partial(walk, name) for name in apart],
                                        forked.usable_cores(), started, meanwhile)
            for name, (report, raised) in zip(apart, answers, strict=True):
                forked.raise_again(raised)  # as if raised here, in the plans' order
                run.costs[name] = report
            run.costs = {name: run.costs[name] for name in run.layouts}  # the plans' order
            return run
        # the walks share what they count (``remembered_counts``): a tensor laid out alike
        # in two plans is counted once
        with remembered_counts():
            for step, name in enumerate(todo):
                progress.update(name, step, len(todo))
                run.costs[name] = walk(name)
    return run


def _baseline(name: str, ir: Ir, model: IpuModel
              ) -> tuple[ExpandedLayouts, dict[TensorKey, tuple[str, str]],
                         dict[tuple[str, int], Any]]:
    """A baseline's mappings (held as intervals), how it decided each, and its matmul
    plans."""
    if name == "popart":
        from popart_unwind.baselines.popart_baseline import popart_baseline

        baseline = popart_baseline(ir, TileTarget(model))
        methods = {(d.graph_id, d.tensor_id): (d.method, d.explanation)
                   for d in baseline.decisions}
        held = ExpandedLayouts.of_arrays(baseline.mappings, model.tiles_per_ipu)
        return held, methods, dict(baseline.op_plans)
    from popart_unwind.baselines.linear_plan import linear_plan

    held = ExpandedLayouts.of_arrays(linear_plan(ir, TileTarget(model)), model.tiles_per_ipu)
    return held, dict.fromkeys(held, ("linear", "linear mapping")), {}


def _held(layout: Any, model: IpuModel, numel: int) -> np.ndarray | TileIntervals:
    """One of our plan's layouts (intervals, or a mapping in Poplar's format of ``numel``
    elements) as ``held_layout`` keeps it."""
    if isinstance(layout, TileIntervals) and layout.tiles is None:
        return layout
    return held_layout(tile_array(layout, numel, model.tiles_per_ipu), model.tiles_per_ipu)


def _decisions(ir: Ir, plan: Any, ipus: Mapping[TensorKey, int]) -> list[TensorDecision]:
    """Our plan's entries: every producer-less tensor (graph order, creation order), then
    any other tensor the planner mapped (call outputs), each exactly once; ``ipus``: the
    IPU of each tensor not on IPU 0."""
    planned = plan.tensors.values() if isinstance(plan.tensors, Mapping) else plan.tensors
    entries = {(e.graph_id, e.tensor_id): e for e in planned}
    ordered: list[TensorKey] = []
    for graph in ir.graphs:
        for tensor in graph.producerless_tensors():
            key = (graph.id, tensor.id)
            if key not in entries:
                raise PlanError(f"the planner left {tensor.describe()} without a mapping")
            ordered.append(key)
    seen = set(ordered)
    ordered += sorted(key for key in entries if key not in seen)
    return [_decision(entries[key], ipus.get(key, 0)) for key in ordered]


def _decision(entry: Any, ipu: int) -> TensorDecision:
    return TensorDecision(entry.graph_id, entry.tensor_id, tuple(int(d) for d in entry.shape),
                          str(entry.dtype), entry.tile_mapping, str(entry.method),
                          str(entry.explanation), ipu)


def step_kind(ir: Ir) -> str:
    """``training`` when the model is a training step (it has a loss the backward pass
    starts from, or updates a weight), else ``inference``: the plan file's ``model.kind``."""
    if ir.final_loss_id is not None or any(
            REGISTRY.layout_rule(op).updated_weight(op) is not None for op in ir.all_ops()):
        return "training"
    return "inference"


def _warn_unread_memory_proportions(ir: Ir) -> None:
    """A matmul's or a convolution's own proportion bounds its plan; on any other op (a
    lookup, whose slice plan PopART also bounds with it; a product the planner computes
    without a plan) it is not read: say so once. The op's rule says whether a plan computes
    it (``LayoutRule.has_plan``)."""
    carriers = sorted(op.debug_name() for op in ir.all_ops()
                      if MEMORY_PROPORTION_ATTRIBUTE in op.attributes
                      and not REGISTRY.layout_rule(op).has_plan(op))
    if carriers:
        warnings.warn(f"{len(carriers)} op(s) without a matmul or convolution plan carry "
                      f"PopART's per-op {MEMORY_PROPORTION_ATTRIBUTE} (first: "
                      f"{carriers[0]}), which is not read for them: the planner models no "
                      f"plan of theirs that it would bound", IgnoredAttributeWarning,
                      stacklevel=2)


def machine_for(ir: Ir, model: IpuModel) -> IpuModel:
    """``model`` with as many IPUs as the session's options give (``ipus``), and the share
    of tile memory they give matmul plans (``available_memory_proportion``)."""
    options = ir.options
    if (model.ipus, model.available_memory_proportion) == (
            options.ipus, options.available_memory_proportion):
        return model
    return dataclasses.replace(model, ipus=options.ipus,
                               available_memory_proportion=options.available_memory_proportion)


def placed_options(ir: Ir, ipus: int | None, pipelined: bool = False) -> SessionOptions:
    """The session's options for a machine of ``ipus`` IPUs (None: as many as the model's
    placement names, one when it has none), as the command's ``--ipus`` sets them: a model
    placed by its ``__ipu_number`` attributes keeps its placement (``manual``), another is
    split for it (``auto``: SplitByMemory, the PopART baseline by AutoVirtualGraph) when
    there is more than one IPU. A mode or IPU
    count set as a session option is kept. ``pipelined`` (the command's ``--pipeline``)
    runs the IPUs as a pipeline. A placement naming an IPU the machine lacks, or a
    pipeline of one IPU, is a PlanError naming it."""
    options = ir.options
    placed = [op for op in ir.main_graph.ops if op.settings.has("vgraph_id")]
    highest = max((op.settings.vgraph_id for op in placed), default=-1)
    if highest >= MAX_IPUS:
        op = max(placed, key=lambda o: o.settings.vgraph_id)
        raise PlanError(f"op {op.debug_name()} is placed on IPU {op.settings.vgraph_id} "
                        f"(__ipu_number), beyond the largest machine planned for "
                        f"({MAX_IPUS:,} IPUs, a Bow Pod1024)")
    if ipus is None:
        ipus = options.ipus if options.ipus > 1 else max(highest + 1, 1)
    if ipus > MAX_IPUS:
        raise PlanError(f"a machine of {ipus:,} IPUs is beyond the largest planned for "
                        f"({MAX_IPUS:,} IPUs, a Bow Pod1024)")
    outside = [op for op in placed if not 0 <= op.settings.vgraph_id < ipus]
    if outside:
        op = outside[0]
        raise PlanError(f"op {op.debug_name()} is placed on IPU {op.settings.vgraph_id} "
                        f"(__ipu_number), but the machine has {ipus} IPU"
                        f"{'s' if ipus > 1 else ''}; plan with --ipus "
                        f"{op.settings.vgraph_id + 1} or more")
    pipelined = pipelined or options.enable_pipelining
    if pipelined and ipus < 2:
        raise PlanError("a pipeline needs a model over several IPUs: give --ipus 2 or more "
                        "(or a model placed on several IPUs)")
    mode = options.virtual_graph_mode
    if ipus == 1:
        mode = "off"
    elif mode == "off":
        mode = "manual" if placed else "auto"
    return dataclasses.replace(options, ipus=ipus, virtual_graph_mode=mode,
                               enable_pipelining=pipelined)

