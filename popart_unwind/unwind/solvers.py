"""The solver registry behind ``UnwindGraph.solve(algo=...)``."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

from popart_unwind.errors import SolverError
from popart_unwind.unwind.deferral import solve_deferral
from popart_unwind.unwind.graph import UnwindGraph
from popart_unwind.unwind.greedy0 import solve_greedy0
from popart_unwind.unwind.hybrid import solve_hybrid
from popart_unwind.unwind.restarts import solve_restarts
from popart_unwind.unwind.solution import Solution


def _solve_exact(graph: UnwindGraph, **options) -> Solution:
    """Imported on use: HiGHS is only loaded when the exact solver is asked for."""
    from popart_unwind.unwind.exact import solve_exact

    return solve_exact(graph, **options)


SOLVERS: dict[str, Callable[..., Solution]] = {
    "greedy0": solve_greedy0,
    "deferral": solve_deferral,
    "hybrid": solve_hybrid,
    "restarts": solve_restarts,
    "exact": _solve_exact,
}

DEFAULT = "hybrid"


def solve(graph: UnwindGraph, algo: str = "default", **options) -> Solution:
    name = DEFAULT if algo == "default" else algo
    if name not in SOLVERS:
        raise SolverError(f"unknown unwinding algorithm {algo!r}; choose from {sorted(SOLVERS)}")
    with cyclic_gc_paused():
        return SOLVERS[name](graph, **options)


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Solvers allocate many small acyclic objects (paths, chains, regions), which keep
    triggering the cyclic collector over an ever larger heap: about half the solve time on
    large graphs (benchmarks/RESULTS.md). Reference counting still frees them; the collector
    is restored to its previous state afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
