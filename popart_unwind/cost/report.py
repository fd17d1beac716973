"""What the cost walk returns: a row per op (``OpCost``) and the plan's report
(``CostReport``). Their term fields and totals are made from the term table
(``cost/terms.py``), so a term declared there is a field of both without more code."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from popart_unwind.cost.liveness import FullestTile
from popart_unwind.cost.terms import (
    ALWAYS,
    FIGURES,
    NOT_CYCLES,
    ON_IPU,
    PIPELINED,
    SEVERAL_IPUS,
    TERMS,
    TOTALLED,
    weight,
)
from popart_unwind.errors import PlanError


@dataclasses.dataclass(frozen=True)
class _OpRow:
    """Which op a row prices. ``executions`` is how often the op runs per step (ops of a
    subgraph run once per static call site); ``ipu`` the IPU it runs on."""

    op_id: int
    name: str
    type: str
    graph_id: str
    executions: int = 1
    ipu: int = 0

    @property
    def total_cycles(self) -> int:
        """Every term that takes time: exchange of the inputs and of partial sums,
        compute, and copies to another IPU."""
        return sum(getattr(self, term.field) for term in TERMS if term.time != NOT_CYCLES)

    @property
    def ipu_cycles(self) -> int:
        """The cycles the op spends on its IPU (copies to other IPUs not included)."""
        return sum(getattr(self, term.field) for term in TERMS if term.time == ON_IPU)

    def per_step(self, field: str) -> int:
        """A term's value (or ``total_cycles``) as often as it counts in a step."""
        return getattr(self, field) * weight(field, self.executions)


#: One op's row: which op it is, and one field per term of ``cost/terms.py``.
OpCost = dataclasses.make_dataclass(
    "OpCost", [(term.field, int, dataclasses.field(default=0)) for term in TERMS],
    bases=(_OpRow,), frozen=True, namespace={"__module__": __name__})


@dataclasses.dataclass
class _ReportBody:
    """Totals, per-op rows and per-tile arrays of one plan on one target (the terms'
    totals are the fields ``CostReport`` adds)."""

    ops: list[Any]
    max_tile_bytes: int
    tiles_over_budget: int
    bytes_per_tile: int
    received_bytes_per_tile: np.ndarray
    resident_bytes_per_tile: np.ndarray
    objective: float
    upper_bound: float
    #: Liveness over the schedule (``cost/liveness.py``), per tile: the most bytes live
    #: at once, and the bytes live throughout (producer-less tensors).
    peak_bytes_per_tile: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, np.int64))
    always_live_bytes_per_tile: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, np.int64))
    #: The tile with the highest liveness peak: when it is reached and what fills it.
    fullest_tile: FullestTile | None = None
    #: No placement of the same buffers could peak below this on its busiest tile: the
    #: most bytes live at once on all tiles together, spread evenly (``TileLiveness``).
    peak_tile_bytes_floor: int = 0
    #: IPUs of the machine (the per-tile arrays hold each IPU's tiles in turn).
    num_ipus: int = 1
    #: Whether the step is pipelined (the IPUs run their stages at once, each on another
    #: micro-batch), and each IPU's stash buffers in bytes (all its tiles together).
    pipelined: bool = False
    stash_bytes_per_ipu: tuple[int, ...] = ()
    #: In a pipelined training step, each IPU's gradient accumulators in bytes.
    accumulator_bytes_per_ipu: tuple[int, ...] = ()
    #: A pipeline cycle's copies between IPUs, all at once: the bytes of the IPU sending
    #: most, over its links, and one synchronisation (``TileMachine.ipu_copy_cycles``).
    copy_phase_cycles: int = 0

    @property
    def cycles(self) -> int:
        """The step's estimated cycles: every term that takes time, op after op (no
        overlap: BSP steps do not overlap, and the IPUs of a model split without
        pipelining run one after another)."""
        return sum(getattr(self, str(term.key)) for term in TOTALLED
                   if term.time != NOT_CYCLES)

    def ipu_cycles(self, ipu: int) -> int:
        """Cycles of the ops on ``ipu``, copies to other IPUs not included."""
        return sum(row.ipu_cycles * row.executions for row in self.ops if row.ipu == ipu)

    @property
    def pipeline_cycles(self) -> int:
        """Cycles per micro-batch of a running pipeline: each pipeline cycle every IPU runs
        its stages (one forward, one backward) on different micro-batches at once, then
        all copies between IPUs run together (``copy_phase_cycles``). So the slowest IPU's
        cycles plus the copy phase. An approximation: it ignores the pipeline's ramp up
        and down (``2N - 2`` of the ``M + 2N - 2`` pipeline cycles of ``M`` micro-batches
        on ``N`` IPUs)."""
        slowest = max((self.ipu_cycles(ipu) for ipu in range(self.num_ipus)), default=0)
        return slowest + self.copy_phase_cycles

    @property
    def peak_tile_bytes(self) -> int:
        """The liveness peak of the busiest tile."""
        return int(self.peak_bytes_per_tile.max()) if self.peak_bytes_per_tile.size else 0

    @property
    def always_live_max_tile_bytes(self) -> int:
        """The always-live bytes of the tile holding most of them."""
        live = self.always_live_bytes_per_tile
        return int(live.max()) if live.size else 0

    @property
    def fits(self) -> bool:
        """Whether the liveness peak of every tile is within a tile's memory."""
        return self.peak_tile_bytes <= self.bytes_per_tile

    def summary(self) -> dict[str, Any]:
        """The figures the command line and plan files compare plans by, in the order of
        the figure table (those of several IPUs only on several IPUs, so one IPU's summary
        stays as it always was)."""
        shown = {ALWAYS} | ({SEVERAL_IPUS} if self.num_ipus != 1 else set()) \
            | ({PIPELINED} if self.num_ipus != 1 and self.pipelined else set())
        return {figure.key: figure.value(self) for figure in FIGURES
                if figure.shown in shown and figure.key is not None}

    def per_ipu(self) -> list[dict[str, int | bool]]:
        """Each IPU's peak tile bytes, its terms totalled per IPU (exchange within it,
        bytes it copies to others), and whether it fits; in a pipeline also its stash and
        accumulator bytes and its cycles."""
        tiles = self.peak_bytes_per_tile.size // max(self.num_ipus, 1)
        found = []
        for ipu in range(self.num_ipus):
            peak = self.peak_bytes_per_tile[ipu * tiles:(ipu + 1) * tiles]
            rows = [row for row in self.ops if row.ipu == ipu]
            most = int(peak.max()) if peak.size else 0
            found.append({
                "peak_tile_bytes": most,
                **{str(term.key): sum(row.per_step(term.field) for row in rows)
                   for term in TOTALLED if term.per_ipu},
                "fits": most <= self.bytes_per_tile,
                **({"stash_bytes": self.stash_bytes_per_ipu[ipu],
                    "accumulator_bytes": self.accumulator_bytes_per_ipu[ipu],
                    "cycles": self.ipu_cycles(ipu)} if self.pipelined else {})})
        return found

    def op(self, op_id: int) -> Any:
        for row in self.ops:
            if row.op_id == op_id:
                return row
        raise PlanError(f"the cost report has no row for op {op_id}")


#: The plan's report: the body above and one total per totalled term of
#: ``cost/terms.py`` (``exchange_bytes``, ``exchange_cycles``, ``regions``, ...).
CostReport = dataclasses.make_dataclass(
    "CostReport", [(str(term.key), int, dataclasses.field(default=0)) for term in TOTALLED],
    bases=(_ReportBody,), namespace={"__module__": __name__})
