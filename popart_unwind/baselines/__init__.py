"""The plans ours is compared with: PopART's own layout heuristic (``popart_baseline``)
and plain linear mapping (``linear_plan``)."""

from popart_unwind.baselines.linear_plan import linear_plan
from popart_unwind.baselines.popart_baseline import (
    BaselineDecision,
    BaselinePlan,
    popart_baseline,
)

__all__ = ["BaselineDecision", "BaselinePlan", "linear_plan", "popart_baseline"]
