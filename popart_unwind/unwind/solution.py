"""Solutions of the unwinding problem and their exact, elementwise meaning (docs/unwind.md).

A solution is a list of sink paths: each sets the elements ``regions`` of the sink ``dst`` to
the mappings that ``chain`` brings from the tensor ``src``. Every other element of a sink is
its own fresh origin. From these, every tensor's layout follows, element by element:

* roots (sources, barrier, fixed_point and sum_like_reduce outputs) and sinks each own a
  block of consecutive origin ids, blocks in TensorId order, ids in row-major order;
* a non-root tensor's element takes the origin of the one input element it derives from.

A path makes its sink depend on the whole layout of ``src``; barrier and sum_like_reduce
outputs depend on all their inputs. A solution whose dependencies form a cycle is invalid.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from popart_unwind.errors import SolverError
from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.unwind.graph import TensorId, UnwindGraph
from popart_unwind.unwind.ops import FREE_ROOT_KINDS, ROOT_KINDS, forward_edges

if TYPE_CHECKING:
    from popart_unwind.unwind.symbolic import InwardPaths

EMPTY = -1


@dataclass(frozen=True)
class Path:
    """``dst``'s elements in ``regions`` take the mappings ``chain`` brings from ``src``."""

    src: TensorId
    dst: TensorId
    chain: Chain
    regions: DisjointRegions

    def __repr__(self) -> str:
        return f"Path({self.src!r} -> {self.dst!r}: {self.chain!r} on {self.regions!r})"


def apply_to_ids(chain: Chain, ids: np.ndarray) -> np.ndarray:
    """Origin ids moved by ``chain``; elements it leaves empty get EMPTY."""
    return chain.apply(ids + 1) - 1


def layout_inputs(graph: UnwindGraph, tensor: TensorId) -> tuple[TensorId, ...]:
    """The tensors whose layouts ``tensor``'s layout is made from, through graph edges alone
    (a sink's paths come on top): all inputs of a barrier or sum_like_reduce, the inputs a
    view or concat takes elements from, a sum_like's first unwind input; nothing for sinks,
    sources and fixed points."""
    node = graph.node(tensor)
    if node.kind == "sum_like":
        return (node.inputs[node.unwind_indices[0]],)
    if node.kind == "sink" or node.kind in FREE_ROOT_KINDS:
        return ()
    return tuple(dict.fromkeys(node.inputs))


def sink_ancestors(graph: UnwindGraph) -> dict[TensorId, frozenset[TensorId]]:
    """For each tensor, the sinks its layout depends on through graph edges alone.

    A sink counts itself; every other tensor the sinks of its layout inputs (the rule of
    ``solution.layout_inputs``, which validity checks use too). Only sink paths can close a
    cycle, so a cycle always runs sink -> path source -> ... -> sink.
    """
    ancestors: dict[TensorId, frozenset[TensorId]] = {}
    for tensor in graph.tensors():
        if graph.kind(tensor) == "sink":
            ancestors[tensor] = frozenset([tensor])
        else:
            inputs = layout_inputs(graph, tensor)
            ancestors[tensor] = frozenset().union(*(ancestors[t] for t in inputs))
    return ancestors


def dependencies(graph: UnwindGraph, sink_paths: list[Path]) -> dict[TensorId, list[TensorId]]:
    """What each tensor's layout depends on: its layout inputs, and for a sink the sources
    of its paths."""
    by_sink: dict[TensorId, list[TensorId]] = {}
    for path in sink_paths:
        by_sink.setdefault(path.dst, []).append(path.src)
    return {
        tensor: sorted({*layout_inputs(graph, tensor), *by_sink.get(tensor, ())})
        for tensor in graph.tensors()
    }


def dependency_order(graph: UnwindGraph, sink_paths: list[Path]) -> list[TensorId]:
    """Tensors in an order where each comes after everything its layout depends on."""
    deps = dependencies(graph, sink_paths)
    users: dict[TensorId, list[TensorId]] = {t: [] for t in deps}
    waiting = {t: len(d) for t, d in deps.items()}
    for tensor, needs in deps.items():
        for need in needs:
            users[need].append(tensor)
    ready = sorted(t for t, n in waiting.items() if n == 0)
    heapq.heapify(ready)
    order: list[TensorId] = []
    while ready:
        tensor = heapq.heappop(ready)
        order.append(tensor)
        for user in users[tensor]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(deps):
        stuck = sorted(t for t, n in waiting.items() if n > 0)
        raise SolverError(
            "invalid solution: layouts depend on themselves in a cycle through "
            f"{stuck[:8]}{' ...' if len(stuck) > 8 else ''} (a sink unwound from a tensor "
            "that depends on it, e.g. through a barrier)"
        )
    return order


def origin_blocks(graph: UnwindGraph) -> dict[TensorId, int]:
    """The first origin id of each root's and sink's block."""
    starts, next_id = {}, 0
    for tensor in graph.tensors():
        kind = graph.kind(tensor)
        if kind in ROOT_KINDS or kind == "sink":
            starts[tensor] = next_id
            next_id += graph.numel(tensor)
    return starts


