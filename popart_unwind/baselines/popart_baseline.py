"""PopART's own layout heuristic, as the baseline our plans are compared with.

PopART lays out a tensor no op produces by searching, depth first, from the tensor through
its consumers for an op that can *create* that input (a matmul operand, an embedding table),
passing only through ops that can *unwind* a layout back to their input (views, and the
elementwise ops PopART lets through); it then asks the best creator for its preferred
layout and unwinds it back along the path. Candidates that each cover part of the tensor
are stitched; whatever no candidate covers is mapped linearly. docs/baseline.md describes
each rule and where PopART does it.

A table that is both gathered from and, transposed, multiplied by (an embedding tied to an
LM head) is laid out for the Gather, as PopART does by default: ``GatherOpx`` creates its
table at the highest priority. ``tied_gather=True`` models PopART's ``TiedGatherPattern``
instead (off by default in PopART): such a Gather becomes a TiedGather whose creator
priority is -1, so the LM head's matmul lays the table out.

In a training step the matmuls of each fully connected layer are planned as PopART has
Poplibs plan them (``SessionOptions.enableFullyConnectedPass``, on by default): the forward,
backward and weight-update passes with ``fullyConnectedPass`` set, so that Poplibs chooses
one partition for the three (or separate ones when those are cheaper) before any operand is
created (``choose_plans`` with ``"poplibs"``). ``fully_connected_pass=False`` plans every
matmul alone. A matmul TiedGatherPattern matched is planned alone, as the pattern switches
the option off for it.
"""

from __future__ import annotations

import dataclasses
from math import prod
from typing import Any

import numpy as np

from popart_unwind.cost import computed_layouts
from popart_unwind.errors import PlanError
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.interpreter import AT_FIRST_CALL, Interpreter
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op, SubgraphOp
from popart_unwind.ir.tensor import Tensor
from popart_unwind.layers import choose_plans, state_layouts, tied_embeddings
from popart_unwind.machine.interface import MatmulPlan, TileMachine
from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import LayoutRule, planned_shape
from popart_unwind.unwind.solvers import cyclic_gc_paused

#: Chain ops that keep every input element in the output (so a chain of them covers all).
_SURJECTIVE = frozenset({"Reshape", "DimShuffle", "Reverse", "Expand"})
#: Chain ops that permute the elements (undone exactly by the mirror chain).
_BIJECTIVE = frozenset({"Reshape", "DimShuffle", "Reverse"})
#: PopART's TiedGatherOpx creator priority (below MatMulOpx's default 0).
TIED_GATHER_PRIORITY = -1


@dataclasses.dataclass(frozen=True)
class BaselineDecision:
    """How the baseline laid out one producer-less tensor."""

    graph_id: str
    tensor_id: str
    tiles: np.ndarray
    #: "created by <op> input <i>", "stitched" or "linear".
    method: str
    explanation: str


@dataclasses.dataclass
class BaselinePlan:
    """PopART's layout of every producer-less tensor, in the order it decided them, and the
    matmul plans of the ops planned as passes of a fully connected layer."""

    decisions: list[BaselineDecision]
    op_plans: dict[tuple[str, int], MatmulPlan] = dataclasses.field(default_factory=dict)

    @property
    def mappings(self) -> dict[tuple[str, str], np.ndarray]:
        """(graph id, tensor id) -> tiles: the form :func:`cost.evaluate` takes."""
        return {(d.graph_id, d.tensor_id): d.tiles for d in self.decisions}

    def decision(self, tensor_id: str, graph_id: str = "") -> BaselineDecision:
        for decision in self.decisions:
            if decision.tensor_id == tensor_id and decision.graph_id == graph_id:
                return decision
        raise PlanError(f"the baseline plan has no tensor {tensor_id!r} in graph {graph_id!r}")


@dataclasses.dataclass(frozen=True)
class Candidate:
    """An op input that can create (part of) the tensor, reached through ``chain``."""

    op: Op
    in_index: int
    chain: Chain  # from the searched tensor to the creator's input
    priority: float
    covered: int  # distinct tensor elements the creator's input reaches
    position: int  # the creator's place in the global schedule
    path: tuple[str, ...]  # ops passed through, for explanations
    tied: bool = False  # a Gather that PopART's TiedGatherPattern made a TiedGather

    def rank(self) -> tuple:
        return (-self.priority, -self.covered, self.position, len(self.path), self.op.id,
                self.in_index)

    def describe(self) -> str:
        name = f"{self.op.debug_name()} input {self.in_index}"
        return f"{name} (as a TiedGather)" if self.tied else name


