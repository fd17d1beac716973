"""Solve a chain of N matmul-like blocks, at two tensor scales, with each solver.

The graph (the block chain on which poprithms' Greedy0 is timed beside ours): a0 =
sink(8,16) tied to a source at 1.0. Block i, variant 0: x = sink(8,16); u =
sum_like([a_prev, x], [1], 3); lhs = dim_shuffle(reshape(u, (16,8)), (1,0)) tied to a
source(8,16) at 9; w = sink(16,16) tied to a source(16,16) at 10; mm = barrier([lhs, w],
[(8,16)]); b = sink(16); a = sum_like([mm, b], 0, 20).out. Variant 1: x is the top half
(rows 0:8) of a sink(16,16) whose bottom half, reversed along axis 1, is tied to a_prev at
2.
``--scale 64`` multiplies every dimension by 64.

    python benchmarks/unwind_blocks.py --blocks 100 1000 --scale 1 64

Scores are computed symbolically (``Solution.symbolic_score``, equal to the elementwise
objective by construction and by test); the solve time excludes scoring. ``--engines``
runs the greedy solvers in the C++ core (``native``, the default) and in the Python
reference (``python``). The core keeps a solution's sink paths until they are asked for;
"paths s" is the time their conversion to Python objects takes on first use (what a
caller that reads ``sink_paths()`` or ``layouts()`` pays once, on top of the solve). A
solver is skipped for larger N once one of its runs exceeds ``--budget`` seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from popart_unwind.unwind import UnwindGraph


def build(blocks: int, variant: int, scale: int) -> UnwindGraph:
    rows, cols = 8 * scale, 16 * scale
    g = UnwindGraph()
    previous = g.sink((rows, cols), "a0")
    g.valued_pair(previous, g.source((rows, cols)), 1.0)
    for _ in range(blocks):
        if variant == 0:
            x = g.sink((rows, cols), "x")
        else:
            tall = g.sink((2 * rows, cols), "xx")
            x = g.slice(tall, (0, 0), (rows, cols))
            bottom = g.reverse(g.slice(tall, (rows, 0), (2 * rows, cols)), (1,))
            g.valued_pair(bottom, previous, 2.0)
        u = g.sum_like([previous, x], [1], 3.0).out
        lhs = g.dim_shuffle(g.reshape(u, (cols, rows)), (1, 0))
        g.valued_pair(lhs, g.source((rows, cols)), 9.0)
        w = g.sink((cols, cols), "w")
        g.valued_pair(w, g.source((cols, cols)), 10.0)
        (mm,) = g.barrier([lhs, w], [(rows, cols)])
        bias = g.sink((cols,), "b")
        previous = g.sum_like([mm, bias], 0, 20.0).out
    return g


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, nargs="*", default=[100, 1000, 10000])
    parser.add_argument("--scale", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--solvers", nargs="+", default=["greedy0", "deferral"])
    parser.add_argument("--engines", nargs="+", default=["native"], choices=["native", "python"])
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument(
        "--exact-blocks",
        type=int,
        nargs="*",
        default=[1, 3, 6],
        help="also solve these (small) block counts at scale 1 with the exact solver",
    )
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"{'variant':>7} {'scale':>5} {'blocks':>6} {'tensors':>8} {'solver':>9} "
        f"{'engine':>6} {'solve s':>9} {'paths s':>8} {'score':>14} {'upper bound':>14}"
    )
    runs = [(solver, engine) for solver in args.solvers for engine in args.engines]
    for variant in (0, 1):
        for blocks in args.exact_blocks:
            graph = build(blocks, variant, 1)
            for solver, engine in [*runs, ("exact", "")]:
                report(graph, variant, 1, blocks, solver, engine)
        for scale in args.scale:
            over_budget: set[tuple[str, str]] = set()
            for blocks in args.blocks:
                graph = build(blocks, variant, scale)
                for run in runs:
                    if run in over_budget:
                        continue
                    if report(graph, variant, scale, blocks, *run) > args.budget:
                        over_budget.add(run)


def report(
    graph: UnwindGraph, variant: int, scale: int, blocks: int, solver: str, engine: str
) -> float:
    """Solve, print one row, return the solve time."""
    options = {"engine": engine} if engine else {}
    start = time.perf_counter()
    solution = graph.solve(solver, **options)
    seconds = time.perf_counter() - start
    score = solution.symbolic_score()
    start = time.perf_counter()
    solution.sink_paths()
    to_python = time.perf_counter() - start
    proven = "  (proven optimal)" if solution.proven_optimal else ""
    print(
        f"{variant:>7} {scale:>5} {blocks:>6} {len(graph):>8} {solver:>9} {engine:>6} "
        f"{seconds:>9.2f} {to_python:>8.2f} {score:>14.1f} {solution.upper_bound():>14.1f}"
        f"{proven}",
        flush=True,
    )
    return seconds


if __name__ == "__main__":
    main()
