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
``max_sink_elements``; above it the solution is returned unchanged.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from popart_unwind.errors import SolverError
from popart_unwind.unwind.exact import paths_for_labels
from popart_unwind.unwind.exact_problem import Origins, objective_terms
from popart_unwind.unwind.graph import Graph, TensorId
from popart_unwind.unwind.solution import Solution, layout_inputs

FREE_KINDS = ("source", "fixed_point")


class _Labels:
    """Labels of sink elements with the bookkeeping that keeps moves valid."""

    def __init__(self, graph: Graph, origins: Origins, label: dict[int, int]) -> None:
        self.graph, self.origins, self.label = graph, origins, label
        self.uses = Counter(lab for s, lab in label.items() if lab != s and origins.is_sink[lab])
        self.deps: dict[TensorId, Counter] = defaultdict(Counter)
        for s, lab in label.items():
            self._count(s, lab, +1)

    def _count(self, s: int, lab: int, step: int) -> None:
        sink, owner = self.origins.owner(s), self.origins.owner(lab)
        if owner != sink:
            self.deps[sink][owner] += step

    def allowed(self, s: int, lab: int) -> bool:
        if lab == self.label[s]:
            return False
        if self.uses[s] and lab != s:
            return False  # others read this element's own origin
        if lab != s and self.origins.is_sink[lab] and self.label.get(lab, lab) != lab:
            return False
        sink, owner = self.origins.owner(s), self.origins.owner(lab)
        if owner == sink:
            return lab == s  # reading another element of one's own sink is a self-loop
        return not self._reaches(owner, sink)

    def _reaches(self, start: TensorId, goal: TensorId) -> bool:
        """Whether ``start``'s layout depends on ``goal``'s (graph edges and labels)."""
        seen, frontier = {start}, [start]
        while frontier:
            tensor = frontier.pop()
            if tensor == goal:
                return True
            nexts = [
                *layout_inputs(self.graph, tensor),
                *(t for t, n in self.deps[tensor].items() if n),
            ]
            for nxt in nexts:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        return False

    def move(self, s: int, lab: int) -> None:
        old = self.label[s]
        if old != s and self.origins.is_sink[old]:
            self.uses[old] -= 1
        if lab != s and self.origins.is_sink[lab]:
            self.uses[lab] += 1
        self._count(s, old, -1)
        self._count(s, lab, +1)
        self.label[s] = lab


def polish(
    solution: Solution, max_sink_elements: int = 20_000, max_moves: int = 10_000
) -> Solution:
    """``solution`` improved by element moves, or ``solution`` itself if none helps."""
    graph = solution.graph
    origins = Origins(graph)
    if int(origins.is_sink.sum()) > max_sink_elements:
        return solution
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
    moves = 0
    while moves < max_moves:
        best = _best_move(state, with_root, partners, spares)
        if best is None:
            break
        for s, lab in best:
            state.move(s, lab)
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
    return improved if improved.score() > solution.score() else solution


def _spare_origins(graph: Graph, origins: Origins) -> list[int]:
    """One origin per root and per sink, free roots first: labels two elements may share
    when nothing they meet fits (a free root never closes a cycle; others are checked)."""
    tensors = [t for t in graph.tensors() if t in origins.start_of and graph.numel(t)]
    free = [t for t in tensors if graph.kind(t) in FREE_KINDS]
    return [origins.start_of[t] for t in free + [t for t in tensors if t not in free]]


def _gain(state: _Labels, s: int, lab: int, with_root, partners, skip: int | None = None) -> float:
    """Change of the objective if ``s`` alone took ``lab`` (ignoring its term with ``skip``)."""
    old = state.label[s]
    gain = sum(v * ((lab == r) - (old == r)) for r, v in with_root[s])
    for other, v in partners[s]:
        if other != skip:
            theirs = state.label[other]
            gain += v * ((lab == theirs) - (old == theirs))
    return gain


def _best_move(state: _Labels, with_root, partners, spares) -> list[tuple[int, int]] | None:
    """The most improving single or joint move (ties: lowest element, lowest label)."""
    best_gain, best = 1e-9, None
    for s in sorted(set(with_root) | set(partners)):
        options = {r for r, _ in with_root[s]} | {state.label[o] for o, _ in partners[s]} | {s}
        for lab in sorted(options):
            if state.allowed(s, lab):
                gain = _gain(state, s, lab, with_root, partners)
                if gain > best_gain:
                    best_gain, best = gain, [(s, lab)]
        for other, v in partners[s]:
            if other < s or state.label[s] == state.label[other]:
                continue
            shared = {r for r, _ in with_root[s]} & {r for r, _ in with_root[other]}
            for lab in [*sorted(shared), *spares]:
                if state.allowed(s, lab) and state.allowed(other, lab):
                    gain = (
                        v
                        + _gain(state, s, lab, with_root, partners, other)
                        + _gain(state, other, lab, with_root, partners, s)
                    )
                    if gain > best_gain:
                        best_gain, best = gain, [(s, lab), (other, lab)]
    return best
