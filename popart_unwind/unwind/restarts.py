"""Deferral restarted from perturbed starts, for graphs where one run is not enough.

Deferral (``deferral.py``) learns which pairs to queue last from the blockers of its own
runs, so it follows one trajectory and can settle where a barrier conflict needs several
pairs deferred at once that no single run reveals. Restarting it with a random part of the
pairs deferred and of the sinks kept open from the start explores other trajectories; the
best run of all wins and is polished (``polish.py``), so the result is never below
deferral's. The random draws come from a fixed seed over pairs in index order and sinks in
name order, so every run gives the same solution.

On random graphs of size 16 (64 steps; benchmarks/unwind_quality.py) restarts lift
deferral's worst ratio to the optimum from 0.891 to 0.937 (mean 0.986 to 0.996); on the
unwinding graphs of the benchmark models they found nothing better than deferral's first
run (benchmarks/RESULTS.md), so the default solver uses them only where its exact finish
runs out of time (``hybrid.py``).
"""

from __future__ import annotations

import numpy as np

from popart_unwind.unwind.deferral import deferral_rounds, solve_deferral
from popart_unwind.unwind.graph import UnwindGraph
from popart_unwind.unwind.greedy0 import greedy_runner
from popart_unwind.unwind.polish import polish
from popart_unwind.unwind.solution import Solution

#: Chance that a pair starts deferred, and that a sink starts kept open, in a restart.
DEFER_CHANCE = 0.3
LATE_CHANCE = 0.2


def solve_restarts(
    graph: UnwindGraph, restarts: int = 32, polished: int = 4, max_rounds: int = 8,
    polish_up_to: int = 20_000, seed: int = 0, engine: str = "native",
    start: Solution | None = None,
) -> Solution:
    """The best of deferral and ``restarts`` perturbed deferral runs, the ``polished`` best
    distinct runs polished; ``start`` (deferral's solution, when the caller has it) is kept
    if nothing beats it."""
    run = greedy_runner(graph, engine)
    first = start if start is not None else solve_deferral(
        graph, max_rounds=max_rounds, polish_up_to=polish_up_to, engine=engine)
    rng = np.random.default_rng(seed)
    pairs = range(len(graph.valued_pairs()))
    sinks = sorted(graph.sinks(), key=str)
    by_score: dict[float, Solution] = {}
    for _ in range(restarts):
        deferred = frozenset(p for p in pairs if rng.random() < DEFER_CHANCE)
        late = frozenset(s for s in sinks if rng.random() < LATE_CHANCE)
        found, _, _, _ = deferral_rounds(run, max_rounds, deferred, late)
        by_score.setdefault(found.symbolic_score(), found)
    best = first
    for score in sorted(by_score, reverse=True)[:polished]:
        candidate = polish(by_score[score], max_sink_elements=polish_up_to)
        if candidate.symbolic_score() > best.symbolic_score():
            best = candidate
    stats = {**first.stats, "restarts": restarts,
             "restart_improved": best is not first}
    return best.relabelled("restarts", stats)
