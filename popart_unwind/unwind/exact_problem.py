"""The unwinding problem as the exact solver sees it: sink elements choosing labels.

Every element of every tensor derives from one *base* origin: the root or sink element it
comes from when no sink path exists (``compute_layouts(graph, [])``). With paths, a root
element keeps its origin and a sink element takes a *label*: its own origin (uncovered), the
origin of a root element, or the own origin of another sink element that keeps its own. So
each ValuedPair index with base origins ``(ea, eb)`` scores

* always, when ``ea == eb``;
* never, when both are distinct root elements;
* when the sink element takes the root element as label (sink with root);
* when both sink elements take the same label (sink with sink).

Labels are origin ids; in graphs without a source or fixed_point, the solver also uses
*stand-ins* (negative ids, see :func:`stand_in`) that become origin ids once solved. Which
labels are worth offering each sink element, and why that loses no optimum, is explained at
:func:`candidate_labels`.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from popart_unwind.errors import SolverError
from popart_unwind.unwind.graph import TensorId, UnwindGraph
from popart_unwind.unwind.ops import DEPENDENT_ROOT_KINDS, FREE_ROOT_KINDS
from popart_unwind.unwind.solution import compute_layouts, origin_blocks, sink_ancestors


class Origins:
    """The blocks of origin ids owned by roots and sinks (see ``origin_blocks``)."""

    def __init__(self, graph: UnwindGraph) -> None:
        blocks = origin_blocks(graph)
        self.tensors: list[TensorId] = sorted(blocks, key=lambda t: blocks[t])
        self.starts: list[int] = [blocks[t] for t in self.tensors]
        self.start_of: dict[TensorId, int] = dict(blocks)
        self.size = sum(graph.numel(t) for t in self.tensors)
        self.numel: dict[TensorId, int] = {t: graph.numel(t) for t in self.tensors}
        self.by_index = graph.tensors()
        self.is_sink = np.zeros(self.size, dtype=bool)
        for tensor in graph.sinks():
            self.is_sink[self.elements(tensor)] = True

    def elements(self, tensor: TensorId) -> range:
        """The origins of ``tensor``'s block."""
        return range(self.start_of[tensor], self.start_of[tensor] + self.numel[tensor])

    def owner(self, label: int) -> TensorId:
        """The root or sink whose block holds origin ``label``, or a stand-in's sink."""
        if label < 0:
            return self.by_index[-1 - label]
        return self.tensors[bisect.bisect_right(self.starts, label) - 1]

    def flat(self, origin: int) -> int:
        """The row-major index of ``origin`` in its owner."""
        return origin - self.start_of[self.owner(origin)]


@dataclass
class Terms:
    """The objective as a constant plus terms that depend on sink labels."""

    constant: float
    with_root: dict[tuple[int, int], float]  # (sink origin, root origin) -> value
    between_sinks: dict[tuple[int, int], float]  # (lower sink origin, higher) -> value

    def active(self) -> list[int]:
        """Sink origins whose label can change the objective."""
        found = {s for s, _ in self.with_root}
        found.update(s for pair in self.between_sinks for s in pair)
        return sorted(found)

    def value(self, label: dict[int, int]) -> float:
        """The objective when sink origin ``s`` takes ``label.get(s, s)``."""
        gains = [v for (s, r), v in self.with_root.items() if label.get(s, s) == r]
        gains += [
            v
            for (s1, s2), v in self.between_sinks.items()
            if label.get(s1, s1) == label.get(s2, s2)
        ]
        return math.fsum([self.constant, *gains])


def objective_terms(graph: UnwindGraph, origins: Origins) -> Terms:
    """Split every ValuedPair index by the kinds of its two base origins."""
    base = compute_layouts(graph, [])
    constant: list[float] = []
    with_root: dict[tuple[int, int], float] = defaultdict(float)
    between: dict[tuple[int, int], float] = defaultdict(float)
    for pair in graph.valued_pairs():
        if pair.value == 0:
            continue
        a, b = base[pair.a].ravel(), base[pair.b].ravel()
        equal = a == b
        constant.append(pair.value * int(np.count_nonzero(equal)))
        sink_a, sink_b = origins.is_sink[a], origins.is_sink[b]
        both = ~equal & sink_a & sink_b
        for lo, hi in zip(
            np.minimum(a[both], b[both]).tolist(),
            np.maximum(a[both], b[both]).tolist(),
            strict=True,
        ):
            between[(lo, hi)] += pair.value
        for sinks, roots, mask in ((a, b, sink_a & ~sink_b), (b, a, ~sink_a & sink_b)):
            for s, r in zip(sinks[mask].tolist(), roots[mask].tolist(), strict=True):
                with_root[(s, r)] += pair.value
    return Terms(
        math.fsum(constant), dict(sorted(with_root.items())), dict(sorted(between.items()))
    )


