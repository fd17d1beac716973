"""What a plan is worth on the IPU Model, and the plans ours is compared with: the cost
model (``evaluate``), PopART's own layout heuristic (``popart_baseline``) and plain linear
mapping (``linear_plan``). The IPU Model itself lives in ``popart_unwind.machine``; its names
are re-exported here, where users compare plans."""

from popart_unwind.machine import DTYPE_SIZES, IpuModel, MatmulPartition, TileTarget
from popart_unwind.target.cost import CostReport, OpCost, evaluate
from popart_unwind.target.linear_plan import linear_plan
from popart_unwind.target.popart_baseline import BaselineDecision, BaselinePlan, popart_baseline

__all__ = [
    "DTYPE_SIZES",
    "BaselineDecision",
    "BaselinePlan",
    "CostReport",
    "IpuModel",
    "MatmulPartition",
    "OpCost",
    "TileTarget",
    "evaluate",
    "linear_plan",
    "popart_baseline",
]
