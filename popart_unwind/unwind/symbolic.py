"""The objective computed from regions and chains, at a cost that need not grow with sizes.

Every tensor's layout is described by *inward paths*: (root, chain from the root, region of
the tensor it covers), the regions of one tensor being disjoint and covering it. Two
elements have the same mapping iff they come from the same root element. So for a pair
(a, b), only paths of a and b from the same root can agree, and only on the intersection of
their regions; there they agree everywhere when their canonical chains are identical.
When the chains differ they may still agree at some elements (a concat of a tensor with its
own reverse is a palindrome), so those intersections are compared element by element,
unless both chains keep every element of the intersection in place: the result is always
exactly the elementwise objective.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.memory.fill_sample import fill_sample_sources
from popart_unwind.unwind.graph import TensorId, UnwindGraph
from popart_unwind.unwind.ops import ROOT_KINDS, forward_edges
from popart_unwind.unwind.solution import Path, dependency_order


def inward_paths(graph: UnwindGraph, sink_paths: list[Path]) -> dict[TensorId, list[Path]]:
    """For every tensor, the paths from roots (or sinks' own origins) that make its layout."""
    into = _into(sink_paths)
    inward: dict[TensorId, list[Path]] = {}
    for tensor in dependency_order(graph, sink_paths):
        inward[tensor] = _inward_of(graph, tensor, into, inward)
    return inward


class InwardPaths:
    """Inward paths computed on demand: a tensor's, after those of what its layout is made
    from, each tensor once. Realizing a plan asks for its sinks (and the inputs of barriers),
    whose paths mostly start at roots, so most tensors of a large graph are never visited."""

    def __init__(self, graph: UnwindGraph, sink_paths: list[Path]) -> None:
        self.graph = graph
        self._into = _into(sink_paths)
        self._found: dict[TensorId, list[Path]] = {}

    def __getitem__(self, tensor: TensorId) -> list[Path]:
        if tensor not in self._found:
            self._compute(tensor)
        return self._found[tensor]

    def _compute(self, tensor: TensorId) -> None:
        stack: list[tuple[TensorId, bool]] = [(tensor, False)]
        while stack:
            current, ready = stack.pop()
            if current in self._found:
                continue
            if ready:
                self._found[current] = _inward_of(self.graph, current, self._into, self._found)
                continue
            stack.append((current, True))
            stack.extend((need, False) for need in self._needs(current)
                         if need not in self._found)

    def _needs(self, tensor: TensorId) -> tuple[TensorId, ...]:
        """The tensors whose inward paths ``tensor``'s are made from."""
        kind = self.graph.node(tensor).kind
        if kind in ROOT_KINDS:
            return ()
        if kind == "sink":
            return tuple(dict.fromkeys(path.src for path in self._into.get(tensor, [])))
        return tuple(dict.fromkeys(self.graph.node(tensor).inputs))


def _into(sink_paths: list[Path]) -> dict[TensorId, list[Path]]:
    into: dict[TensorId, list[Path]] = {}
    for path in sink_paths:
        into.setdefault(path.dst, []).append(path)
    return into


def _inward_of(graph: UnwindGraph, tensor: TensorId, into: dict[TensorId, list[Path]],
               inward: dict[TensorId, list[Path]]) -> list[Path]:
    """``tensor``'s inward paths, from those of what it is made from (already in ``inward``)."""
    shape = graph.shape(tensor)
    node = graph.node(tensor)
    if node.kind in ROOT_KINDS:
        return [_identity(tensor, shape, DisjointRegions(shape, [Region.full(shape)]))]
    if node.kind == "sink":
        found = [
            _through(before, path.chain, path.dst, path.regions)
            for path in into.get(tensor, [])
            for before in inward[path.src]
        ]
        covered = DisjointRegions(shape, [r for p in found if p for r in p.regions.regions])
        own = covered.complement()
        found.append(_identity(tensor, shape, own) if own.total_elms() else None)
    else:
        found = [
            _through(before, edge.chain, tensor, DisjointRegions(shape, [edge.region]))
            for edge in forward_edges(node, shape, graph.in_shapes(node))
            for before in inward[edge.src]
        ]
    return [p for p in found if p is not None]


def _identity(tensor: TensorId, shape, regions: DisjointRegions) -> Path:
    return Path(tensor, tensor, Chain(shape), regions)


def _through(before: Path, chain: Chain, dst: TensorId, within: DisjointRegions) -> Path | None:
    """``before`` continued by ``chain``, kept to ``within``; None when nothing is left."""
    regions = chain.apply_regions(before.regions).intersect(within)
    if not regions.total_elms():
        return None
    return Path(before.src, dst, before.chain.then(chain).canonicalized(), regions)


def symbolic_score(graph: UnwindGraph, inward: dict[TensorId, list[Path]] | InwardPaths) -> float:
    """The exact objective from inward paths (see the module docstring)."""
    total = 0.0
    for pair in graph.valued_pairs():
        agreeing = 0
        for left in inward[pair.a]:
            for right in inward[pair.b]:
                if left.src != right.src:
                    continue
                common = left.regions.intersect(right.regions)
                if not common.total_elms():
                    continue
                if left.chain == right.chain or (
                    _keeps_place(left.chain, common) and _keeps_place(right.chain, common)
                ):
                    agreeing += common.total_elms()
                else:
                    agreeing += _agreeing_elements(graph, left, right, common)
        total += pair.value * agreeing
    return total


def _keeps_place(chain: Chain, common: DisjointRegions) -> bool:
    """Whether ``chain`` brings every element of ``common`` from the same index of its root:
    no op, or a fill then a sample that copies each of those indices from itself (a Concat's
    slab unwound into an input and concatenated again). Two such chains agree on ``common``
    without comparing whole arrays, which for k inputs of a Concat would cost k times the
    size of the Concat's output."""
    ops = chain.ops
    if not ops:
        return True
    if (len(ops) != 2 or ops[0].type != "SettFillInto" or ops[1].type != "SettSample"
            or chain.in_shape != chain.out_shape):
        return False
    sources = fill_sample_sources(ops[0].attr, ops[1].attr)
    return all(
        np.array_equal(axis[ons], ons)
        for region in common.regions
        for axis, ons in zip(sources, region.ons_arrays(), strict=True)
    )


def _agreeing_elements(graph: UnwindGraph, left: Path, right: Path, common: DisjointRegions) -> int:
    """Where two different chains from one root bring the same root element."""
    ids = np.arange(1, graph.numel(left.src) + 1).reshape(graph.shape(left.src))
    same = left.chain.apply(ids) == right.chain.apply(ids)
    return int(np.count_nonzero(same & common.mask()))