def popart_baseline(ir: Ir, target: TileMachine, registry: Any = REGISTRY, *,
                    unwind_elementwise: bool = True, tied_gather: bool = False,
                    fully_connected_pass: bool = True) -> BaselinePlan:
    """PopART's layout for every producer-less tensor (all graphs, creation order). The IR
    is not changed. ``unwind_elementwise=False`` passes through view ops only;
    ``tied_gather=True`` applies PopART's TiedGatherPattern (see :func:`tied_gathers`);
    ``fully_connected_pass=False`` plans every matmul alone."""
    tied = tied_embeddings(ir, registry) if tied_gather else {}
    op_plans = choose_plans(ir, target, registry, "poplibs" if fully_connected_pass else "alone",
                            skip=frozenset(tied.values()))
    target = target.with_plans(op_plans)
    decisions = []
    with cyclic_gc_paused():  # the search makes many small chains and regions
        search = _CreatorSearch(ir, registry, unwind_elementwise, frozenset(tied))
        for graph in ir.graphs:
            for tensor in graph.producerless_tensors():
                decisions.append(_decide(tensor, search.candidates(tensor), target, registry))
    decisions = _optimizer_states_as_updaters(ir, decisions, target, op_plans)
    return BaselinePlan(decisions, op_plans)


def _optimizer_states_as_updaters(ir: Ir, decisions: list[BaselineDecision],
                                  target: TileMachine, op_plans: Any
                                  ) -> list[BaselineDecision]:
    """Each optimizer state laid out as a clone of its updater, the gradient it
    accumulates, as PopART's Accumulate op creates it (``layers.optimizer_state``). The
    updaters' layouts come from the cost walk under the layouts decided so far."""
    main = ir.main_graph
    mappings = {(d.graph_id, d.tensor_id): d.tiles for d in decisions}
    clones = state_layouts(main, lambda ids: computed_layouts(ir, target, mappings, ids,
                                                              op_plans))
    placed = []
    for decision in decisions:
        clone = clones.get(decision.tensor_id) if decision.graph_id == main.id else None
        if clone is None:
            placed.append(decision)
            continue
        updater, tiles = clone
        placed.append(dataclasses.replace(
            decision, tiles=tiles.astype(target.tile_dtype),
            method=f"created as a clone of {updater}",
            explanation=f"an optimizer state: PopART's Accumulate op creates it as a clone "
                        f"of its updater {updater!r}"))
    return placed


def _decide(tensor: Tensor, candidates: list[Candidate], target: TileMachine,
            registry: Any) -> BaselineDecision:
    shape = planned_shape(tensor)
    numel = prod(shape)
    if numel == 0:
        return BaselineDecision(tensor.graph.id, tensor.id,
                                target.linear_tiles(shape, tensor.dtype), "linear",
                                "no elements")
    tiles: np.ndarray | None = None  # -1 where no candidate has placed an element yet
    used: list[str] = []
    for candidate in sorted(candidates, key=Candidate.rank):
        if candidate.tied:
            wanted = _tied_gather_tiles(candidate.op, target)
        else:
            wanted = registry.layout_rule(candidate.op).wanted_input_tiles(
                candidate.op, candidate.in_index, target)
        if wanted is None:
            continue
        wanted = np.asarray(wanted).reshape(-1)
        if wanted.size != prod(candidate.chain.out_shape):
            raise PlanError(f"op {candidate.describe()} wants {wanted.size} tiles for an "
                            f"input of {prod(candidate.chain.out_shape)} elements")
        if tiles is None and candidate.covered == numel:
            # the creator's answer itself where it needs no change (read-only): a copy
            # beside it was a third [8192, 8192] layout held at once
            return BaselineDecision(tensor.graph.id, tensor.id,
                                    _unwound(candidate.chain, wanted, shape).astype(
                                        target.tile_dtype, copy=False),
                                    f"created by {candidate.describe()}",
                                    _explain(candidate, numel, numel))
        if tiles is None:
            tiles = np.full(numel, -1, dtype=np.int64)
        unwound = _unwound(candidate.chain, wanted, shape)
        fresh = (tiles < 0) & (unwound >= 0)
        if fresh.any():
            tiles[fresh] = unwound[fresh]
            used.append(_explain(candidate, int(fresh.sum()), numel))
    if tiles is None or not used:
        return BaselineDecision(tensor.graph.id, tensor.id,
                                target.linear_tiles(shape, tensor.dtype),
                                "linear", "no op can create it: linear mapping")
    left = tiles < 0
    if left.any():
        tiles[left] = target.linear_tiles(shape, tensor.dtype)[left]
        used.append(f"{int(left.sum())} of {numel} elements: linear mapping")
    return BaselineDecision(tensor.graph.id, tensor.id, tiles.astype(target.tile_dtype),
                            "stitched", "; ".join(used))


def _explain(candidate: Candidate, elements: int, numel: int) -> str:
    through = " -> ".join(candidate.path) if candidate.path else "directly"
    return (f"{elements} of {numel} elements from {candidate.describe()} "
            f"(priority {candidate.priority:g}) through {through}")




