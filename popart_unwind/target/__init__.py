"""The IPU Model target: layout hooks, cost model and the PopART baseline planner."""

from popart_unwind.target.cost import CostReport, OpCost, evaluate
from popart_unwind.target.hooks import (
    MatmulCosts,
    MatmulPartition,
    TileIntervalArrays,
    TileMapping,
    bias_tile_mapping,
    choose_elementwise_output,
    linear_tile_mapping,
    matmul_lhs_mapping,
    matmul_output_mapping,
    matmul_partition_cycles,
    matmul_rhs_mapping,
    plan_matmul,
    sliceable_table_arrays,
    sliceable_table_mapping,
)
from popart_unwind.target.ipu_model import DTYPE_SIZES, IpuModel, RotatingLinearMapper
from popart_unwind.target.linear_plan import linear_plan
from popart_unwind.target.popart_baseline import BaselineDecision, BaselinePlan, popart_baseline
from popart_unwind.target.tile_target import TileTarget

__all__ = [
    "DTYPE_SIZES",
    "BaselineDecision",
    "BaselinePlan",
    "CostReport",
    "IpuModel",
    "MatmulCosts",
    "MatmulPartition",
    "OpCost",
    "RotatingLinearMapper",
    "TileIntervalArrays",
    "TileMapping",
    "TileTarget",
    "bias_tile_mapping",
    "choose_elementwise_output",
    "evaluate",
    "linear_plan",
    "linear_tile_mapping",
    "matmul_lhs_mapping",
    "matmul_output_mapping",
    "matmul_partition_cycles",
    "matmul_rhs_mapping",
    "plan_matmul",
    "popart_baseline",
    "sliceable_table_arrays",
    "sliceable_table_mapping",
]
