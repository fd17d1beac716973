"""Where a model's exchange goes, and what a plan leaves to save, by kind of op.

Each op's ``exchange_bytes`` and ``avoidable_bytes`` (``evaluate``'s rows) are grouped by
the op's layout rule (matmul, conv, elementwise, gather, …) and by whether it reads a
planned tensor (a producer-less tensor or a view of one), for our plan and PopART's:

    python benchmarks/exchange_breakdown.py bert real training

``--cycles N`` also lists the ops whose cycles differ most between the two plans;
``--popart-layout TENSOR`` and ``--like TENSOR=OTHER`` cost our plan with a producer-less
tensor laid out otherwise (as PopART lays it out, or as our plan makes another tensor).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # this folder's benchmark: its model import


def planned_tensors(graph, registry) -> set[str]:
    """Producer-less tensors and the outputs of view ops reading only such tensors."""
    planned = {t.id for t in graph.producerless_tensors()}
    for op in graph.schedule():
        if registry.layout_rule(op).kind == "view" and all(
                t.id in planned for t in op.inputs if t is not None):
            planned.update(t.id for t in op.outputs)
    return planned


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=models.MODELS)
    parser.add_argument("size", choices=("tiny", "real"))
    parser.add_argument("kind", choices=("forward", "training"))
    parser.add_argument("--ops", type=int, default=0,
                        help="also list this many ops leaving the most to save")
    parser.add_argument("--cycles", type=int, default=0,
                        help="also list this many ops taking the most cycles above PopART's "
                             "under our plan (and as many below)")
    parser.add_argument("--set", action="append", default=[], metavar="FIGURE=VALUE",
                        help="an IPU Model cost figure changed (as --sensitivity changes "
                             "them), e.g. partial_bytes_per_element=8; repeatable")
    parser.add_argument("--popart-layout", action="append", default=[], metavar="TENSOR",
                        help="also cost our plan with this producer-less tensor laid out "
                             "as the PopART baseline lays it out; repeatable")
    parser.add_argument("--like", action="append", default=[], metavar="TENSOR=OTHER",
                        help="also cost our plan with producer-less TENSOR laid out as our "
                             "plan makes tensor OTHER (of the same shape); repeatable")
    args = parser.parse_args()

    from popart_unwind.transforms import run_pipeline
    from popart_unwind.transforms.unwind_layouts import plan_ir

    from popart_unwind.baselines import popart_baseline
    from popart_unwind.cost import evaluate
    from popart_unwind.ops import REGISTRY
    from popart_unwind.target import IpuModel, TileTarget

    ir = models.import_graph(args.model, args.size, args.kind, "torch")
    run_pipeline(ir)
    changes = {}
    for item in args.set:
        figure, _, value = item.partition("=")
        changes[figure] = type(getattr(IpuModel(), figure))(value)
    target = TileTarget(dataclasses.replace(IpuModel(), **changes))
    plan = plan_ir(ir, target)
    graph = ir.main_graph
    planned = planned_tensors(graph, REGISTRY)
    ops = {op.id: op for op in graph.ops}
    baseline = popart_baseline(ir, target)
    plans = {"ours": ({(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors},
                      plan.op_plans),
             "popart": (dict(baseline.mappings), baseline.op_plans)}
    reports = {}
    for name, (mappings, op_plans) in plans.items():
        report = reports[name] = evaluate(ir, target, mappings=mappings, op_plans=op_plans)
        spent, left = collections.Counter(), collections.Counter()
        for row in report.ops:
            op = ops.get(row.op_id)
            if op is None:  # an op of a subgraph
                key = ("subgraph op", "-")
            else:
                reads = "planned" if any(t.id in planned for t in op.inputs) else "computed"
                key = (REGISTRY.layout_rule(op).kind, reads)
            spent[key] += row.exchange_bytes * row.executions
            left[key] += row.avoidable_bytes * row.executions
        total = report.exchange_bytes
        print(f"{name}: exchange {total / 1e6:,.1f} MB, left to save "
              f"{report.avoidable_exchange_bytes / 1e6:,.1f} MB "
              f"({100 * report.avoidable_exchange_bytes / max(total, 1):.1f}%)")
        for (kind, reads), value in sorted(spent.items(), key=lambda item: -item[1]):
            if value:
                print(f"  {kind:12} reads {reads:8} {100 * value / total:5.1f}% of the "
                      f"exchange, {left[(kind, reads)] / 1e6:10,.3f} MB left to save")
        if args.ops:
            rows = sorted(report.ops, key=lambda row: -row.avoidable_bytes * row.executions)
            for row in rows[:args.ops]:
                if row.avoidable_bytes:
                    print(f"    {row.name[:60]:60} {row.type:18} "
                          f"{row.avoidable_bytes * row.executions / 1e6:9,.3f} MB left")
    if args.cycles:
        print_cycle_differences(reports["ours"], reports["popart"], args.cycles)
    if args.popart_layout or args.like:
        print_changed_layouts(ir, target, plans, reports, args.popart_layout, args.like)


def print_changed_layouts(ir, target, plans, reports, popart_layout: list[str],
                          like: list[str]) -> None:
    """Our plan with some producer-less tensors laid out otherwise: PopART's layout, or
    the layout our plan gives another tensor; the totals beside ours and PopART's."""
    from popart_unwind.cost import evaluate
    from popart_unwind.cost.walk import computed_layouts

    graph_id = ir.main_graph.id
    mappings, op_plans = plans["ours"]
    changed = dict(mappings)
    for tensor in popart_layout:
        changed[(graph_id, tensor)] = plans["popart"][0][(graph_id, tensor)]
    pairs = [item.partition("=")[::2] for item in like]
    found = computed_layouts(ir, target, mappings, {other for _, other in pairs}, op_plans)
    for tensor, other in pairs:
        changed[(graph_id, tensor)] = found[other]
    report = evaluate(ir, target, mappings=changed, op_plans=op_plans)
    popart = reports["popart"]
    print("changed layouts: " + ", ".join(
        [f"{t} as PopART's" for t in popart_layout] + [f"{t} as {o}" for t, o in pairs]))
    for name, cost in (("ours", reports["ours"]), ("ours changed", report),
                       ("popart", popart)):
        exchange = cost.exchange_bytes / popart.exchange_bytes
        cycles = cost.cycles / popart.cycles
        print(f"  {name:13} exchange {cost.exchange_bytes:,} ({exchange:.3f} of PopART's), "
              f"cycles {cost.cycles:,} ({cycles:.3f}), left to save "
              f"{cost.avoidable_exchange_bytes:,}, peak tile bytes {cost.peak_tile_bytes:,}")


def print_cycle_differences(ours, popart, count: int) -> None:
    """The ops whose cycles (exchange, partial sums, compute; times executions) differ most
    between the two plans, each way, with the total difference."""
    theirs = {(row.graph_id, row.op_id): row for row in popart.ops}
    differences = []
    for row in ours.ops:
        other = theirs.get((row.graph_id, row.op_id))
        if other is not None:
            differences.append(((row.total_cycles - other.total_cycles) * row.executions,
                                row, other))
    total = sum(difference for difference, _, _ in differences)
    print(f"cycles, ours - PopART, over the ops: {total:+,}")
    differences.sort(key=lambda item: item[0])
    for title, chosen in (("above", differences[::-1][:count]), ("below", differences[:count])):
        print(f"  ops most {title} PopART's (exchange + partials + compute, ours / PopART):")
        for difference, row, other in chosen:
            if (difference > 0) == (title == "above") and difference:
                print(f"    {row.name[:50]:50} {row.type:18} {difference:+9,}  "
                      f"{row.cycles:,} + {row.partials_cycles:,} + {row.compute_cycles:,} / "
                      f"{other.cycles:,} + {other.partials_cycles:,} + "
                      f"{other.compute_cycles:,}")


if __name__ == "__main__":
    main()