def _origins(chain: Chain, shape: tuple[int, ...]) -> np.ndarray:
    """For each element of the creator's input, the tensor element it views (-1: none)."""
    numel = prod(shape)
    if not len(chain):
        return np.arange(numel, dtype=np.int64)
    index_type = np.int32 if numel < np.iinfo(np.int32).max else np.int64
    labels = np.arange(1, numel + 1, dtype=index_type).reshape(shape)
    return chain.apply(labels).reshape(-1).astype(np.int64) - 1


def _unwound(chain: Chain, wanted: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The creator's wanted tiles carried back to the tensor (flat, -1 where the creator's
    input does not reach): each tensor element takes the tile of the first creator element
    viewing it (several do through Expand)."""
    if all(op.type in _BIJECTIVE for op in chain.ops):  # undo the views themselves
        return chain.mirror().apply(wanted.reshape(chain.out_shape)).reshape(-1)
    numel = prod(shape)
    origin = _origins(chain, shape)
    tiles = np.full(numel, -1, dtype=np.int64)
    where = np.flatnonzero(origin >= 0)
    if not _expands(chain):  # each tensor element viewed at most once
        tiles[origin[where]] = wanted[where]
        return tiles
    elements, first = np.unique(origin[where], return_index=True)
    tiles[elements] = wanted[where[first]]
    return tiles


def _expands(chain: Chain) -> bool:
    return any(op.type == "Expand" for op in chain.ops)


class _CreatorSearch:
    """PopART's depth-first creator search (``IrLowering::getCreatorEndpoints``)."""

    def __init__(self, ir: Ir, registry: Any, unwind_elementwise: bool,
                 tied: frozenset[int] = frozenset()) -> None:
        self.ir, self.registry = ir, registry
        self.unwind_elementwise = unwind_elementwise
        self.tied = tied  # ids of the Gathers TiedGatherPattern replaces
        # Per op, computed once: where each tensor enters it, and the views of its inputs
        # (an op with k inputs is reached k times; asking it afresh each time costs k²).
        self._uses: dict[int, dict[Tensor, list[int]]] = {}
        self._views: dict[int, dict[int, dict[int, Chain | None]]] = {}
        self._finders: dict[tuple[int, int], Any] = {}
        schedule = _GlobalSchedule()
        schedule.run(ir)
        self.position, self.call_sites = schedule.position, schedule.call_sites

    def candidates(self, tensor: Tensor) -> list[Candidate]:
        shape = planned_shape(tensor)
        numel = prod(shape)
        found: list[Candidate] = []
        # A tensor of a subgraph starts "inside" the first call site of each enclosing graph,
        # so that the search can leave through the graph's outputs (as PopART does).
        calls = self._enclosing_calls(tensor.graph)
        everything = DisjointRegions.from_region(Region.full(shape))
        stack = [(tensor, Chain(shape), calls, (), everything)]
        seen: set[tuple] = set()
        while stack:
            current, chain, calls, path, reach = stack.pop()
            key = (current.graph.id, current.id, tuple(op.id for op in calls))
            if key in seen:
                continue  # first path wins: each tensor explored once per call context
            seen.add(key)
            for op in current.consumers:
                for index in self._input_indices(op).get(current, ()):
                    stack.extend(self._step(op, index, chain, calls, path, reach, numel,
                                            found))
            stack.extend(self._escape(current, chain, calls, path, reach))
        return found

    def _step(self, op: Op, index: int, chain: Chain, calls: tuple[Op, ...],
              path: tuple[str, ...], reach: DisjointRegions, numel: int,
              found: list[Candidate]) -> list[tuple]:
        """Record ``op`` input ``index`` if it creates; return the tensors to search next:
        those the searched tensor's elements reach (``reach``: the elements of the current
        tensor it views). A view that holds none of them (a Split's output cut from another
        Concat input's slab) is not followed: PopART follows it, but a creator found there
        covers no element and is never used, while following every one costs k² for a
        Concat of k inputs split again into k."""
        if isinstance(op, SubgraphOp):  # PopART: CanDelegate — continue inside the callee
            nexts = []
            if op.stacked_input(index):
                return nexts  # the callee reads slices of it, not the tensor itself
            for graph in op.called_graphs():
                inner = op.op_in_to_subgraph_in_index(graph, index)
                if inner is not None and inner < len(graph.input_ids):
                    nexts.append((graph.tensor(graph.input_ids[inner]), chain,
                                  (*calls, op), (*path, op.debug_name()), reach))
            return nexts
        rule = self.registry.layout_rule(op)
        priority = rule.creates_input(op, index)
        tied = op.id in self.tied and index == 0
        if tied:
            priority = TIED_GATHER_PRIORITY
        if priority is not None:
            found.append(Candidate(op, index, chain, float(priority),
                                   _covered(chain, numel), self.position[op.id], path, tied))
        nexts = []
        finder = self._finder(rule, op, index)
        outputs = (op.output_map().items() if finder is None
                   else [(i, op.output(i)) for i in finder(reach)])
        for out_index, output in outputs:
            step = self._view(rule, op, index, out_index)
            if step is None:
                continue
            viewed = step.apply_regions(reach)
            if not viewed.is_empty():
                nexts.append((output, chain.then(step), calls, (*path, op.debug_name()),
                              viewed))
        return nexts

    def _view(self, rule: LayoutRule, op: Op, index: int, out_index: int) -> Chain | None:
        """The element map from input ``index`` to output ``out_index`` if PopART unwinds
        through it (the rule's ``popart_view``: views, Concat slabs, same-shape elementwise
        inputs), elementwise ones only when the search is asked to pass them."""
        if rule.kind == "elementwise" and not self.unwind_elementwise:
            return None
        if op.id not in self._views:
            self._views[op.id] = rule.popart_output_views(op)
        return self._views[op.id][out_index].get(index)

    def _finder(self, rule: LayoutRule, op: Op, index: int) -> Any:
        """The rule's ``popart_output_finder`` for ``op`` input ``index``, made once."""
        key = (op.id, index)
        if key not in self._finders:
            self._finders[key] = rule.popart_output_finder(op, index)
        return self._finders[key]

    def _input_indices(self, op: Op) -> dict[Tensor, list[int]]:
        """The input indices at which each tensor enters ``op``, in index order."""
        if op.id not in self._uses:
            uses: dict[Tensor, list[int]] = {}
            for index, tensor in op.input_map().items():
                uses.setdefault(tensor, []).append(index)
            self._uses[op.id] = uses
        return self._uses[op.id]

    def _escape(self, tensor: Tensor, chain: Chain, calls: tuple[Op, ...],
                path: tuple[str, ...], reach: DisjointRegions) -> list[tuple]:
        """A callee's output continues as the output of the call site the search entered by."""
        if not calls or not tensor.is_graph_output():
            return []
        caller = calls[-1]
        for inner, tensor_id in enumerate(tensor.graph.output_ids):
            if tensor_id == tensor.id:
                index = caller.subgraph_out_to_op_out_index(tensor.graph, inner)
                if index is not None and caller.has_output(index) \
                        and not caller.stacked_output(index):  # not the tensor itself
                    return [(caller.output(index), chain, calls[:-1], (*path, "return"),
                             reach)]
        return []

    def _enclosing_calls(self, graph: Graph) -> tuple[Op, ...]:
        calls: list[Op] = []
        seen = {graph.id}
        while graph.id != self.ir.main_graph.id and self.call_sites.get(graph.id):
            caller = self.call_sites[graph.id][0]
            calls.insert(0, caller)
            graph = caller.graph
            if graph.id in seen:
                break
            seen.add(graph.id)
        return tuple(calls)


