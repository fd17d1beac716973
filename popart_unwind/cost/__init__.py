"""The cost model: what a plan costs on a tile machine, op by op and tile by tile
(exchange, compute, partial sums, copies between IPUs, liveness per tile), and the plan's
score on the planner's own objective. ``evaluate`` walks the IR once and returns a
``CostReport``; ``cost/terms.py`` declares the figures it holds."""

from popart_unwind.cost.layouts import tile_bytes
from popart_unwind.cost.report import CostReport, OpCost
from popart_unwind.cost.walk import computed_layouts, evaluate

__all__ = ["CostReport", "OpCost", "computed_layouts", "evaluate", "tile_bytes"]
