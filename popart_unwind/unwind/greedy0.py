"""Greedy0, poprithms' algorithm: satisfy the most valuable ValuedPair first.

Layouts are tracked as *inward paths*: for each tensor, which root elements its elements
come from and through which chain. Sources and fixed-point outputs are known at once. When
part of a tensor becomes known, its layout propagates forwards through the ops that derive
elements (views, concat, sum_like), a barrier's outputs become known once all its inputs
are complete, and every ValuedPair with a newly known side is queued. The queue is ordered
by value, then by the longest path from the other side to the end of the graph (tensors
early in the graph first), then by tensor ids. The best pair unwinds the known side's layout
back to the sinks behind the other side, restricted to what those sinks still lack; a sink
may so be filled in parts by several pairs of decreasing value.

Extension for sinks no pair reaches: when nothing is queued but some sink is incomplete, the
sink judged most useful (one a waiting barrier needs, then the earliest) keeps its own
origins on what is left (its fallback, as docs/unwind.md defines) and propagation resumes. The
original algorithm stops with an error there instead.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable

from popart_unwind.errors import SolverError
from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.unwind.graph import TensorId, UnwindGraph
from popart_unwind.unwind.ops import DEPENDENT_ROOT_KINDS, forward_edges, unwind_routes
from popart_unwind.unwind.solution import Path, Solution, sink_ancestors


def longest_path_to_end(graph: UnwindGraph) -> dict[TensorId, int]:
    """For each tensor, the number of ops on the longest path from it to a graph output."""
    length: dict[TensorId, int] = {}
    for tensor in reversed(graph.tensors()):
        users = graph.consumers(tensor)
        length[tensor] = 1 + max((length[u] for u in users), default=-1)
    return length


def paths_back_to_sinks(graph: UnwindGraph) -> dict[TensorId, list[tuple[TensorId, Chain]]]:
    """For each tensor, every (sink, chain from the tensor to that sink) through unwindable
    ops: where a layout wanted at the tensor can be planted. The same (sink, chain) reached
    by two routes is listed once: a copy plants nothing (the first takes every element it
    reaches), and a chain of Adds of one weight would list the weight once more per Add."""
    back: dict[TensorId, list[tuple[TensorId, Chain]]] = defaultdict(list)
    for tensor in graph.tensors():
        node = graph.node(tensor)
        if node.kind == "sink":
            back[tensor].append((tensor, Chain(graph.shape(tensor))))
            continue
        kept: dict[TensorId, list[Chain]] = defaultdict(list)
        for source, route in unwind_routes(node, graph.shape(tensor), graph.in_shapes(node)):
            for sink, chain in back.get(source, []):
                through = route.then(chain).canonicalized()
                if through not in kept[sink]:
                    kept[sink].append(through)
                    back[tensor].append((sink, through))
    return back


class _State:
    """Inward paths and coverage of every tensor while Greedy0 runs."""

    def __init__(self, analysis: GraphAnalysis) -> None:
        graph = self.graph = analysis.graph
        self.roots_after = analysis.roots_after
        self.inward: dict[TensorId, list[Path]] = defaultdict(list)
        # What each tensor still lacks, kept up to date instead of recomputed per query.
        self.free: dict[TensorId, DisjointRegions] = {}
        self.missing: dict[TensorId, int] = {t: graph.numel(t) for t in graph.tensors()}
        self.stack: list[Path] = []
        self.sink_paths: list[Path] = []
        # Per barrier-like root: how many of its ancestor sinks are incomplete, and the sum
        # of their indices (which names the last one). Kept up to date as sinks complete:
        # rescanning the ancestors made deep graphs (a ResNet) quadratic.
        self.pending = {root: list(start) for root, start in analysis.pending_at_start.items()}

    def complete(self, tensor: TensorId) -> bool:
        return self.missing[tensor] == 0

    def uncovered(self, tensor: TensorId) -> DisjointRegions:
        if tensor not in self.free:
            shape = self.graph.shape(tensor)
            self.free[tensor] = DisjointRegions(shape, [Region.full(shape)])
        return self.free[tensor]

    def lone_missing_sink(self, root: TensorId) -> TensorId | None:
        """The one incomplete sink ``root``'s layout is made from, if exactly one is."""
        count, index_sum = self.pending[root]
        return self.graph.tensor(index_sum) if count == 1 else None

    def insert(self, path: Path) -> None:
        was_complete = self.complete(path.dst)
        self.free[path.dst] = self.uncovered(path.dst).subtract(path.regions)
        self.missing[path.dst] -= path.regions.total_elms()
        self.inward[path.dst].append(path)
        self.stack.append(path)
        if self.graph.kind(path.dst) == "sink" and self.complete(path.dst):
            roots = self.roots_after.get(path.dst, ())
            if not was_complete:
                for root in roots:
                    self.pending[root][0] -= 1
                    self.pending[root][1] -= path.dst.index
            for root in roots:
                if not self.pending[root][0]:  # start_if_ready would return at once
                    self.start_if_ready(root)

    def start_if_ready(self, root: TensorId) -> None:
        """A barrier-like output becomes known once its inputs are complete and so is every
        sink its layout is made from (an input may view only the covered part of a sink;
        unwinding the output into the rest of that sink would be a cycle)."""
        if self.complete(root):
            return
        inputs = self.graph.node(root).inputs
        if self.pending[root][0] == 0 and all(self.complete(t) for t in inputs):
            self.start_root(root)

    def start_root(self, tensor: TensorId) -> None:
        shape = self.graph.shape(tensor)
        self.insert(
            Path(tensor, tensor, Chain(shape), DisjointRegions(shape, [Region.full(shape)]))
        )

    def propagate(self) -> list[TensorId]:
        """Push known layouts forwards; return the tensors that gained known elements."""
        extended: list[TensorId] = []
        while self.stack:
            path = self.stack.pop()
            extended.append(path.dst)
            for user in self.graph.consumers(path.dst):
                self._extend_into(path, user)
        return sorted(set(extended))

    def _extend_into(self, path: Path, user: TensorId) -> None:
        graph = self.graph
        node = graph.node(user)
        if node.kind in DEPENDENT_ROOT_KINDS:
            self.start_if_ready(user)
            return
        for edge in forward_edges(node, graph.shape(user), graph.in_shapes(node)):
            if edge.src != path.dst:
                continue
            regions = edge.chain.apply_regions(path.regions).intersect(self.uncovered(user))
            if regions.total_elms():
                chain = path.chain.then(edge.chain).canonicalized()
                self.insert(Path(path.src, user, chain, regions))


