"""How close the heuristics come to the proven optimum on random graphs.

Graphs come from ``popart_unwind.unwind.random_graphs.random_graph`` (every op type; several
sources competing for one sink; barriers whose outputs are tied back to the sinks feeding
them; about one in eight graphs with no source at all), seeded by their number. Each is
solved by the exact solver; graphs it does not prove optimal, or whose optimum is 0, are
left out and counted. For each solver the ratio score ÷ optimum is summarised: Greedy0,
the deferral heuristic, deferral with restarts, and the default (hybrid: deferral finished
by the exact solver, limited to 2,000 branch-and-bound nodes, on graphs of at most 4,000
sink elements, with restarts where that search runs out of time; every graph here is that
small, so the deferral and restarts rows say how the heuristics alone do on larger graphs,
and the hybrid row what the node and time limits leave).

    python benchmarks/unwind_quality.py --graphs 500 --sizes 2 3 4 6
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from models import machine

from popart_unwind.unwind.random_graphs import random_graph

HEURISTICS = ("greedy0", "deferral", "restarts", "hybrid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=500, help="graphs per size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 3, 4, 6])
    parser.add_argument("--time-limit", type=float, default=20.0)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"{'size':>4} {'solver':>9} {'graphs':>6} {'mean':>8} {'min':>8} {'= opt':>6} "
          f"{'skipped':>7} {'seconds':>8} {'max s':>6}")
    for size in args.sizes:
        ratios: dict[str, list[float]] = {name: [] for name in HEURISTICS}
        seconds = dict.fromkeys(HEURISTICS, 0.0)
        slowest = dict.fromkeys(HEURISTICS, 0.0)
        skipped = 0
        for seed in range(args.graphs):
            graph = random_graph(np.random.default_rng(seed), size)
            exact = graph.solve("exact", time_limit=args.time_limit)
            optimum = exact.score()
            if not exact.proven_optimal or optimum <= 0:
                skipped += 1
                continue
            for name in HEURISTICS:
                start = time.perf_counter()
                solution = graph.solve(name)
                took = time.perf_counter() - start
                seconds[name] += took
                slowest[name] = max(slowest[name], took)
                ratios[name].append(solution.score() / optimum)
        for name in HEURISTICS:
            values = ratios[name]
            at_optimum = sum(1 for r in values if r >= 1 - 1e-9)
            print(f"{size:>4} {name:>9} {len(values):>6} {statistics.fmean(values):>8.4f} "
                  f"{min(values):>8.4f} {at_optimum:>6} {skipped:>7} {seconds[name]:>8.1f} "
                  f"{slowest[name]:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
