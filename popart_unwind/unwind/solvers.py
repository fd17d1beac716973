"""The solver registry behind ``Graph.solve(algo=...)``."""

from __future__ import annotations

from collections.abc import Callable

from popart_unwind.errors import SolverError
from popart_unwind.unwind.deferral import solve_deferral
from popart_unwind.unwind.graph import Graph
from popart_unwind.unwind.greedy0 import solve_greedy0
from popart_unwind.unwind.solution import Solution

SOLVERS: dict[str, Callable[..., Solution]] = {
    "greedy0": solve_greedy0,
    "deferral": solve_deferral,
}

DEFAULT = "deferral"


def solve(graph: Graph, algo: str = "default", **options) -> Solution:
    name = DEFAULT if algo == "default" else algo
    if name not in SOLVERS:
        raise SolverError(f"unknown unwinding algorithm {algo!r}; choose from {sorted(SOLVERS)}")
    return SOLVERS[name](graph, **options)