def _covered(chain: Chain, numel: int) -> int:
    if all(op.type in _SURJECTIVE for op in chain.ops):
        return numel
    origin = _origins(chain, chain.in_shape)
    hit = np.zeros(numel, dtype=bool)
    hit[origin[origin >= 0]] = True
    return int(hit.sum())


class _GlobalSchedule(Interpreter):
    """Each op's place in one global order (a callee's ops at its first call, before the
    call op, as PopART schedules them) and each graph's call sites in that order."""

    order = AT_FIRST_CALL

    def __init__(self) -> None:
        super().__init__()
        self.position: dict[int, int] = {}
        self.call_sites: dict[str, list[Op]] = {}

    def enter_call(self, op: Op, callee: Graph) -> None:
        self.call_sites.setdefault(callee.id, []).append(op)

    def run_op(self, op: Op) -> None:
        self.position[op.id] = len(self.position)


# -- PopART's TiedGatherPattern (willow/src/patterns/tiedgatherpattern.cpp) ------------------
def tied_gathers(ir: Ir, registry: Any = REGISTRY) -> frozenset[int]:
    """Ids of the Gathers PopART's TiedGatherPattern would turn into TiedGathers
    (``layers.tied_embeddings``)."""
    return frozenset(tied_embeddings(ir, registry))


def _tied_gather_tiles(op: Op, target: TileMachine) -> np.ndarray | None:
    """What ``TiedGatherOpx::createInput`` makes: the table as the right-hand operand of a
    [lookups, entries] x [entries, rest] matmul (poplin's createMatMulInputRHS)."""
    shape = planned_shape(op.input(0))
    lookups = prod(planned_shape(op.input(1)))
    if not shape or not lookups or not prod(shape):
        return None
    entries = shape[0]
    return target.matmul_tiles(1, lookups, entries, prod(shape) // entries,
                               op.input(0).dtype, "rhs")
