"""What each op is charged: its row of terms, and the bytes its tiles receive added to
the step's per-tile total."""

from __future__ import annotations

import numpy as np

from popart_unwind.cost.placement import Placement
from popart_unwind.cost.report import OpCost
from popart_unwind.cost.terms import OpCharge, measured
from popart_unwind.errors import PlanError
from popart_unwind.ir.op import Op
from popart_unwind.machine.interface import ExchangeNeed
from popart_unwind.ops.layout_rule import OpWork

#: What an op that computes nothing of its own (a call, whose callee's ops are charged) costs.
NO_WORK = OpWork(0, 0)


class Charges:
    """The rows of one walk, in the order the ops ran, and each machine tile's received
    bytes over the step (weighted by how often each op runs)."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self.rows: list[OpCost] = []
        self.received = np.zeros(placement.machine_tiles, np.int64)

    def charge(self, op: Op, need: ExchangeNeed, executions: int, avoidable: int = 0,
               work: OpWork = NO_WORK, link_bytes: int = 0) -> None:
        """Add ``op``'s row: its exchange ``need`` and what else the walk found, read into
        the terms (``cost/terms.py``)."""
        num_tiles = self.placement.num_tiles
        received = np.asarray(need.received_bytes, np.int64).reshape(-1)
        regions = np.asarray(need.regions, np.int64).reshape(-1)
        if received.size != num_tiles or regions.size != num_tiles:
            raise PlanError(f"the layout rule of op {op.debug_name()} reported exchange for "
                            f"{received.size} tiles, the target has {num_tiles}")
        ipu = self.placement.op_ipu(op)
        found = OpCharge(received, regions, avoidable, work, link_bytes)
        self.rows.append(OpCost(op.id, op.name or op.debug_name(), op.type.name, op.graph.id,
                                executions, ipu,
                                **measured(found, self.placement.target)))
        self.received[self.placement.ipu_tiles(ipu)] += received * executions

    def copy_phase_cycles(self) -> int:
        """All of a pipeline cycle's copies at once: the IPU sending most sets the time."""
        sent = [0] * self.placement.num_ipus
        for row in self.rows:
            sent[row.ipu] += row.per_step("ipu_copy_bytes")
        return self.placement.target.ipu_copy_cycles(max(sent, default=0))
