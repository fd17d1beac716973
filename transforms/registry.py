"""The transform registry: transforms by name, applied once each in the pipeline's order.

PopART applies each transform by id from ``Ir::prepare`` and gates each on a session
option. Here the order is data (``SessionOptions.pipeline``) and the registry is the one
place that applies a transform. It hands each application a fresh
:class:`~popart_unwind.rewrite.Rewriter` (built with the transform's op registry), through
which the transform makes every change; the rewriter's record, not the transform's word,
says whether the IR changed, and an answer that disagrees with the record is always an
error. The registry is also where declared conditions are checked, when asked:

- before: every assumed condition holds, and the IR is well formed;
- after: every guaranteed condition holds; every preserved condition that held before
  still holds; the IR is well formed with call sites in step; no graph became
  unreachable; and nothing changed outside the rewriter (the IR's JSON is compared, which
  only checking pays for).
"""

from __future__ import annotations

from collections.abc import Sequence

from popart_unwind.errors import TransformError
from popart_unwind.ir import Graph, Ir
from popart_unwind.options import SessionOptions
from popart_unwind.rewrite import Rewriter

from .base import Transform
from .checks import structural_violations
from .conditions import Condition, check_conditions
from .helpers import unreachable_graphs

#: The transform that plans layouts; it joins the pipeline's end when enabled.
UNWIND_LAYOUTS = "UnwindLayouts"
#: The transform that clones forward ops into the backward pass; it joins the pipeline
#: (before the planner) when ``SessionOptions.recompute`` is not ``none``.
EXPLICIT_RECOMPUTE = "ExplicitRecompute"
#: The transform that makes a forward model a training step (loss, backward pass, updates);
#: it joins the pipeline after InferShapes when ``SessionOptions.loss`` is set.
AUTODIFF = "Autodiff"
#: The transform that cuts marked matmuls into pieces (in the default pipeline: it changes
#: nothing when no matmul is marked and ``serialize_matmuls`` is empty).
SERIALIZE_MATMULS = "SerializeMatMuls"
#: The transform that turns gradient sums into chains of additions; it joins the pipeline
#: (before ExplicitRecompute) when ``SessionOptions.decompose_grad_sum`` is set.
DECOMPOSE_GRAD_SUM = "DecomposeGradSum"
#: The transform that calls one subgraph for each repeated sequence of ops; it joins the
#: pipeline (last before the planner) when ``SessionOptions.enable_outlining`` is set.
SUBGRAPH_OUTLINE = "SubgraphOutline"
#: The transforms that place ops on IPUs and copy between them; they join the pipeline
#: (before the planner) when ``SessionOptions.virtual_graph_mode`` is ``auto`` (a split,
#: as ``auto_split`` says, and the copies) or ``manual`` (the copies).
AUTO_VIRTUAL_GRAPH = "AutoVirtualGraph"
SPLIT_BY_MEMORY = "SplitByMemory"
INTER_IPU_COPY = "InterIpuCopy"
#: The transforms that make the IPUs a pipeline; they join the pipeline (stages before
#: InterIpuCopy, stashes after) when ``SessionOptions.enable_pipelining`` is set.
INFER_PIPELINE_STAGES = "InferPipelineStages"
PIPELINE = "Pipeline"
#: The transform that joins the copies an op reads together; it joins the pipeline (after
#: InterIpuCopy) on several IPUs when ``enable_pipelining`` is not set, as in PopART.
MERGE_COPIES = "MergeCopies"

_TRANSFORMS: dict[str, type[Transform]] = {}


def register(cls: type[Transform]) -> type[Transform]:
    """Class decorator adding a transform; names and ids must be unique."""
    if not cls.name or not isinstance(cls.id, int) or cls.id < 0:
        raise TransformError(f"transform class {cls.__name__} needs a name and an id >= 0")
    for other in _TRANSFORMS.values():
        if other.name == cls.name or other.id == cls.id:
            raise TransformError(f"transform {cls.name!r} (id {cls.id}) clashes with "
                                 f"{other.name!r} (id {other.id})")
    _TRANSFORMS[cls.name] = cls
    return cls


def names() -> list[str]:
    """Registered transform names, in id order."""
    return _known_names()


def _known_names() -> list[str]:
    return [cls.name for cls in sorted(_TRANSFORMS.values(), key=lambda cls: cls.id)]


def get(name: str) -> Transform:
    """The transform called ``name``, with its default options."""
    try:
        return _TRANSFORMS[name]()
    except KeyError:
        raise TransformError(f"unknown transform {name!r}; known: {_known_names()}") from None


def apply(transform: str | Transform, ir_or_graph: Ir | Graph,
          check: bool | None = None) -> bool:
    """Apply a transform (by name or as an object) once; True iff it changed the IR, as
    the rewriter handed to it recorded.

    An ``Ir`` stands for its main graph. ``check`` defaults to the IR's
    ``options.check_transform_conditions``.
    """
    if isinstance(transform, str):
        transform = get(transform)
    graph = _as_graph(ir_or_graph)
    ir = graph.ir
    if check is None:
        check = ir.options.check_transform_conditions
    rewriter = Rewriter(transform.op_registry)
    if not check:
        return _hold_to_record(transform, _run(transform, graph, rewriter), rewriter)
    before = check_conditions(ir)
    for condition in Condition:
        if condition in transform.assumes and before[condition]:
            raise TransformError(f"transform {transform.name} assumes {condition.name}, which "
                                 f"does not hold: {before[condition][0]}")
    problems = structural_violations(ir)
    if problems:
        raise TransformError(f"the IR handed to transform {transform.name} is malformed: "
                             f"{problems[0]}")
    dead_before = [g.id for g in unreachable_graphs(ir)]
    snapshot = ir.to_json()
    claimed = _run(transform, graph, rewriter)
    _check_after(transform, ir, before, dead_before)
    if not rewriter.changes and ir.to_json() != snapshot:
        raise TransformError(f"transform {transform.name} changed the IR outside the "
                             f"rewriter it was handed")
    return _hold_to_record(transform, claimed, rewriter)


def pipeline_names(options: SessionOptions) -> list[str]:
    """The transforms a session runs: ``options.pipeline`` (with Autodiff after InferShapes
    when ``loss`` is set), then the memory transforms its options ask for (DecomposeGradSum
    when ``decompose_grad_sum`` is set, ExplicitRecompute when ``recompute`` is not
    ``none``: after MergeDuplicateOps, which would merge the clones back; SubgraphOutline
    when ``enable_outlining`` is set, after them all, as PopART outlines the prepared
    graph), then the split ``auto_split`` names (SplitByMemory or AutoVirtualGraph) when
    ``virtual_graph_mode`` is ``auto``, InferPipelineStages when ``enable_pipelining`` is
    set, InterIpuCopy when ``virtual_graph_mode`` is not ``off``, then Pipeline when
    ``enable_pipelining`` is set or else MergeCopies (PopART's order), then UnwindLayouts
    when ``enable_unwind_layouts`` is set and the transform is registered."""
    split = SPLIT_BY_MEMORY if options.auto_split == "memory" else AUTO_VIRTUAL_GRAPH
    multi_ipu = options.virtual_graph_mode != "off"
    asked_for = (  # (whether the options ask for it, transform), in the order they run
        (options.decompose_grad_sum, DECOMPOSE_GRAD_SUM),
        (options.recompute != "none", EXPLICIT_RECOMPUTE),
        (options.enable_outlining, SUBGRAPH_OUTLINE),
        (options.virtual_graph_mode == "auto", split),
        (options.enable_pipelining, INFER_PIPELINE_STAGES),
        (multi_ipu, INTER_IPU_COPY),
        (options.enable_pipelining, PIPELINE),
        (multi_ipu and not options.enable_pipelining, MERGE_COPIES),
        (options.enable_unwind_layouts and UNWIND_LAYOUTS in _TRANSFORMS, UNWIND_LAYOUTS),
    )
    pipeline = list(options.pipeline)
    if options.loss and AUTODIFF not in pipeline:
        # first after shape inference: the loss may be a tensor no output reads, which
        # Canonicalize and Prune would remove; the backward pass is then canonicalized,
        # pruned and merged with the forward (PopART runs its patterns after autodiff too)
        after = int(bool(pipeline) and pipeline[0] == "InferShapes")
        pipeline.insert(after, AUTODIFF)
    for asked, name in asked_for:
        if asked and name not in pipeline:
            pipeline.append(name)
    return pipeline


def run_pipeline(ir: Ir, names: Sequence[str] | None = None) -> dict[str, bool]:
    """Apply each transform of ``names`` (default: the session's pipeline) once, in order.

    Every name is validated before anything runs. Returns whether each one changed the IR.
    """
    if isinstance(ir.options.pipeline if names is None else names, str):
        raise TransformError("a pipeline is a sequence of transform names, not one string")
    pipeline = pipeline_names(ir.options) if names is None else list(names)
    unknown = [name for name in pipeline if name not in _TRANSFORMS]
    if unknown:
        raise TransformError(f"unknown transform(s) {unknown} in the pipeline; "
                             f"known: {_known_names()}")
    repeated = sorted({name for name in pipeline if pipeline.count(name) > 1})
    if repeated:
        raise TransformError(f"transform(s) {repeated} appear more than once in the pipeline; "
                             f"each transform runs once")
    return {name: apply(name, ir) for name in pipeline}


def _run(transform: Transform, graph: Graph, rewriter: Rewriter) -> bool:
    claimed = transform.apply(graph, rewriter)
    if not isinstance(claimed, bool):
        raise TransformError(f"transform {transform.name}.apply returned "
                             f"{type(claimed).__name__}, not bool")
    return claimed


def _hold_to_record(transform: Transform, claimed: bool, rewriter: Rewriter) -> bool:
    """Whether the IR changed, by the record of the application's own (fresh) rewriter;
    a transform whose answer disagrees with it has a bug that would mislead its caller."""
    changed = rewriter.changes > 0
    if claimed and not changed:
        raise TransformError(f"transform {transform.name} reported a change but left the IR "
                             f"as it was")
    if changed and not claimed:
        made = "; ".join(rewriter.log[:3])
        raise TransformError(f"transform {transform.name} changed the IR but reported no "
                             f"change" + (f" ({made})" if made else ""))
    return changed


def _check_after(transform: Transform, ir: Ir, before: dict[Condition, list[str]],
                 dead_before: list[str]) -> None:
    after = check_conditions(ir)
    for condition in Condition:
        if not after[condition]:
            continue
        if condition in transform.guarantees:
            raise TransformError(f"transform {transform.name} guarantees {condition.name}, "
                                 f"which does not hold after it: {after[condition][0]}")
        if condition in transform.preserves and not before[condition]:
            raise TransformError(f"transform {transform.name} preserves {condition.name}, "
                                 f"which held before it but not after: {after[condition][0]}")
    problems = structural_violations(ir)
    if problems:
        raise TransformError(f"transform {transform.name} left the IR malformed: {problems[0]}")
    new_dead = [g.id for g in unreachable_graphs(ir) if g.id not in dead_before]
    if new_dead:
        raise TransformError(f"transform {transform.name} left graph {new_dead[0]!r} "
                             f"unreachable from the main graph")


def _as_graph(ir_or_graph: Ir | Graph) -> Graph:
    if isinstance(ir_or_graph, Ir):
        return ir_or_graph.main_graph
    if isinstance(ir_or_graph, Graph):
        return ir_or_graph
    raise TransformError(f"transforms apply to an Ir or a Graph, not "
                         f"{type(ir_or_graph).__name__}")
