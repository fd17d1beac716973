"""Where the walk's tensors and ops sit on a machine of several IPUs.

Layouts name tiles within their tensor's IPU; the walk's per-tile arrays (liveness,
residency, what tiles receive) hold every IPU's tiles in turn. ``Placement`` turns the
one into the other.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.cost.layouts import tile_bytes
from popart_unwind.cost.liveness import Key
from popart_unwind.ir.interpreter import key
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops.ipu_copy import constant_reader_ipus, is_ipu_copy, tensor_ipus


class Placement:
    """Each tensor's IPU (each IPU reading it, for a constant) and each op's."""

    def __init__(self, ir: Ir, target: TileMachine) -> None:
        self.target = target
        self.num_tiles = target.num_tiles
        self.num_ipus = target.num_ipus
        self.ipu_of = tensor_ipus(ir) if self.num_ipus > 1 else {}
        self.held_on = constant_reader_ipus(ir) if self.num_ipus > 1 else {}

    @property
    def machine_tiles(self) -> int:
        return self.num_tiles * self.num_ipus

    def ipu_tiles(self, ipu: int) -> slice:
        """The machine's tiles that are ``ipu``'s."""
        return slice(ipu * self.num_tiles, (ipu + 1) * self.num_tiles)

    def placed_bytes(self, tensor_key: Key, tiles: np.ndarray, dtype: str) -> np.ndarray:
        """The bytes per tile of the whole machine of a tensor laid out as ``tiles``."""
        return self.on_machine(tensor_key, tile_bytes(
            tiles, self.target.dtype_size(dtype), self.num_tiles))

    def on_machine(self, tensor_key: Key, bytes_per_tile: np.ndarray) -> np.ndarray:
        """A tensor's bytes per tile of its IPU (of each IPU holding it, for a constant
        read on several) as bytes per tile of the whole machine."""
        if self.num_ipus == 1:
            return bytes_per_tile
        placed = np.zeros(self.machine_tiles, np.int64)
        for ipu in self.held_on.get(tensor_key, (self.ipu_of.get(tensor_key, 0),)):
            placed[self.ipu_tiles(ipu)] = bytes_per_tile
        return placed

    def op_ipu(self, op: Op) -> int:
        """The IPU ``op`` runs on: an IpuCopy on its source's, any op on its results'."""
        if self.num_ipus == 1:
            return 0
        tensor = op.inputs[0] if is_ipu_copy(op) or not op.outputs else op.outputs[0]
        return self.ipu_of.get(key(tensor), 0)
