"""The cost model's figures, declared once each, in the order a plan's summary gives them.

A *term* is a figure measured per op: each op's row (``OpCost``) holds its value, and the
report (``CostReport``) holds its total over the ops, counted once per run of the op or
once per op. A plain *figure* is one the report finds as a whole (the objective, liveness).
Everything that names a figure reads it from ``FIGURES``: the fields of ``OpCost`` and
``CostReport``, the totals, the step's cycles, ``summary()`` and ``per_ipu()``, the plan
file's keys and the summary table's labels. A new term is one ``Term`` below, placed where
the summary should show it, with the measure that reads it off what the walk found at the
op (``OpCharge``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter, methodcaller
from typing import Any

import numpy as np

from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops.layout_rule import OpWork

#: When a plan's summary holds a figure: always, on a machine of several IPUs, or when
#: those IPUs run as a pipeline. ``NOT_SHOWN``: the figure is the report's only.
ALWAYS = "always"
SEVERAL_IPUS = "several IPUs"
PIPELINED = "pipelined"
NOT_SHOWN = "not shown"

#: Which part of a step's cycles a term is: spent on the op's IPU, spent on the
#: IPU-Links (copies between IPUs, which a pipeline runs in a phase of their own), or none.
ON_IPU = "on the IPU"
OVER_LINKS = "over the IPU-Links"
NOT_CYCLES = ""


@dataclasses.dataclass(frozen=True)
class OpCharge:
    """What the walk found an op costs, before it is read into terms: the bytes each tile
    receives and the regions they come in, the bytes a better plan could save, the
    rule's compute, and the bytes it sends to another IPU."""

    received: np.ndarray
    regions: np.ndarray
    avoidable_bytes: int
    work: OpWork
    link_bytes: int


@dataclasses.dataclass(frozen=True)
class Figure:
    """A figure of the report: its key (the summary's, and the report's attribute unless
    ``read`` says otherwise), a short name, the summary table's label (the name unless
    given) and when the summary shows it."""

    key: str | None
    name: str = ""
    label: str = ""
    shown: str = ALWAYS
    read: Callable[[Any], Any] | None = None

    def value(self, report: Any) -> Any:
        return self.read(report) if self.read is not None else getattr(report, self.key)

    @property
    def table_label(self) -> str:
        return self.label or self.name


@dataclasses.dataclass(frozen=True, kw_only=True)
class Term(Figure):
    """A figure measured per op. ``row`` names the op row's field (the key unless given;
    no key: the term is the row's only, not totalled); ``measure`` reads the op's value;
    ``per_execution`` says whether the total counts it once per run of the op (bytes and
    cycles) or once (regions: code, written once however often it runs); ``time`` which
    part of the step's cycles it is; ``per_ipu`` whether each IPU's summary totals it."""

    row: str = ""
    measure: Callable[[OpCharge, TileMachine], int]
    per_execution: bool = True
    time: str = NOT_CYCLES
    per_ipu: bool = False

    @property
    def field(self) -> str:
        return self.row or str(self.key)

    @property
    def totalled(self) -> bool:
        return self.key is not None


def _most(per_tile: np.ndarray) -> int:
    return int(per_tile.max()) if per_tile.size else 0


FIGURES: tuple[Figure, ...] = (
    Figure("objective", "objective"),
    Figure("upper_bound", "upper bound"),
    Term("exchange_bytes", "exchange bytes", per_ipu=True,
         measure=lambda op, target: int(op.received.sum())),
    Term("exchange_cycles", "exchange cycles", row="cycles", time=ON_IPU,
         measure=lambda op, target: target.exchange_cycles(_most(op.received))),
    Figure("cycles", "cycles", "cycles (exchange, partial sums, compute)"),
    Term("compute_cycles", "compute cycles", time=ON_IPU,
         measure=lambda op, target: op.work.compute_cycles),
    Figure("max_tile_bytes", "max tile memory"),
    Term("regions", "regions", per_execution=False,
         measure=lambda op, target: int(op.regions.sum())),
    Term("avoidable_exchange_bytes", "exchange left to save", row="avoidable_bytes",
         measure=lambda op, target: op.avoidable_bytes),
    Figure("peak_tile_bytes", "peak tile memory"),
    Figure("always_live_max_tile_bytes", "always-live tile memory"),
    Figure("peak_tile_bytes_floor", "peak floor (live bytes spread evenly)"),
    Figure("fits", "fits"),
    Figure("ipus", shown=SEVERAL_IPUS, read=attrgetter("num_ipus")),
    Term("ipu_copy_bytes", "IPU-copy bytes", shown=SEVERAL_IPUS, per_ipu=True,
         measure=lambda op, target: op.link_bytes),
    Term("ipu_copy_cycles", shown=SEVERAL_IPUS, time=OVER_LINKS,
         measure=lambda op, target: target.ipu_copy_cycles(op.link_bytes)),
    Figure("pipeline_cycles", "pipeline cycles per micro-batch", shown=PIPELINED),
    Figure("per_ipu", shown=SEVERAL_IPUS, read=methodcaller("per_ipu")),
    # The exchange inside the op that no layout decides (a matmul's partial sums).
    Term("partials_cycles", shown=NOT_SHOWN, time=ON_IPU,
         measure=lambda op, target: op.work.partials_cycles),
    # The busiest tile's share of the op's exchange, and of its regions.
    Term(None, row="busiest_tile_bytes", shown=NOT_SHOWN,
         measure=lambda op, target: _most(op.received)),
    Term(None, row="max_tile_regions", shown=NOT_SHOWN,
         measure=lambda op, target: _most(op.regions)),
)

TERMS: tuple[Term, ...] = tuple(f for f in FIGURES if isinstance(f, Term))
#: The terms the report totals (those with a key).
TOTALLED: tuple[Term, ...] = tuple(t for t in TERMS if t.totalled)
_BY_FIELD = {term.field: term for term in TERMS}
_BY_KEY = {figure.key: figure for figure in FIGURES if figure.key is not None}


def figure(key: str) -> Figure:
    """The figure the summary holds under ``key``."""
    return _BY_KEY[key]


def summary_keys(shown: str) -> tuple[str, ...]:
    """The summary's keys shown ``shown`` (``ALWAYS``, ``SEVERAL_IPUS``, ``PIPELINED``),
    in the summary's order."""
    return tuple(str(f.key) for f in FIGURES if f.shown == shown and f.key is not None)


def measured(charge: OpCharge, target: TileMachine) -> dict[str, int]:
    """Every term's value for one op, by its row field."""
    return {term.field: term.measure(charge, target) for term in TERMS}


def weight(field: str, executions: int) -> int:
    """How many times an op's row value ``field`` counts per step: once per run of the
    op, except for terms counted once (``per_execution`` false)."""
    term = _BY_FIELD.get(field)
    return executions if term is None or term.per_execution else 1


def totals(rows: list[Any]) -> dict[str, int]:
    """Each totalled term summed over the rows, by its key."""
    return {str(term.key): int(sum(getattr(row, term.field) * weight(term.field,
                                                                      row.executions)
                                   for row in rows))
            for term in TOTALLED}
