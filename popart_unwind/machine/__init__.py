"""The tile machine the layout rules are written against, and the IPU Model that implements
it: ``interface`` states the questions once, ``ipu_model`` holds the figures, ``tile_target``
answers in per-element tile arrays through the C++ hooks, ``exchange`` counts what tiles
receive."""

from popart_unwind.machine.exchange import read_need
from popart_unwind.machine.interface import (
    ExchangeNeed,
    MatmulCost,
    MatmulPartition,
    MatmulPlan,
    TileMachine,
)
from popart_unwind.machine.ipu_model import DTYPE_SIZES, IpuModel
from popart_unwind.machine.tile_target import TileTarget

__all__ = ["DTYPE_SIZES", "ExchangeNeed", "IpuModel", "MatmulCost", "MatmulPartition",
           "MatmulPlan", "TileMachine", "TileTarget", "read_need"]
