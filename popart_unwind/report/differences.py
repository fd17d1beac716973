"""Where our plan differs from PopART's, and what each difference is worth.

The cost model prices ops, not tensors, so a tensor's worth here is read off the ops that
read it: the ops that take the tensor as an input, directly or through views of it (a
reshape, a transpose, a slice), in its own graph. Each is priced twice in our plan
(``swap_walk.py``): as it is, and with only this tensor (and its views) laid out as PopART
lays it out; the worth is the second price minus the first, summed over the readers
(positive: ours saves). So an op reading two tensors laid out otherwise counts for each
only what that tensor's own layout changes, and a tensor whose tiles make no difference to
its readers (a scalar that every tile receives wherever it lies) is worth 0. It is local:
the ops after the readers, whose inputs could move with the readers' results, are not
priced again. Tile memory is exact: the most bytes of the tensor on any one tile under
each plan.

A tensor is *laid out otherwise* when PopART puts some element on another tile and that
changes one of these figures; one whose tiles differ and change none is not counted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from popart_unwind.machine import TileTarget
from popart_unwind.ops import REGISTRY
from popart_unwind.report.session import PlannedOp, PlanRun, TensorKey
from popart_unwind.report.swap_walk import swapped_figures

#: The plan whose layouts ours is compared with.
BASELINE = "popart"


@dataclasses.dataclass(frozen=True)
class TensorWorth:
    """One planned tensor in our plan and in PopART's layout (no ``"popart"`` figures: no
    PopART plan). ``exchange_bytes`` and ``cycles``: the readers' figures in our plan
    (``"ours"``) and in our plan with only this tensor laid out as PopART lays it out
    (``"popart"``); ``tile_bytes``: the most bytes of the tensor on one tile under each."""

    key: TensorKey
    #: whether PopART's plan puts some element on another tile than ours
    on_other_tiles: bool
    #: ops reading the tensor (directly or through views)
    readers: int
    exchange_bytes: dict[str, int]
    cycles: dict[str, int]
    tile_bytes: dict[str, int]

    def saved(self, figure: str) -> int | None:
        """PopART's figure minus ours (positive: ours is lower), or None without PopART."""
        values = getattr(self, figure)
        if BASELINE not in values:
            return None
        return values[BASELINE] - values["ours"]

    @property
    def differs(self) -> bool:
        """Laid out otherwise: on other tiles, and that changes a figure."""
        return self.on_other_tiles and any(
            self.saved(figure) for figure in ("exchange_bytes", "cycles", "tile_bytes"))

    @property
    def gains(self) -> bool:
        """Whether ours is better here: the first figure that differs (exchange, cycles,
        tile memory) is lower in ours."""
        return self._sign() > 0

    def _sign(self) -> int:
        for figure in ("exchange_bytes", "cycles", "tile_bytes"):
            value = self.saved(figure) or 0
            if value:
                return 1 if value > 0 else -1
        return 0


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
    readers = planned_readers(run)
    other = {d.key for d in run.decisions if _differs(run, d.key)}
    priced: dict[TensorKey, dict[tuple[str, int], Any]] = {}
    if other:
        priced = swapped_figures(run.ir, TileTarget(run.model), run.layouts["ours"].held,
                                 run.op_plans.get("ours", {}), run.layouts[BASELINE], other)
    ours_rows = {(row.graph_id, row.op_id): row for row in run.costs["ours"].ops}
    worths: dict[TensorKey, TensorWorth] = {}
    for decision in run.decisions:
        key = decision.key
        ops = readers.get(key, [])
        exchange = {"ours": _sum(ours_rows, ops, "exchange_bytes")}
        cycles = {"ours": _sum(ours_rows, ops, "total_cycles")}
        if BASELINE in plans:
            found = priced.get(key, {})
            exchange[BASELINE] = exchange["ours"] + sum(
                theirs[0] - mine[0] for mine, theirs in found.values())
            cycles[BASELINE] = cycles["ours"] + sum(
                theirs[1] - mine[1] for mine, theirs in found.values())
        element_bytes = run.model.dtype_size(decision.dtype)
        worths[key] = TensorWorth(
            key, key in other, len(ops), exchange, cycles,
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


def ranked_differences(worths: dict[TensorKey, TensorWorth]
                       ) -> tuple[list[TensorWorth], list[TensorWorth]]:
    """The tensors laid out otherwise, as (where ours gains, where ours loses), each the
    largest first: by the size of the exchange difference, then of the cycles, then of
    the tile memory."""
    def rank(worth: TensorWorth) -> tuple[int, int, int, TensorKey]:
        return (-abs(worth.saved("exchange_bytes") or 0), -abs(worth.saved("cycles") or 0),
                -abs(worth.saved("tile_bytes") or 0), worth.key)

    ranked = sorted((w for w in worths.values() if w.differs), key=rank)
    return [w for w in ranked if w.gains], [w for w in ranked if not w.gains]


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