def check_paths(graph: UnwindGraph, sink_paths: list[Path]) -> None:
    """Each path fits its tensors, covers only what its chain reaches, and paths into one
    sink do not overlap."""
    covered: dict[TensorId, DisjointRegions] = {}
    for path in sink_paths:
        if graph.kind(path.dst) != "sink":
            raise SolverError(f"{path!r}: destination {path.dst!r} is not a sink")
        if path.chain.in_shape != graph.shape(path.src):
            raise SolverError(
                f"{path!r}: chain starts at {path.chain.in_shape}, "
                f"not {path.src!r}'s shape {graph.shape(path.src)}"
            )
        if path.chain.out_shape != graph.shape(path.dst) or path.regions.shape != graph.shape(
            path.dst
        ):
            raise SolverError(
                f"{path!r}: chain or regions do not have {path.dst!r}'s shape "
                f"{graph.shape(path.dst)}"
            )
        reached = path.chain.apply_regions(Region.full(graph.shape(path.src)))
        if not reached.contains(path.regions):
            raise SolverError(f"{path!r}: covers elements its chain does not reach")
        before = covered.get(path.dst)
        if before is not None and before.intersect(path.regions).total_elms():
            raise SolverError(f"{path!r}: overlaps another path into {path.dst!r}")
        merged = [*(before.regions if before else ()), *path.regions.regions]
        covered[path.dst] = DisjointRegions(graph.shape(path.dst), merged)


def compute_layouts(graph: UnwindGraph, sink_paths: list[Path]) -> dict[TensorId, np.ndarray]:
    """Every tensor's layout as origin ids (see the module docstring)."""
    check_paths(graph, sink_paths)
    starts = origin_blocks(graph)
    into: dict[TensorId, list[Path]] = {}
    for path in sink_paths:
        into.setdefault(path.dst, []).append(path)
    layouts: dict[TensorId, np.ndarray] = {}
    for tensor in dependency_order(graph, sink_paths):
        shape = graph.shape(tensor)
        node = graph.node(tensor)
        if tensor in starts:
            ids = np.arange(starts[tensor], starts[tensor] + math.prod(shape), dtype=np.int64)
            layout = ids.reshape(shape)
            for path in into.get(tensor, []):
                moved = apply_to_ids(path.chain, layouts[path.src])
                mask = path.regions.mask()
                layout[mask] = moved[mask]
        else:
            layout = np.full(shape, EMPTY, dtype=np.int64)
            for edge in forward_edges(node, shape, graph.in_shapes(node)):
                moved = apply_to_ids(edge.chain, layouts[edge.src])
                mask = edge.region.mask()
                layout[mask] = moved[mask]
        layouts[tensor] = layout
    return layouts


def elementwise_score(graph: UnwindGraph, layouts: dict[TensorId, np.ndarray]) -> float:
    """The objective: for each ValuedPair, its value times the number of agreeing indices."""
    return float(
        sum(
            pair.value * np.count_nonzero(layouts[pair.a] == layouts[pair.b])
            for pair in graph.valued_pairs()
        )
    )


def upper_bound(graph: UnwindGraph) -> float:
    """Every pair satisfied at every index."""
    return float(sum(pair.value * graph.numel(pair.a) for pair in graph.valued_pairs()))


def score(graph: UnwindGraph, sink_paths: list[Path]) -> float:
    """The exact objective of any user-given solution."""
    return elementwise_score(graph, compute_layouts(graph, list(sink_paths)))


class Solution:
    """Sink paths chosen by a solver, with the layouts and score they imply."""

    def __init__(
        self,
        graph: UnwindGraph,
        sink_paths: list[Path],
        algo: str = "",
        proven_optimal: bool = False,
        stats: dict | None = None,
    ) -> None:
        self.graph = graph
        self._sink_paths = list(sink_paths)
        self.algo = algo
        self.proven_optimal = proven_optimal
        self.stats = dict(stats or {})
        self._layouts: dict[TensorId, np.ndarray] | None = None
        self._inward_paths: InwardPaths | None = None
        dependency_order(graph, self._sink_paths)  # reject cyclic solutions at once

    def sink_paths(self) -> list[Path]:
        return list(self._sink_paths)

    def relabelled(
        self, algo: str, stats: dict | None = None, proven_optimal: bool = False
    ) -> Solution:
        """The same sink paths under another solver's name and statistics."""
        return Solution(self.graph, self._sink_paths, algo, proven_optimal, stats)

    def paths(self, tensor: TensorId) -> list[Path]:
        """Why ``tensor`` has its layout: disjoint paths covering it, each from a root (or a
        sink's own origins) through a canonical chain."""
        return list(self._inward()[tensor])

    def _inward(self) -> InwardPaths:
        """Inward paths, each tensor's computed when first asked for."""
        if self._inward_paths is None:
            from popart_unwind.unwind.symbolic import InwardPaths

            self._inward_paths = InwardPaths(self.graph, self._sink_paths)
        return self._inward_paths

    def layouts(self) -> dict[TensorId, np.ndarray]:
        if self._layouts is None:
            self._layouts = compute_layouts(self.graph, self._sink_paths)
        return self._layouts

    def layout(self, tensor: TensorId) -> np.ndarray:
        return self.layouts()[tensor].copy()

    def score(self) -> float:
        return elementwise_score(self.graph, self.layouts())

    def upper_bound(self) -> float:
        return upper_bound(self.graph)

    def symbolic_score(self) -> float:
        """The same number as ``score()``, from regions and chains: its cost does not grow
        with tensor sizes where chains agree (see ``symbolic.py``)."""
        from popart_unwind.unwind.symbolic import symbolic_score

        return symbolic_score(self.graph, self._inward())

    def __repr__(self) -> str:
        return (
            f"Solution({self.algo}, {len(self._sink_paths)} sink paths, "
            f"score {self.score():g} of {self.upper_bound():g})"
        )
