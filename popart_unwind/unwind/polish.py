"""Element-level local search that improves a solution ("polish").

Paths carry whole regions through chains, so no path-based heuristic can give two elements
of one sink the same origin when a pair ties the sink to another view of itself (a sink
against its own reverse wants to be a palindrome). The labels view of the exact solver
(``exact_problem``) can: each sink element takes a label (an origin). Starting from a
solution's labels, polish applies the best improving move until none is left:

* one sink element to another label (a root element it meets, a partner's label, its own);
* both elements of a sink-with-sink term to one shared label (a root element both meet, or
  a spare: one origin of each root and each sink, those of sources and fixed points first,
  on which depending can never close a cycle).

A move is refused if it would make a layout depend on itself (the rule of
``solution.dependency_order``) or use another element's own origin that is not kept.
Element-level work grows with the number of sink elements, so polish only runs below
``max_sink_elements``; above it the solution is returned unchanged. Each search for the best
move weighs every element's candidate labels again, which on a graph of many partnered
sinks (an optimizer's states beside their gradients and weights) is hundreds of thousands
of candidates per move; polish therefore stops once it has weighed ``max_candidates`` in
all, keeping the moves made so far (a count, not a clock: reruns stay identical).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from popart_unwind.errors import SolverError
from popart_unwind.unwind.exact import paths_for_labels
from popart_unwind.unwind.exact_problem import Origins, objective_terms
from popart_unwind.unwind.graph import TensorId, UnwindGraph
from popart_unwind.unwind.ops import FREE_ROOT_KINDS
from popart_unwind.unwind.solution import Solution, layout_inputs


class _Labels:
    """Labels of sink elements with the bookkeeping that keeps moves valid."""

    def __init__(self, graph: UnwindGraph, origins: Origins, label: dict[int, int]) -> None:
        self.graph, self.origins, self.label = graph, origins, label
        self._readers: dict[int, set[int]] = defaultdict(set)
        self.deps: dict[TensorId, Counter] = defaultdict(Counter)
        for s, lab in label.items():
            self._track(s, lab, +1)

    def readers(self, s: int) -> list[int]:
        """Elements of other sinks that take ``s``'s own origin."""
        return sorted(self._readers[s])

    def _track(self, s: int, lab: int, step: int) -> None:
        sink, owner = self.origins.owner(s), self.origins.owner(lab)
        if owner != sink:
            self.deps[sink][owner] += step
        if lab != s and self.origins.is_sink[lab]:
            (self._readers[lab].add if step > 0 else self._readers[lab].discard)(s)

    def allowed(self, s: int, lab: int, followers: set[int]) -> bool:
        """Whether ``s`` may take ``lab`` while the elements ``followers`` move too."""
        if lab == self.label[s]:
            return True
        if lab != s and not self._readers[s] <= followers:
            return False  # an element reading s's own origin would be left behind
        sink, owner = self.origins.owner(s), self.origins.owner(lab)
        if owner == sink:
            return lab == s  # reading another element of one's own sink is a self-loop
        if self.origins.is_sink[lab] and (lab in followers or self.label.get(lab, lab) != lab):
            return False  # another sink's own origin must stay its own
        return not self.reaches(owner, sink)

    def reaches(self, start: TensorId, goal: TensorId) -> bool:
        """Whether ``start``'s layout depends on ``goal``'s (graph edges and labels)."""
        seen, frontier = {start}, [start]
        while frontier:
            tensor = frontier.pop()
            if tensor == goal:
                return True
            labels = [t for t, n in self.deps[tensor].items() if n]
            for nxt in (*layout_inputs(self.graph, tensor), *labels):
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        return False

    def apply(self, moves: dict[int, int]) -> dict[int, int]:
        """Take the moves; return the labels they replaced."""
        before = {s: self.label[s] for s in moves}
        for s, lab in moves.items():
            self._track(s, self.label[s], -1)
            self._track(s, lab, +1)
            self.label[s] = lab
        return before

    def cyclic(self, moved: dict[int, int]) -> bool:
        """Whether the moved elements' sinks now depend on themselves through labels."""
        sinks = {self.origins.owner(s) for s in moved}
        return any(self.reaches(t, sink) for sink in sinks for t, n in self.deps[sink].items() if n)


#: The candidate moves polish weighs in all before it stops (about 5 s of work).
MAX_CANDIDATES = 400_000


class _Budget:
    """Candidates left to weigh."""

    def __init__(self, candidates: int) -> None:
        self.left = candidates

    def spend(self) -> bool:
        """Take one candidate; False once none is left."""
        self.left -= 1
        return self.left >= 0


