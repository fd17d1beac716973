"""The default solver: the deferral heuristic, finished exactly where the graph is small.

The heuristic (``deferral.py``) is fast at any size but can lose a tenth or more of the
value on an unlucky graph, where one barrier conflict needs several decisions looked ahead.
On a graph with at most ``exact_up_to`` sink elements, the exact solver (``exact.py``) then
starts from the heuristic's solution and searches at most ``exact_nodes`` branch-and-bound
nodes: small problems are proven optimal, and a stopped search still returns a solution
at least as good as its start. A node limit, unlike a time limit, stops at the same point on
every run, so the result does not depend on the machine's load. The root node's work (cuts,
heuristics) has no such limit, so a time limit (``EXACT_SECONDS``) stays as a safety net;
when it is what stopped the search, whatever the search had reached by then is dropped (it
would depend on the machine's speed) and deferral is restarted from perturbed starts instead
(``restarts.py``): deterministic, and never below deferral's solution.

A heuristic solution that already scores the graph's upper bound (every pair satisfied at
every index) is optimal as it is: no search is started, and it is returned as proven. The
exact program's size does not follow its sink elements alone (each element's candidate
labels grow with how many tensors it is tied to: for 8 nested ``If``s around one ``Relu``,
HiGHS's root ran into the time limit, then the restarts ran, and the process waited at exit
for the solve left behind, 166 s in all), so this spares the search on the many graphs whose
heuristic leaves nothing to gain.

Above ``exact_up_to`` the heuristic's solution is returned as it is: the exact program grows
with sink elements, and the graphs of models have more (the demo's transformer block 57,896,
a real model tens of millions), so on models the default plans exactly as deferral does.
"""

from __future__ import annotations

from popart_unwind.unwind.deferral import solve_deferral
from popart_unwind.unwind.graph import UnwindGraph
from popart_unwind.unwind.restarts import solve_restarts
from popart_unwind.unwind.solution import Solution

#: HiGHS's words for a search its time limit stopped.
TIME_LIMIT = "Time limit reached"

#: Safety net only: the node limit or a proof is what normally ends a search (random graphs
#: of 140 sink elements took up to 20 s in benchmarks/unwind_exact_reach.py).
EXACT_SECONDS = 10.0


def solve_hybrid(
    graph: UnwindGraph,
    max_rounds: int = 8,
    polish_up_to: int = 20_000,
    exact_up_to: int = 4_000,
    exact_nodes: int = 2_000,
    exact_seconds: float = EXACT_SECONDS,
    engine: str = "native",
) -> Solution:
    """Deferral's solution, improved by a node-limited exact search on small graphs (or by
    restarts where that search runs out of time); never below deferral's, and
    ``proven_optimal`` when the search ended with a proof."""
    heuristic = solve_deferral(
        graph, max_rounds=max_rounds, polish_up_to=polish_up_to, engine=engine)
    stats = {f"deferral_{key}": value for key, value in heuristic.stats.items()}
    elements = sum(graph.numel(sink) for sink in graph.sinks())
    stats["sink_elements"] = elements
    if elements > exact_up_to or not graph.valued_pairs():
        stats["finish"] = "none"
        return heuristic.relabelled("hybrid", stats)
    if heuristic.score() >= heuristic.upper_bound():
        # No label can score more than every pair satisfied: the search could only return
        # this solution (it replaces the start only when strictly better), and a finished
        # one proves it at the root, as its relaxation is bounded by the same sum.
        stats["finish"] = "upper bound"
        return heuristic.relabelled("hybrid", stats, True)

    from popart_unwind.unwind.exact import solve_exact  # loads HiGHS only when needed

    exact = solve_exact(
        graph, time_limit=exact_seconds, max_sink_elements=exact_up_to,
        start=heuristic, max_nodes=exact_nodes,
    )
    stats["exact_status"] = exact.stats.get("status", "")
    stats["exact_nodes"] = exact.stats.get("nodes", 0)
    if exact.stats.get("status") == TIME_LIMIT:
        restarted = solve_restarts(graph, max_rounds=max_rounds, polish_up_to=polish_up_to,
                                   engine=engine, start=heuristic)
        stats["finish"] = "time limit: restarts"
        stats["restart_improved"] = restarted.stats["restart_improved"]
        return restarted.relabelled("hybrid", stats)
    stats["finish"] = "exact"
    best = exact if exact.score() > heuristic.score() else heuristic
    return best.relabelled("hybrid", stats, exact.proven_optimal)