def _masked(chain: Chain, regions: DisjointRegions) -> list[Chain]:
    """``chain`` keeping only the elements of each region of ``regions`` (one chain each)."""
    return [chain.copy().mask(region) for region in regions.regions]


class GraphAnalysis:
    """What every greedy run needs to know about the graph, computed once."""

    def __init__(self, graph: UnwindGraph) -> None:
        self.graph = graph
        self.length = longest_path_to_end(graph)
        self.back = paths_back_to_sinks(graph)
        self.ancestors = sink_ancestors(graph)
        self.pairs = graph.valued_pairs()
        # Asked at every finalization: scanning the whole graph each time is quadratic.
        self.sinks = graph.sinks()
        self.dependent_roots = [t for t in graph.tensors()
                                if graph.kind(t) in DEPENDENT_ROOT_KINDS]
        self.partners: dict[TensorId, list[tuple[TensorId, int]]] = defaultdict(list)
        for index, pair in enumerate(self.pairs):
            self.partners[pair.a].append((pair.b, index))
            self.partners[pair.b].append((pair.a, index))
        self.aims = {root: self._aims(root) for root in self.dependent_roots}
        # The roots whose pairs would unwind into some sink: the only ones finalizing weighs.
        self.aiming_roots = [root for root in self.dependent_roots
                             if any(sinks for _, sinks in self.aims[root])]
        # Each sink's barrier-like roots (the roots it is an ancestor of), and what each run
        # starts with: every sink incomplete but the empty ones.
        self.roots_after: dict[TensorId, list[TensorId]] = defaultdict(list)
        self.pending_at_start: dict[TensorId, tuple[int, int]] = {}
        for root in self.dependent_roots:
            for sink in sorted(self.ancestors[root]):
                self.roots_after[sink].append(root)
            waiting = [s.index for s in self.ancestors[root] if graph.numel(s)]
            self.pending_at_start[root] = (len(waiting), sum(waiting))

    def _aims(self, root: TensorId) -> list[tuple[float, tuple[TensorId, ...]]]:
        """Per pair of a barrier-like ``root``: its worth (value x elements) and the sinks
        behind the partner the pair would unwind into, less the sinks ``root`` is made
        from (what finalizing weighs; fixed, so computed once, not per finalization)."""
        aims = []
        for partner, index in self.partners[root]:
            worth = self.pairs[index].value * self.graph.numel(partner)
            behind = {s for s, _ in self.back.get(partner, [])} - self.ancestors[root]
            aims.append((worth, tuple(sorted(behind))))
        return aims