def polish(
    solution: Solution, max_sink_elements: int = 20_000, max_moves: int = 10_000,
    max_candidates: int = MAX_CANDIDATES,
) -> Solution:
    """``solution`` improved by element moves, or ``solution`` itself if none helps."""
    graph = solution.graph
    if sum(graph.numel(sink) for sink in graph.sinks()) > max_sink_elements:
        return solution  # checked before any element-level table is built
    origins = Origins(graph)
    terms = objective_terms(graph, origins)
    layouts = solution.layouts()
    label = {
        s: int(layouts[sink].ravel()[s - origins.start_of[sink]])
        for sink in graph.sinks()
        for s in origins.elements(sink)
    }
    state = _Labels(graph, origins, label)
    with_root: dict[int, list[tuple[int, float]]] = defaultdict(list)
    partners: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (s, r), v in terms.with_root.items():
        with_root[s].append((r, v))
    for (s1, s2), v in terms.between_sinks.items():
        partners[s1].append((s2, v))
        partners[s2].append((s1, v))
    spares = _spare_origins(graph, origins)
    moves, taboo, budget = 0, set(), _Budget(max_candidates)
    while moves < max_moves and budget.left > 0:
        best = _best_move(state, with_root, partners, spares, taboo, budget)
        if best is None:
            break
        replaced = state.apply(best)
        if state.cyclic(best):  # several moves together closed a cycle: undo, never retry
            state.apply(replaced)
            taboo.add(frozenset(best.items()))
            continue
        moves += 1
    if moves == 0:
        return solution
    try:
        improved = Solution(
            graph,
            paths_for_labels(graph, state.label),
            algo=solution.algo,
            stats={**solution.stats, "polish_moves": moves},
        )
    except SolverError:  # a joint move the per-element checks let through: keep the input
        return solution
    return improved if improved.symbolic_score() > solution.symbolic_score() else solution


def _spare_origins(graph: UnwindGraph, origins: Origins) -> list[int]:
    """One origin per root and per sink, free roots first: labels two elements may share
    when nothing they meet fits (a free root never closes a cycle; others are checked)."""
    tensors = [t for t in graph.tensors() if t in origins.start_of and graph.numel(t)]
    free = [t for t in tensors if graph.kind(t) in FREE_ROOT_KINDS]
    return [origins.start_of[t] for t in free + [t for t in tensors if t not in free]]


def _delta(state: _Labels, moves: dict[int, int], with_root, partners) -> float:
    """Change of the objective if every ``s`` in ``moves`` took ``moves[s]``."""

    def now(x: int) -> int:
        return moves.get(x, state.label[x])

    gain, seen = 0.0, set()
    for s, lab in moves.items():
        old = state.label[s]
        gain += sum(v * ((lab == r) - (old == r)) for r, v in with_root[s])
        for other, v in partners[s]:
            key = (min(s, other), max(s, other))
            if key not in seen:
                seen.add(key)
                before = state.label[s] == state.label[other]
                gain += v * ((now(s) == now(other)) - before)
    return gain


def _with_readers(state: _Labels, moves: dict[int, int]) -> dict[int, int] | None:
    """``moves`` plus the elements reading a moved element's own origin, which follow it;
    None if any of the moves is not allowed."""
    grown = dict(moves)
    for s, lab in moves.items():
        if lab != s:
            for reader in state.readers(s):
                grown.setdefault(reader, lab)
    for s, lab in grown.items():
        if not state.allowed(s, lab, followers=set(grown)):
            return None
    return grown


def _best_move(state: _Labels, with_root, partners, spares, taboo,
               budget: _Budget) -> dict[int, int] | None:
    """The most improving move of one element, or of the two of a sink-with-sink term, with
    the elements that read their own origins (ties: first found in element order), among
    the candidates the budget lets it weigh."""
    best_gain, best = 1e-9, None

    def consider(moves: dict[int, int]) -> None:
        nonlocal best_gain, best
        if not budget.spend():
            return
        grown = _with_readers(state, moves)
        if grown is not None and frozenset(grown.items()) not in taboo:
            gain = _delta(state, grown, with_root, partners)
            if gain > best_gain:
                best_gain, best = gain, grown

    for s in sorted(set(with_root) | set(partners)):
        if budget.left <= 0:
            break
        options = {r for r, _ in with_root[s]} | {state.label[o] for o, _ in partners[s]} | {s}
        for lab in sorted(options - {state.label[s]}):
            consider({s: lab})
        for other, _ in partners[s]:
            if other < s or state.label[s] == state.label[other]:
                continue
            shared = {r for r, _ in with_root[s]} & {r for r, _ in with_root[other]}
            for lab in [*sorted(shared), *spares]:
                consider({s: lab, other: lab})
    return best
