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

from popart_unwind.unwind.graph import Graph
from popart_unwind.unwind.greedy0 import greedy_runner
from popart_unwind.unwind.polish import polish
from popart_unwind.unwind.solution import Solution


def solve_deferral(
    graph: Graph, max_rounds: int = 8, polish_up_to: int = 20_000, engine: str = "native"
) -> Solution:
    run = greedy_runner(graph, engine)
    deferred: frozenset[int] = frozenset()
    late: frozenset = frozenset()
    best, blockers, late_sinks = run(deferred, late)
    rounds = 1
    while rounds < max_rounds and not (blockers <= deferred and late_sinks <= late):
        deferred = deferred | frozenset(blockers)
        late = late | frozenset(late_sinks)
        candidate, blockers, late_sinks = run(deferred, late)
        rounds += 1
        if candidate.symbolic_score() > best.symbolic_score():
            best = candidate
    found = best.relabelled(
        "deferral",
        {"rounds": rounds, "deferred_pairs": len(deferred), "late_sinks": len(late)},
    )
    return polish(found, max_sink_elements=polish_up_to)
