"""The default solver: Greedy0 with deferral of blocking pairs.

Greedy0 takes the most valuable queued pair first, but a pair can only fill what is still
free, so a cheap pair unwound early can block a valuable one that only becomes available
later (e.g. once a barrier's inputs are complete). Each run records those blockers; the next
run queues them behind every other pair. Likewise a sink that had to keep its own origins
(nothing reached it) and was later wanted by a pair is kept open longer in the next run.
Runs repeat until no new blocker appears or
``max_rounds`` is reached, and the best run wins. The first run is Greedy0 itself, so the
result is never below Greedy0's. Where the graph has at most ``polish_up_to`` sink elements,
an element-level local search (``polish.py``) then improves it further, never worsening it.
"""

from __future__ import annotations

from popart_unwind.unwind.graph import UnwindGraph
from popart_unwind.unwind.greedy0 import GreedyRunner, greedy_runner
from popart_unwind.unwind.polish import polish
from popart_unwind.unwind.solution import Solution


def deferral_rounds(
    run: GreedyRunner, max_rounds: int, deferred: frozenset = frozenset(),
    late: frozenset = frozenset(),
) -> tuple[Solution, int, frozenset, frozenset]:
    """The best of the runs that defer each run's blockers (and keep its late sinks open)
    in the next, starting from ``deferred`` and ``late``; with the rounds taken and the
    final deferred pairs and late sinks."""
    best, blockers, late_sinks = run(deferred, late)
    rounds = 1
    while rounds < max_rounds and not (blockers <= deferred and late_sinks <= late):
        deferred = deferred | frozenset(blockers)
        late = late | frozenset(late_sinks)
        candidate, blockers, late_sinks = run(deferred, late)
        rounds += 1
        if candidate.symbolic_score() > best.symbolic_score():
            best = candidate
    return best, rounds, deferred, late


def solve_deferral(
    graph: UnwindGraph, max_rounds: int = 8, polish_up_to: int = 20_000, engine: str = "native"
) -> Solution:
    best, rounds, deferred, late = deferral_rounds(greedy_runner(graph, engine), max_rounds)
    found = best.relabelled(
        "deferral",
        {"rounds": rounds, "deferred_pairs": len(deferred), "late_sinks": len(late)},
    )
    return polish(found, max_sink_elements=polish_up_to)
