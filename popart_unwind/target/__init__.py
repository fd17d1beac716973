"""The public face of the machine a plan is made for: the IPU Model (``IpuModel``, its
figures) and the tile machine built on it (``TileTarget``). They live in
``popart_unwind.machine``; plans are costed by ``popart_unwind.cost`` and compared with
``popart_unwind.baselines``."""

from popart_unwind.machine import DTYPE_SIZES, IpuModel, MatmulPartition, TileTarget

__all__ = ["DTYPE_SIZES", "IpuModel", "MatmulPartition", "TileTarget"]
