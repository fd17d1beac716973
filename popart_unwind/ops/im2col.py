"""A convolution's data input seen through its im2col matmul (``ops/conv.py``): the layout
poplin's createInput gives it, and what each tile of the matmul's partition reads of it.
Both depend on the geometry and the plan alone, so the rules compute them once per pair.
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

import numpy as np

from popart_unwind.machine.exchange import axis_parts, block_need, matmul_reader_blocks
from popart_unwind.machine.interface import (
    ExchangeNeed,
    MatmulPlan,
    TileMachine,
    plan_operand_tiles,
    rotated_per_tile,
)
from popart_unwind.ops.windows import ConvGeometry, first_reads, nearest_read, window_reads

#: im2col positions enumerated at once when deriving what each tile reads.
CHUNK_POSITIONS = 1 << 22


# -- the data input's created layout --------------------------------------------------------
def created_data_tiles(geometry: ConvGeometry, target: TileMachine,
                       plan: MatmulPlan) -> np.ndarray:
    """poplin's createInput, approximated: each data element on the LHS tile of the first
    im2col position reading it, unread ones on their preceding neighbour's."""
    groups, rows, inner, _ = geometry.dims
    lhs = plan_operand_tiles(target, plan, "lhs", geometry.dtype)
    n = len(geometry.field)
    # The lowest flat LHS index reading an element has the lowest output position m: the
    # first window reading it.
    m_part, k_part, read = first_reads(geometry)
    per_group = geometry.in_channels // groups
    channel = np.arange(geometry.in_channels).reshape((1, -1) + (1,) * n)
    batch = np.arange(geometry.batch).reshape((-1, 1) + (1,) * n)
    flat = (((channel // per_group) * rows + batch * prod(geometry.out_field)
             + m_part[None, None]) * inner
            + (channel % per_group) * prod(geometry.kernel) + k_part[None, None])
    shape = geometry.input_shape
    flat = np.broadcast_to(flat, shape).reshape(-1)
    read = np.broadcast_to(read[None, None], shape).reshape(-1)
    if not read.any():  # no position reads anything: all padding; on the plan's first tile
        return np.full(flat.size, plan.start_tile % target.num_tiles, dtype=lhs.dtype)
    # Unread elements take the tile of the read element before them.
    return np.ascontiguousarray(lhs[flat[nearest_read(read)]])



# -- what each tile reads of the data input -------------------------------------------------
class Im2colReads(NamedTuple):
    """The distinct (LHS block, data element) pairs of the im2col, sorted by block then
    element, and which block each tile reads; layout independent, so computed once."""

    block: np.ndarray  # per pair (int32)
    element: np.ndarray  # per pair
    starts: np.ndarray  # per pair: a new block or a gap in the elements begins here
    block_sizes: np.ndarray  # distinct elements per block
    tile_block: np.ndarray  # per tile: the block it reads, -1 when idle

    def need(self, tiles: np.ndarray, element_bytes: int, num_tiles: int) -> ExchangeNeed:
        """What the tiles receive of the data laid out as ``tiles``: each its block's
        distinct elements less those it holds, by runs, as a matmul operand's readers."""
        held = np.asarray(tiles).reshape(-1)[self.element]
        return block_need(held, self.block, self.starts, self.block_sizes, self.tile_block,
                          element_bytes, num_tiles)


def im2col_reads(geometry: ConvGeometry, target: TileMachine,
                 chosen: MatmulPlan) -> Im2colReads:
    """The (LHS block, data element) pairs the im2col reads under the plan ``chosen``, and
    the block each tile reads."""
    groups, rows, inner, _ = geometry.dims
    plan = chosen.own_partition
    per_group = geometry.in_channels // groups
    positions, kernel_size = prod(geometry.out_field), prod(geometry.kernel)
    spatial = prod(geometry.field)
    numel = prod(geometry.input_shape)
    out_index, kernel_index, offset = window_reads(geometry)
    row_block, inner_block = axis_parts(rows, plan.rows), axis_parts(inner, plan.inner)
    group_block = axis_parts(groups, plan.groups)
    # Blocks are numbered as the cube tensor the LHS is: (g, row, inner) blocks, or
    # (g, inner, row) ones where the pass holds that tensor transposed.
    name, transposed = chosen.cube_tensor("lhs")
    group_weight = plan.rows * plan.inner
    row_weight, inner_weight = (1, plan.rows) if transposed else (plan.inner, 1)
    # k = (ci, kk): the inner block of each (input channel, readable window pair)
    inner_part = inner_block.reshape(per_group, kernel_size)[:, kernel_index] \
        * inner_weight  # [Cg, V]
    # Enumerate im2col rows (b, g), and their input channels, in chunks of at most
    # CHUNK_POSITIONS pairs: element ids of different rows or channels never meet.
    pairs = max(out_index.size, 1)
    channel_step = max(1, min(per_group, CHUNK_POSITIONS // pairs))
    step = max(1, CHUNK_POSITIONS // (per_group * pairs))
    chunks = []
    for first in range(0, geometry.batch * groups, step):
        row = np.arange(first, min(first + step, geometry.batch * groups))
        b, g = row // groups, row % groups
        m = (b * positions)[:, None] + out_index[None, :]  # [R, V]
        row_part = group_block[g][:, None] * group_weight + row_block[m] * row_weight
        for low in range(0, per_group, channel_step):
            channels = np.arange(low, min(low + channel_step, per_group))
            base = ((b * geometry.in_channels + g * per_group)[:, None]
                    + channels[None, :]) * spatial  # [R, C]
            block = row_part[:, None, :] + inner_part[None, channels, :]  # [R, C, V]
            element = base[:, :, None] + offset[None, None, :]
            chunks.append(_distinct(block.reshape(-1) * numel + element.reshape(-1)))
    # one array of keys sorted in place, and block and element written straight into
    # narrow arrays: the pairs of a 224 x 224 layer run to tens of millions
    keys = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    del chunks
    keys.sort()
    num_blocks = plan.groups * plan.rows * plan.inner
    block = np.empty(keys.size, np.int32)  # at most one block per tile
    np.floor_divide(keys, numel, out=block, casting="unsafe")
    element = np.empty(keys.size, np.int32 if numel < 2**31 else np.int64)
    np.remainder(keys, numel, out=element, casting="unsafe")
    del keys
    starts = np.ones(block.size, dtype=bool)
    np.not_equal(block[1:], block[:-1], out=starts[1:])
    starts[1:] |= np.diff(element) != 1
    return Im2colReads(block, element, starts,
                       np.bincount(block, minlength=num_blocks).astype(np.int64),
                       rotated_per_tile(matmul_reader_blocks(chosen.partition, name,
                                                             target.num_tiles),
                                        chosen.start_tile))


def _distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (numpy's sort is far faster than np.unique's hash)."""
    keys = np.sort(keys)
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys
