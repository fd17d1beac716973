"""``plan_ir``: the layout planner end to end, and the ``Plan`` it returns.

choose matmul plans (``start_tiles``: each layer's as ``options.matmul_plans`` says) ->
emit (the unwinding problem from the IR) -> solve (``options.unwind_algorithm``) ->
realize (concrete tiles per sink) -> validate -> write ``tensor.tile_mapping`` (Poplar
format) on every producer-less tensor and call output, through a rewriter (the
UnwindLayouts transform's, or one of ``plan_ir``'s own). The Plan keeps, per planned tensor,
its mapping, how it was decided and the paths that explain it, the solver's objective and
upper bound, timings, and the unwind graph, solution and realizer for reports.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from math import prod
from typing import Any

import numpy as np

from popart_unwind.cost import computed_layouts
from popart_unwind.cost.rotation import linear_rotation_starts
from popart_unwind.errors import PlanError
from popart_unwind.ir import Ir
from popart_unwind.ir.tensor import Tensor, qualified_id
from popart_unwind.ir.tile_mapping import TileIntervals, read_only_tiles, tile_dtype, tile_mapping
from popart_unwind.layers import state_layouts
from popart_unwind.machine.interface import MatmulPlan, TileMachine
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.ipu_copy import tensor_ipus
from popart_unwind.ops.registry import OpRegistry
from popart_unwind.options import SessionOptions
from popart_unwind.rewrite import Rewriter
from popart_unwind.unwind import Solution, TensorId, UnwindGraph
from popart_unwind.unwind.solvers import cyclic_gc_paused

from .emit import Emitter, Progress, emit_ir
from .realize import Realizer, validate
from .start_tiles import planner_plans

UNWOUND, LINEAR, PARTLY = "unwound", "linear", "partly unwound"
#: An optimizer state, laid out as the gradient it accumulates.
AS_UPDATER = "as its updater"


@dataclasses.dataclass(frozen=True)
class PlannedTensor:
    """The plan for one tensor: its mapping, and how and why it was chosen."""

    graph_id: str
    tensor_id: str
    shape: tuple[int, ...]
    dtype: str
    #: Poplar's format, held compactly (a sequence of per-tile run lists).
    tile_mapping: TileIntervals = dataclasses.field(repr=False)
    #: "unwound" (every element from a path), "linear", "partly unwound" or, for an
    #: optimizer state, "as its updater".
    method: str
    explanation: str
    num_tiles: int = dataclasses.field(repr=False, compare=False)

    @property
    def tiles(self) -> np.ndarray:
        """Each element's tile (flat, row-major): ``tile_mapping`` expanded (read-only)."""
        return read_only_tiles(self.tile_mapping, prod(self.shape), self.num_tiles,
                               f"tensor {self.tensor_id!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"graph": self.graph_id, "shape": list(self.shape), "dtype": self.dtype,
                "tile_mapping": [[list(iv) for iv in tile] for tile in self.tile_mapping],
                "method": self.method, "explanation": self.explanation}


@dataclasses.dataclass
class Plan:
    """A layout plan of a whole Ir (see the module docstring)."""

    tensors: list[PlannedTensor]
    objective: float
    upper_bound: float
    solver: str
    proven_optimal: bool
    num_tiles: int
    #: Seconds per stage: plans, emit, solve, realize, write, total.
    timings: dict[str, float]
    unwind_graph: UnwindGraph = dataclasses.field(repr=False)
    solution: Solution = dataclasses.field(repr=False)
    #: The concrete tiles of any unwind tensor (``realizer.tiles(t)``), for reports.
    realizer: Realizer = dataclasses.field(repr=False)
    #: Whether writing the plan changed any tensor's mapping on the Ir (by the rewriter's
    #: record).
    changed: bool = False
    #: (graph id, op id) -> the matmul plan chosen for each pass of a fully connected layer
    #: (every other matmul is planned alone).
    op_plans: dict[tuple[str, int], MatmulPlan] = dataclasses.field(default_factory=dict)

    def tensor(self, graph_id: str, tensor_id: str) -> PlannedTensor:
        for planned in self.tensors:
            if planned.graph_id == graph_id and planned.tensor_id == tensor_id:
                return planned
        raise PlanError(f"the plan has no tensor {tensor_id!r} in graph {graph_id!r}")

    def mappings(self) -> dict[tuple[str, str], TileIntervals]:
        """(graph id, tensor id) -> Poplar-format mapping."""
        return {(p.graph_id, p.tensor_id): p.tile_mapping for p in self.tensors}

    def counts(self) -> dict[str, int]:
        """How many tensors each method decided."""
        found = {UNWOUND: 0, PARTLY: 0, LINEAR: 0, AS_UPDATER: 0}
        for planned in self.tensors:
            found[planned.method] += 1
        return found

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tensors keyed ``graph/tensor`` outside the main graph."""
        return {
            "objective": self.objective, "upper_bound": self.upper_bound,
            "solver": self.solver, "proven_optimal": self.proven_optimal,
            "num_tiles": self.num_tiles, "timings": dict(self.timings),
            "tensors": {qualified_id(p.graph_id, p.tensor_id): p.to_dict()
                        for p in self.tensors},
        }


def plan_ir(ir: Ir, target: TileMachine, options: SessionOptions | None = None,
            progress: Progress | None = None, registry: OpRegistry = REGISTRY,
            write: bool = True, rewriter: Rewriter | None = None,
            op_plans: Mapping[tuple[str, int], MatmulPlan] | None = None) -> Plan:
    """Plan every producer-less tensor's (and call output's) layout and, unless ``write``
    is False, write the mappings onto the Ir through ``rewriter`` (default: one of its
    own). The matmul plans are chosen as ``options.matmul_plans`` says, unless
    ``op_plans`` gives them ((graph id, op id) -> plan; the others planned alone).
    ``progress(stage, done, total)`` is called as stages advance (stages: emit, solve,
    realize, write)."""
    with cyclic_gc_paused():
        return _plan_ir(ir, target, options, progress, registry, write, rewriter, op_plans)


def _plan_ir(ir: Ir, target: TileMachine, options: SessionOptions | None,
             progress: Progress | None, registry: OpRegistry, write: bool,
             rewriter: Rewriter | None,
             op_plans: Mapping[tuple[str, int], MatmulPlan] | None) -> Plan:
    options = options if options is not None else ir.options
    began = time.perf_counter()
    timings: dict[str, float] = {}
    op_plans = dict(op_plans) if op_plans is not None else planner_plans(
        ir, target, registry, options.matmul_plans,
        rotate=options.rotate_plan_start_tiles)
    target = target.with_plans(op_plans)  # its linear mapper starts at 0: equal Irs, equal plans
    timings["plans"] = _lap(began, timings)

    emitter = emit_ir(ir, target, options.unwind_valuations, registry, progress)
    timings["emit"] = _lap(began, timings)

    _report(progress, "solve", 0, 1)
    solution = emitter.graph.solve(options.unwind_algorithm)
    _report(progress, "solve", 1, 1)
    timings["solve"] = _lap(began, timings)

    realizer = Realizer(emitter, solution, options.balance_tile_memory,
                        tensor_ipus(ir) if target.num_ipus > 1 else None,
                        spread_statistics=options.spread_statistics_partners,
                        rotation_starts=linear_rotation_starts(ir, target, registry))
    sink_tiles = realizer.realize_sinks(
        None if progress is None else lambda done, total: progress("realize", done, total))
    planned = []
    for tensor, sink in emitter.planned:
        tiles = sink_tiles[sink]
        what = f"tensor {tensor.qualified_id!r}"
        validate(tiles, tensor.nelms(), target.num_tiles, what)
        planned.append(_planned(emitter, realizer, tensor, sink, tiles, target.num_tiles))
    realizer.compact()
    planned = _states_as_updaters(ir, planned, target, op_plans)
    timings["realize"] = _lap(began, timings)

    changed = False
    if write:
        rewriter = rewriter if rewriter is not None else Rewriter(registry)
        before = rewriter.changes
        _write(planned, ir, progress, rewriter)
        changed = rewriter.changes != before
    timings["write"] = _lap(began, timings)
    target.forget()  # the plan keeps its target (through the realizer), not its answers
    timings["total"] = time.perf_counter() - began
    return Plan(planned, float(solution.symbolic_score()), float(solution.upper_bound()),
                solution.algo, solution.proven_optimal, target.num_tiles, timings,
                emitter.graph, solution, realizer, changed, op_plans)


def _states_as_updaters(ir: Ir, planned: list[PlannedTensor], target: TileMachine,
                        op_plans: Mapping[tuple[str, int], MatmulPlan]
                        ) -> list[PlannedTensor]:
    """Each optimizer state laid out as its updater, the gradient it accumulates, is laid
    out under the plan (``layers.optimizer_state``): the solver weighs a state only as an
    elementwise partner, and a few elements it leaves elsewhere would each cost an
    exchange and its syncs at every update."""
    main = ir.main_graph
    # the plan's mappings as held (intervals): the walk expands one only while an op reads
    # it, and only a model with optimizer states walks at all
    mappings = {(p.graph_id, p.tensor_id): p.tile_mapping for p in planned}
    clones = state_layouts(main, lambda ids: computed_layouts(ir, target, mappings, ids,
                                                              dict(op_plans)))
    result = []
    for tensor in planned:
        clone = clones.get(tensor.tensor_id) if tensor.graph_id == main.id else None
        if clone is None:
            result.append(tensor)
            continue
        updater, flat = clone
        flat = flat.astype(tile_dtype(int(flat.max()) + 1 if flat.size else 1), copy=False)
        flat.flags.writeable = False
        result.append(dataclasses.replace(
            tensor, tile_mapping=tile_mapping(flat, tensor.num_tiles), method=AS_UPDATER,
            explanation=f"an optimizer state, laid out as its updater {updater!r} (the "
                        f"gradient it accumulates) is under the plan"))
    return result


def _lap(began: float, timings: dict[str, float]) -> float:
    return time.perf_counter() - began - sum(timings.values())


def _report(progress: Progress | None, stage: str, done: int, total: int) -> None:
    if progress is not None:
        progress(stage, done, total)


def _planned(emitter: Emitter, realizer: Realizer, tensor: Tensor, sink: TensorId,
             tiles: np.ndarray, num_tiles: int) -> PlannedTensor:
    numel = tensor.nelms()
    linear = realizer.linear_count(sink)
    method = LINEAR if linear == numel else UNWOUND if linear == 0 else PARTLY
    # the realizer's own (read-only) array when its dtype is already the narrowest: a
    # mapping that keeps its tile array shares it with the realizer
    shared = tiles.astype(tile_dtype(int(tiles.max()) + 1 if tiles.size else 1),
                          copy=False).view()
    shared.flags.writeable = False
    return PlannedTensor(tensor.graph.id, tensor.id, tuple(tensor.shape), tensor.dtype,
                         tile_mapping(shared, num_tiles), method,
                         explain(emitter, realizer, sink, numel), num_tiles)


def explain(emitter: Emitter, realizer: Realizer, sink: TensorId, numel: int) -> str:
    """Why a sink has its layout: one clause per solution path into it."""
    if numel == 0:
        return "empty tensor"
    clauses = []
    for path in realizer.solution.paths(sink):
        count = path.regions.total_elms()
        share = "all elements" if count == numel else f"{count} of {numel} elements"
        if path.src == sink and sink in emitter.own_layout_names and count == numel:
            where = ", on the least loaded tiles" if realizer.balance_memory else ""
            clauses.append(f"{share} in {emitter.own_layout_names[sink]}{where} (nothing "
                           f"wanted them elsewhere)")
            continue
        if path.src == sink:
            clauses.append(f"{share} mapped linearly (nothing wanted them elsewhere)")
            continue
        how = "as it is" if not len(path.chain) else f"through {path.chain!r}"
        clauses.append(f"{share} from {emitter.describe(path.src)} {how}")
    return "; ".join(clauses)


def _write(planned: list[PlannedTensor], ir: Ir, progress: Progress | None,
           rewriter: Rewriter) -> None:
    for done, entry in enumerate(planned, 1):
        tensor = ir.graph(entry.graph_id).tensor(entry.tensor_id)
        # immutable: the Ir and the plan share the mapping; an equal one is no change
        rewriter.set_tile_mapping(tensor, entry.tile_mapping)
        if progress is not None and (done % 256 == 0 or done == len(planned)):
            progress("write", done, len(planned))

