"""Where our plan differs from PopART's, and what each difference is worth.

The cost model prices ops, not tensors, so a tensor's worth here is read off the ops that
read it: the ops that take the tensor as an input, directly or through views of it (a
reshape, a transpose, a slice), in its own graph. For each plan, those ops' received bytes
and cycles (input exchange, partial sums and compute, weighted by how often each op runs)
are summed; the worth is PopART's sum minus ours. It is an attribution, not a
counterfactual: an op that reads two tensors laid out otherwise counts in full for each
(``shared`` says how many such ops there are), and an op's figure also moves with its own
matmul plan and with the layouts of the computed tensors it reads. Tile memory is exact:
the most bytes of the tensor on any one tile under each plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from popart_unwind.ops import REGISTRY
from popart_unwind.report.session import PlannedOp, PlanRun, TensorKey

#: The plan whose layouts ours is compared with.
BASELINE = "popart"


@dataclasses.dataclass(frozen=True)
class TensorWorth:
    """One planned tensor under ours and PopART's plan (``None`` figures: no PopART plan)."""

    key: TensorKey
    #: whether PopART's plan puts some element on another tile than ours
    differs: bool
    #: ops reading the tensor (directly or through views)
    readers: int
    #: of those, ops that also read another tensor laid out otherwise
    shared: int
    #: plan -> bytes the readers receive, cycles they take, and the most bytes of the
    #: tensor on one tile
    exchange_bytes: dict[str, int]
    cycles: dict[str, int]
    tile_bytes: dict[str, int]

    def saved(self, figure: str) -> int | None:
        """PopART's figure minus ours (positive: ours is lower), or None without PopART."""
        values = getattr(self, figure)
        if BASELINE not in values:
            return None
        return values[BASELINE] - values["ours"]


def planned_readers(run: PlanRun) -> dict[TensorKey, list[tuple[str, int]]]:
    """Planned tensor -> (graph id, op id) of each op reading it, directly or through a
    chain of views (outputs of ops whose rule says they alias their inputs); the views
    themselves are not readers (they move and compute nothing)."""
    readers: dict[TensorKey, list[tuple[str, int]]] = {}
    planned = {decision.key for decision in run.decisions}
    for graph in run.ir.graphs:
        roots: dict[str, tuple[TensorKey, ...]] = {}
        for tensor in graph.producerless_tensors():
            if (graph.id, tensor.id) in planned:
                roots[tensor.id] = ((graph.id, tensor.id),)
        for op in graph.schedule():
            read = sorted({root for tensor in op.inputs for root in roots.get(tensor.id, ())})
            rule = REGISTRY.layout_rule(op)
            if not rule.aliases_outputs(op):
                for root in read:
                    readers.setdefault(root, []).append((graph.id, op.id))
            elif read:
                inputs = op.input_map()
                viewed = tuple(sorted({root for index in rule.viewed_inputs(op)
                                       if index in inputs
                                       for root in roots.get(inputs[index].id, ())}))
                for tensor in op.outputs:
                    if viewed:
                        roots[tensor.id] = viewed
    return readers


def tensor_worths(run: PlanRun) -> dict[TensorKey, TensorWorth]:
    """Every planned tensor's worth (module docstring), in the plan's order."""
    plans = [name for name in ("ours", BASELINE) if name in run.layouts]
    rows = {name: {(row.graph_id, row.op_id): row for row in run.costs[name].ops}
            for name in plans}
    readers = planned_readers(run)
    differs = {d.key: _differs(run, d.key) for d in run.decisions}
    differing_read: dict[tuple[str, int], int] = {}  # op -> tensors it reads that differ
    for key, ops in readers.items():
        if differs.get(key):
            for op in ops:
                differing_read[op] = differing_read.get(op, 0) + 1
    worths: dict[TensorKey, TensorWorth] = {}
    for decision in run.decisions:
        key = decision.key
        ops = readers.get(key, [])
        others = [differing_read.get(op, 0) - differs[key] for op in ops]
        element_bytes = run.model.dtype_size(decision.dtype)
        worths[key] = TensorWorth(
            key, differs[key], len(ops), sum(1 for count in others if count),
            {name: _sum(rows[name], ops, "exchange_bytes") for name in plans},
            {name: _sum(rows[name], ops, "total_cycles") for name in plans},
            {name: _most_on_a_tile(run.layouts[name].get(key), element_bytes)
             for name in plans if key in run.layouts[name]})
    return worths


def _differs(run: PlanRun, key: TensorKey) -> bool:
    ours, theirs = run.layouts["ours"].get(key), run.layouts.get(BASELINE, {}).get(key)
    if ours is None or theirs is None:
        return False
    return not np.array_equal(np.asarray(ours).reshape(-1), np.asarray(theirs).reshape(-1))


def _sum(rows: dict[tuple[str, int], Any], ops: list[tuple[str, int]], figure: str) -> int:
    return int(sum(rows[op].per_step(figure) for op in ops if op in rows))


def _most_on_a_tile(tiles: np.ndarray | None, element_bytes: int) -> int:
    if tiles is None or np.size(tiles) == 0:
        return 0
    return int(np.bincount(np.asarray(tiles).reshape(-1)).max()) * element_bytes


def ranked_differences(worths: dict[TensorKey, TensorWorth]) -> list[TensorWorth]:
    """The tensors laid out otherwise, the largest worth first: by the size of the
    exchange difference, then of the cycles, then of the tile memory (either sign: a
    difference that costs ours more ranks as high as one that saves as much)."""
    def rank(worth: TensorWorth) -> tuple[int, int, int, TensorKey]:
        return (-abs(worth.saved("exchange_bytes") or 0), -abs(worth.saved("cycles") or 0),
                -abs(worth.saved("tile_bytes") or 0), worth.key)

    return sorted((w for w in worths.values() if w.differs), key=rank)


def differing_ops(run: PlanRun) -> list[PlannedOp]:
    """The matmuls and convolutions PopART plans otherwise (partition, or whether a fully
    connected layer's passes share it), the most cycles saved first, then the most bytes
    received saved."""
    if BASELINE not in run.costs:
        return []
    received = {plan: {(row.graph_id, row.op_id): row.per_step("exchange_bytes")
                       for row in run.costs[plan].ops} for plan in ("ours", BASELINE)}

    def rank(op: PlannedOp) -> tuple[int, int, str, str, int]:
        key = (op.graph_id, op.op_id)
        return (op.cycles.get("ours", 0) - op.cycles.get(BASELINE, 0),
                received["ours"].get(key, 0) - received[BASELINE].get(key, 0),
                op.graph_id, op.name, op.op_id)

    found = [op for op in run.planned_ops if op.plans.get("ours") != op.plans.get(BASELINE)]
    return sorted(found, key=rank)
