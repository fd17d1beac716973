"""The bridge to the solver's C++ core (``popart_unwind._hooks.unwind_core``).

The core keeps its own copy of the UnwindGraph (tensors, op attributes, ValuedPairs) and runs
Greedy0 and the deferral heuristic's greedy runs on it; ``greedy0.py`` stays the reference
it is tested against (same sink paths in the same order; ``engine="python"`` runs it).
Only descriptions cross the boundary: a chain as its input shape and ``(op type, input
shape, attribute)`` per op going in, with the output shape too coming back; a region as its
shape, per-dimension ``[first, last)`` runs and an empty flag.
"""

from __future__ import annotations

import functools
from functools import cached_property

import numpy as np

from popart_unwind._hooks import unwind_core as core
from popart_unwind.errors import SolverError
from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.memory import sett_bounded as sb
from popart_unwind.memory.chain_ops import ChainOp
from popart_unwind.unwind.graph import UnwindGraph
from popart_unwind.unwind.solution import Path, Solution

_REGION_ATTR = frozenset({"SettSample", "SettFillInto"})


# ----- Python -> core ------------------------------------------------------------------------
@functools.lru_cache(maxsize=1 << 14)
def _runs(dim: object, size: int) -> tuple[tuple[int, int], ...]:
    """One dimension's on indices as ``[first, last)`` runs (memoised: views repeat)."""
    ons = sb.ons(dim, size)
    if not ons.size:
        return ()
    breaks = np.flatnonzero(np.diff(ons) != 1)
    firsts = np.concatenate(([ons[0]], ons[breaks + 1]))
    lasts = np.concatenate((ons[breaks] + 1, [ons[-1] + 1]))
    return tuple(zip(firsts.tolist(), lasts.tolist(), strict=True))


def region_value(region: Region) -> tuple:
    """A Region as the core takes it."""
    return (region.shape,
            [_runs(dim, n) for dim, n in zip(region.setts, region.shape, strict=True)],
            region.is_empty())


def chain_value(chain: Chain) -> tuple:
    """A Chain as the core takes it."""
    ops = []
    for op in chain.ops:
        attr = region_value(op.attr) if op.type in _REGION_ATTR else tuple(op.attr)
        ops.append((op.type, op.in_shape, attr))
    return (chain.in_shape, ops)


def native_graph(graph: UnwindGraph) -> core.Graph:
    """The core's copy of ``graph``."""
    out = core.Graph()
    for tensor in graph.tensors():
        node = graph.node(tensor)
        chain = chain_value(node.chain) if node.chain is not None else None
        out.add(node.kind, graph.shape(tensor), [t.index for t in node.inputs], chain,
                node.axis, list(node.unwind_indices))
    for pair in graph.valued_pairs():
        out.add_pair(pair.a.index, pair.b.index, pair.value)
    return out


# ----- core -> Python ------------------------------------------------------------------------
@functools.lru_cache(maxsize=1 << 14)
def _dim(runs: tuple[tuple[int, int], ...], size: int):
    if not runs:
        return sb.EMPTY
    if len(runs) == 1 and runs[0] == (0, size):
        return sb.FULL
    return sb.from_sorted(np.concatenate([np.arange(a, b) for a, b in runs]), size)


def region_from_value(value: tuple) -> Region:
    shape, dims, empty = value
    shape = tuple(shape)
    setts = tuple(_dim(tuple(map(tuple, runs)), n) for runs, n in zip(dims, shape, strict=True))
    return Region._make(shape, setts, empty)


def regions_from_value(value: tuple) -> DisjointRegions:
    shape, members = value
    return DisjointRegions(tuple(shape), [region_from_value(m) for m in members])


def chain_from_value(value: tuple) -> Chain:
    """A Chain from the core's ``(input shape, [(type, input shape, output shape, attr)])``."""
    in_shape, ops = value
    return Chain(tuple(in_shape), [
        ChainOp(op_type, tuple(op_in), tuple(op_out),
                region_from_value(attr) if op_type in _REGION_ATTR else tuple(attr))
        for op_type, op_in, op_out, attr in ops])


def paths_from_values(graph: UnwindGraph, values: list) -> list[Path]:
    tensor = graph.tensor
    return [
        Path(tensor(src), tensor(dst), chain_from_value(chain), regions_from_value(regions))
        for src, dst, chain, regions in values
    ]


class NativeSolution(Solution):
    """A Solution whose sink paths stay in the C++ core until they are asked for.

    Its symbolic score is computed in the core; ``sink_paths()``, ``layouts()`` and the rest
    of ``Solution`` convert the paths to Python objects once, on first use.
    """

    def __init__(self, graph: UnwindGraph, run: core.NativeRun, algo: str = "",
                 stats: dict | None = None) -> None:
        self.graph = graph
        self._run = run
        self.algo = algo
        self.proven_optimal = False
        self.stats = dict(stats or {})
        self._layouts = None
        self._inward_paths = None
        self._score: float | None = None
        try:
            run.check()  # reject cyclic solutions at once, as Solution does
        except ValueError as error:
            raise SolverError(str(error)) from None

    @cached_property
    def _sink_paths(self) -> list[Path]:  # type: ignore[override]
        return paths_from_values(self.graph, self._run.paths())

    def symbolic_score(self) -> float:
        if self._score is None:
            self._score = self._run.symbolic_score()
        return self._score

    def relabelled(self, algo: str, stats: dict | None = None,
                   proven_optimal: bool = False) -> Solution:
        if proven_optimal:
            return super().relabelled(algo, stats, proven_optimal)
        found = NativeSolution(self.graph, self._run, algo, stats)
        found._score = self._score
        return found


class NativeAnalysis:
    """The core's graph and analysis, computed once for every greedy run on it."""

    def __init__(self, graph: UnwindGraph) -> None:
        self.graph = graph
        self._graph = native_graph(graph)
        self._analysis = core.Analysis(self._graph)

    def run(
        self, deferred: frozenset[int] = frozenset(), late: frozenset = frozenset()
    ) -> tuple[Solution, set[int], set]:
        """One greedy run: (its solution, blockers, late sinks), as ``GreedyRun`` gives them."""
        run = core.greedy_run(self._analysis, set(deferred), {t.index for t in late})
        tensor = self.graph.tensor
        solution = NativeSolution(self.graph, run, algo="greedy0")
        return solution, set(run.blockers), {tensor(t) for t in run.late_sinks}
