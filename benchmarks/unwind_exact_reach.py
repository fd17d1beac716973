"""How large a graph the exact solver proves optimal within a time budget.

Two families, because how long a proof takes depends on how sink elements are tied, not on
how many there are:

* the block chain of ``unwind_blocks.py`` (variants 0 and 1, scale 1): few conflicts per
  element, so the program falls apart in presolve;
* the random graphs of ``random_graphs.random_graph`` at growing ``size``: competing
  sources and barrier cycles everywhere, the hard case (``--seeds`` graphs per size; the
  row is proven only if every one is).

Sizes grow until a graph is not proven within ``--seconds`` (default 60), or the next size
is past ``--max-*``. Each solve runs in this process, one after another; times include
building the program.

    python benchmarks/unwind_exact_reach.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from models import machine
from unwind_blocks import build

from popart_unwind.unwind.random_graphs import random_graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--blocks", type=int, nargs="+", default=[10, 100, 300, 1000])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}; budget {args.seconds:g} s per graph")
    print(f"{'family':<10} {'size':>6} {'tensors':>8} {'sink elms':>10} {'seconds':>8} "
          f"{'proven':>6}")
    largest: dict[str, int] = {}
    families = [(f"blocks v{v}", [[build(n, v, 1)] for n in args.blocks], args.blocks)
                for v in (0, 1)]
    families.append(("random", [[random_graph(np.random.default_rng(seed), size)
                                 for seed in range(args.seeds)] for size in args.sizes],
                     args.sizes))
    for family, groups, sizes in families:
        for size, graphs in zip(sizes, groups, strict=True):
            results = [_solve(graph, args.seconds) for graph in graphs]
            proven = all(ok for ok, _ in results)
            _row(family, size, graphs, [s for _, s in results], proven)
            if not proven:
                break
            largest[family] = max(len(g) for g in graphs)
    print("largest graph proven optimal within the budget (tensors): "
          + ", ".join(f"{family} {count:,}" for family, count in largest.items()))


def _solve(graph, seconds: float) -> tuple[bool, float]:
    began = time.perf_counter()
    solution = graph.solve("exact", time_limit=seconds)
    took = time.perf_counter() - began
    return solution.proven_optimal and took <= seconds, took


def _row(family: str, size: int, graphs: list, seconds: list[float], proven: bool) -> None:
    tensors = max(len(g) for g in graphs)
    elements = max(sum(g.numel(t) for t in g.sinks()) for g in graphs)
    print(f"{family:<16} {size:>6} {tensors:>8,} {elements:>10,} {max(seconds):>8.1f} "
          f"{'yes' if proven else 'no':>6}", flush=True)


if __name__ == "__main__":
    main()