def components(active: list[int], terms: Terms) -> dict[int, int]:
    """Each active sink origin's component (its least member) under sink-with-sink terms."""
    parent = {s: s for s in active}

    def find(s: int) -> int:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for s1, s2 in terms.between_sinks:
        r1, r2 = find(s1), find(s2)
        if r1 != r2:
            parent[max(r1, r2)] = min(r1, r2)
    return {s: find(s) for s in active}


def stand_in(sink: TensorId) -> int:
    """The label standing for "the own origin of some element of ``sink`` that keeps it"."""
    return -1 - sink.index


@dataclass
class Candidates:
    """The labels offered to each active sink element, and the components they serve."""

    labels: dict[int, list[int]]
    component: dict[int, int]
    members: dict[int, list[int]]
    _outside: dict[tuple[int, TensorId], list[int]] = field(default_factory=dict, repr=False)

    def outside(self, origins: Origins, c: int, sink: TensorId) -> list[int]:
        """Origins of ``sink``'s elements outside component ``c``: what its stand-in may
        become."""
        if (c, sink) not in self._outside:
            inside = set(self.members[c])
            self._outside[(c, sink)] = [o for o in origins.elements(sink) if o not in inside]
        return self._outside[(c, sink)]

    def resolve(self, origins: Origins, label: dict[int, int]) -> dict[int, int]:
        """``label`` with each stand-in replaced by the first element it may become that
        keeps its own origin under ``label`` (inactive elements always do)."""
        resolved = dict(label)
        for s, chosen in label.items():
            if chosen < 0:
                sink = origins.owner(chosen)
                outside = self.outside(origins, self.component[s], sink)
                kept = [o for o in outside if label.get(o, o) == o]
                if not kept:
                    raise SolverError(
                        f"exact solver: sink element {s} stands in for an "
                        f"own origin of {sink!r}, but none is kept"
                    )
                resolved[s] = kept[0]
        return resolved


def candidate_labels(graph: UnwindGraph, origins: Origins, terms: Terms) -> Candidates:
    """The labels offered to each active sink element; every optimum survives.

    A component C is a connected set of sink elements under sink-with-sink terms. Its
    score depends on which elements share a label and on which take the root elements
    that C *meets* (root origins in its sink-with-root terms); the identity of any other
    label only matters through the tensor it makes a sink depend on. Every element of C
    is offered: its own origin, the met roots (minus those whose tensor depends statically
    on its sink: always a cycle), and, when C has two or more elements (a lone element
    gains nothing from any other label), *spare* labels standing for all others:

    * if the graph has a source or fixed_point element (a *free* root, on which depending
      can never close a cycle), one free origin that C does not meet. Any group of C
      sharing another unmet label (a sink element's own, a barrier's) can move to it without
      losing score or validity, and all such groups can merge into one, which only adds
      agreement. If C meets every free origin, the met ones already serve.
    * otherwise: the own origins of C's elements; per dependent root tensor one origin C
      does not meet; and per sink with elements outside C, its :func:`stand_in`, valid
      while one of those elements keeps its own origin (groups on own origins of one sink
      outside C merge into one for the same reason).
    """
    ancestors = sink_ancestors(graph)
    active = terms.active()
    component = components(active, terms)
    members: dict[int, list[int]] = defaultdict(list)
    met: dict[int, set[int]] = defaultdict(set)
    for s in active:
        members[component[s]].append(s)
    for s, r in terms.with_root:
        met[component[s]].add(r)
    candidates = Candidates({}, component, dict(members))
    free = [t for t in origins.tensors if graph.kind(t) in FREE_ROOT_KINDS and origins.numel[t] > 0]
    dependent = [t for t in origins.tensors if graph.kind(t) in DEPENDENT_ROOT_KINDS]
    for c, group in members.items():
        if len(group) == 1:
            spare: set[int] = set()
        elif free:
            spare = set(_first_unmet(origins, free, met[c]))
        else:
            spare = {
                *group,
                *(stand_in(t) for t in graph.sinks() if candidates.outside(origins, c, t)),
            }
            for tensor in dependent:
                spare.update(_first_unmet(origins, [tensor], met[c]))
        offered = sorted(met[c] | spare)
        for s in group:
            sink = origins.owner(s)
            candidates.labels[s] = sorted(
                {s, *(L for L in offered if sink not in ancestors[origins.owner(L)])}
            )
    candidates.labels = dict(sorted(candidates.labels.items()))
    return candidates


def _first_unmet(origins: Origins, tensors: list[TensorId], met: set[int]) -> list[int]:
    """The first origin of ``tensors`` (in order) not in ``met``, if any, as a list."""
    for tensor in tensors:
        for origin in origins.elements(tensor):
            if origin not in met:
                return [origin]
    return []