class GreedyRun:
    """One run of the greedy algorithm; ``deferred`` pairs (by index) are unwound only after
    every other queued pair. It records *blockers*: less valuable pairs whose paths filled
    the sinks a more valuable pair would have unwound to."""

    def __init__(
        self,
        analysis: GraphAnalysis,
        deferred: frozenset[int] = frozenset(),
        late: frozenset[TensorId] = frozenset(),
    ) -> None:
        self.graph = analysis.graph
        self.analysis = analysis
        self.deferred = deferred
        self.late = late
        self.finalized: set[TensorId] = set()
        self.late_sinks: set[TensorId] = set()
        self.state = _State(analysis)
        self.planted_by: dict[TensorId, list[int]] = defaultdict(list)
        self.blockers: set[int] = set()
        self.queue: list[tuple] = []

    def run(self) -> Solution:
        graph, state = self.graph, self.state
        for tensor in graph.tensors():
            if graph.kind(tensor) in ("source", "fixed_point"):
                state.start_root(tensor)
        while True:
            for known in state.propagate():
                for other, index in self.analysis.partners[known]:
                    value, length = self.analysis.pairs[index].value, self.analysis.length[other]
                    key = (index in self.deferred, -value, -length)
                    heapq.heappush(self.queue, (*key, other.index, known.index, index))
            if self._unwind_best_pair() or state.stack:
                continue
            sink = self._sink_to_finalize()
            if sink is None:
                break
            self.finalized.add(sink)
            state.insert(Path(sink, sink, Chain(graph.shape(sink)), state.uncovered(sink)))
        return Solution(graph, state.sink_paths, algo="greedy0")

    def _unwind_best_pair(self) -> bool:
        """Pop pairs until one plants a new path into a sink; True if one did."""
        while self.queue:
            if self.queue[0][0] and self._finalizing_pays():
                return False  # only deferred pairs are left: finalize a sink first
            *_, other_index, known_index, pair_index = heapq.heappop(self.queue)
            known, other = self.graph.tensor(known_index), self.graph.tensor(other_index)
            if self._plant(known, other, pair_index):
                return True
            self._note_blockers(other, pair_index)
        return False

    def _plant(self, known: TensorId, other: TensorId, pair_index: int) -> bool:
        state, graph = self.state, self.graph
        wanted = state.uncovered(other)
        planted = False
        if not wanted.total_elms():
            return False
        for inward in list(state.inward[known]):
            for chain_to_other in _masked(inward.chain, wanted):
                for sink, chain_to_sink in self.analysis.back.get(other, []):
                    through = chain_to_other.then(chain_to_sink)
                    for free in state.uncovered(sink).regions:
                        chain = through.copy().mask(free).canonicalized()
                        regions = chain.apply_regions(Region.full(graph.shape(inward.src)))
                        if regions.total_elms():
                            path = Path(inward.src, sink, chain, regions)
                            state.insert(path)
                            state.sink_paths.append(path)
                            self.planted_by[sink].append(pair_index)
                            planted = True
        return planted

    def _sink_to_finalize(self) -> TensorId | None:
        """The incomplete sink to give its own origins on what it lacks: not marked
        ``late`` first, then the best net value (``_finalizing_value``), then the earliest
        in the graph, then the lowest id."""
        ranked = self._ranked_finalizations()
        return ranked[0][1] if ranked else None

    def _ranked_finalizations(self) -> list[tuple[tuple, TensorId]]:
        state, analysis = self.state, self.analysis
        incomplete = [t for t in analysis.sinks if not state.complete(t)]
        value = self._finalizing_values(
            [t for t in analysis.aiming_roots if not state.complete(t)])
        keyed = [((t in self.late, -value[t], -analysis.length[t], t.index), t) for t in incomplete]
        return sorted(keyed)

    def _finalizing_values(self, waiting: list[TensorId]) -> dict[TensorId, float]:
        """What finalizing each sink promises, in one pass over the waiting barriers: the
        pairs of the barriers it is the last missing sink of (towards other incomplete
        sinks), less the pairs waiting barriers aim at it. A pair counts value × elements."""
        analysis, state = self.analysis, self.state
        value: dict[TensorId, float] = defaultdict(float)
        for root in waiting:
            lone = state.lone_missing_sink(root)
            for worth, sinks in analysis.aims[root]:
                behind = [s for s in sinks if not state.complete(s)]
                for sink in behind:
                    value[sink] -= worth
                if lone is not None and any(s != lone for s in behind):
                    value[lone] += worth
        return value

    def _finalizing_pays(self) -> bool:
        """Whether some sink is worth finalizing before any deferred pair is taken."""
        ranked = self._ranked_finalizations()
        return bool(ranked) and not ranked[0][0][0] and ranked[0][0][1] < 0

    def _note_blockers(self, other: TensorId, pair_index: int) -> None:
        pairs = self.analysis.pairs
        for sink, _ in self.analysis.back.get(other, []):
            if sink in self.finalized:
                self.late_sinks.add(sink)
            for planter in self.planted_by[sink]:
                if pairs[planter].value < pairs[pair_index].value:
                    self.blockers.add(planter)


