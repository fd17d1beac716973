"""The IPU Model target: layout hooks, cost model and the PopART baseline planner."""

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

__all__ = [
    "DTYPE_SIZES",
    "IpuModel",
    "MatmulCosts",
    "MatmulPartition",
    "RotatingLinearMapper",
    "TileIntervalArrays",
    "TileMapping",
    "bias_tile_mapping",
    "choose_elementwise_output",
    "linear_tile_mapping",
    "matmul_lhs_mapping",
    "matmul_output_mapping",
    "matmul_partition_cycles",
    "matmul_rhs_mapping",
    "plan_matmul",
    "sliceable_table_arrays",
    "sliceable_table_mapping",
]
