"""The IPU Model target: layout hooks, cost model and the PopART baseline planner."""

from popart_unwind.target.hooks import linear_tile_mapping

__all__ = ["linear_tile_mapping"]