#: Where greedy runs execute: the C++ core (``native.py``), or this module, the reference
#: the core is tested against (same sink paths in the same order).
ENGINES = ("native", "python")

#: One greedy run with deferred pairs (by index) and late sinks: (its solution, blockers,
#: late sinks).
GreedyRunner = Callable[[frozenset, frozenset], tuple[Solution, set[int], set[TensorId]]]


def greedy_runner(graph: UnwindGraph, engine: str = "native") -> GreedyRunner:
    """Greedy runs on ``graph``, sharing one analysis of it."""
    if engine == "native":
        from popart_unwind.unwind.native import NativeAnalysis

        return NativeAnalysis(graph).run
    if engine != "python":
        raise SolverError(f"unknown solver engine {engine!r}; choose from {list(ENGINES)}")
    analysis = GraphAnalysis(graph)

    def run(deferred: frozenset = frozenset(), late: frozenset = frozenset()):
        greedy = GreedyRun(analysis, deferred, late)
        return greedy.run(), greedy.blockers, greedy.late_sinks

    return run


def solve_greedy0(graph: UnwindGraph, engine: str = "native") -> Solution:
    """poprithms' Greedy0 (see the module docstring)."""
    solution, _, _ = greedy_runner(graph, engine)(frozenset(), frozenset())
    return solution
