"""The IPU Model in per-element tile arrays: the target the layout rules and planner call.

``IpuModel`` answers in Poplar's interval format (what plans are written in); planning and
costing compare layouts element by element, so this adapter turns every hook's answer into a
flat array of tile ids and adds the two derived questions the rules ask: where a broadcast
operand goes, and what a matmul's tiles must receive given an operand's actual layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from popart_unwind.errors import TargetError
from popart_unwind.ir.tile_mapping import tile_array, tile_dtype, tiles_from_intervals
from popart_unwind.ops.layout import ExchangeNeed
from popart_unwind.target.hooks import MatmulPartition
from popart_unwind.target.ipu_model import IpuModel

OPERANDS = ("lhs", "rhs", "output")


class TileTarget:
    """An :class:`IpuModel` seen through tile arrays, with PopART's rotating linear mapper.

    The rotation makes linear mappings depend on call order; ``reset()`` restarts it, and
    every walk that maps tensors linearly does so in a deterministic order.
    """

    def __init__(self, model: IpuModel | None = None) -> None:
        self.model = model if model is not None else IpuModel()
        self.num_tiles = self.model.tiles_per_ipu
        self.tile_dtype = tile_dtype(self.num_tiles)
        self._next_start_tile = 0

    def reset(self) -> None:
        self._next_start_tile = 0

    def dtype_size(self, dtype: str) -> int:
        return self.model.dtype_size(dtype)

    def to_tiles(self, mapping: list, num_elements: int, what: str = "tensor") -> np.ndarray:
        return tile_array(mapping, num_elements, self.num_tiles, what)

    # -- hooks as tile arrays ------------------------------------------------------------
    def linear_tiles(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        """A linear mapping starting where the previous one ended (PopART's LinearMapper)."""
        mapping = self.model.linear(tuple(shape), dtype, start_tile=self._next_start_tile)
        used = sum(1 for intervals in mapping if intervals)
        self._next_start_tile = (self._next_start_tile + used) % self.num_tiles
        return self.to_tiles(mapping, prod(shape), "linear mapping")

    def matmul_plan(self, groups: int, rows: int, inner: int, cols: int,
                    dtype: str) -> MatmulPartition:
        return self.model.matmul_plan(groups, rows, inner, cols, dtype)

    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str) -> np.ndarray:
        """Where the matmul plan wants ``operand`` ([G,M,K], [G,K,N] or the output [G,M,N])."""
        hook = {"lhs": self.model.matmul_lhs, "rhs": self.model.matmul_rhs,
                "output": self.model.matmul_output}.get(operand)
        if hook is None:
            raise TargetError(f"matmul operand must be one of {OPERANDS}, got {operand!r}")
        shape = _operand_shape(groups, rows, inner, cols, operand)
        return self.to_tiles(hook(groups, rows, inner, cols, dtype), prod(shape),
                             f"matmul {operand}")

    def matmul_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray) -> ExchangeNeed:
        """What each tile of the matmul plan must receive of ``operand`` laid out as ``tiles``.

        Tile (g, m, k, n) reads LHS block (g, m, k) and RHS block (g, k, n); it receives the
        elements of its block it does not hold, in as many regions as there are maximal
        runs of consecutive elements of that block sharing a source tile, less the runs it
        holds itself (removing a tile's own runs never joins two others: they are not
        contiguous). See docs/ipu-model.md.
        """
        if operand not in ("lhs", "rhs"):
            raise TargetError(f"matmul_readers: operand must be 'lhs' or 'rhs', got {operand!r}")
        plan = self.matmul_plan(groups, rows, inner, cols, dtype)
        shape = _operand_shape(groups, rows, inner, cols, operand)
        axis_parts = ((plan.groups, plan.rows, plan.inner) if operand == "lhs"
                      else (plan.groups, plan.inner, plan.cols))
        blocks, block_sizes = _block_ids(shape, axis_parts)
        tiles = np.asarray(tiles).reshape(-1).astype(np.int64)
        tile_block = _reader_blocks(plan, operand, self.num_tiles)
        held = tile_block[tiles] == blocks
        starts = np.ones(tiles.size, dtype=bool)
        starts[1:] = (blocks[1:] != blocks[:-1]) | (tiles[1:] != tiles[:-1])
        runs_per_block = np.bincount(blocks[starts], minlength=block_sizes.size)
        held_elements = np.bincount(tiles[held], minlength=self.num_tiles)
        held_runs = np.bincount(tiles[held & starts], minlength=self.num_tiles)
        readers = tile_block >= 0
        size = self.dtype_size(dtype)
        received = np.zeros(self.num_tiles, np.int64)
        regions = np.zeros(self.num_tiles, np.int64)
        reader_blocks = tile_block[readers]
        received[readers] = (block_sizes[reader_blocks] - held_elements[readers]) * size
        regions[readers] = runs_per_block[reader_blocks] - held_runs[readers]
        return ExchangeNeed(received, regions)

    def bias_tiles(self, activation_tiles: np.ndarray,
                   activation_shape: Sequence[int]) -> np.ndarray:
        """A bias over the activation's last axis (the C++ bias hook)."""
        return self.broadcast_operand_tiles(activation_tiles, activation_shape,
                                            (activation_shape[-1],) if activation_shape else ())

    def broadcast_operand_tiles(self, full_tiles: np.ndarray, full_shape: Sequence[int],
                                small_shape: Sequence[int]) -> np.ndarray:
        """Each element of a numpy-broadcast operand on the tile holding the most full
        elements that read it (ties: the lowest tile) — Poplibs' createBroadcastOperand
        rule, of which the bias mapping is the one-axis case."""
        full_shape, small_shape = tuple(full_shape), tuple(small_shape)
        small_size = prod(small_shape)
        padded = (1,) * (len(full_shape) - len(small_shape)) + small_shape
        if len(padded) != len(full_shape) or any(
                s not in (1, f) for s, f in zip(padded, full_shape, strict=True)):
            raise TargetError(f"shape {small_shape} does not broadcast to {full_shape}")
        readers = np.broadcast_to(np.arange(small_size).reshape(padded), full_shape).reshape(-1)
        tiles = np.asarray(full_tiles).reshape(-1).astype(np.int64)
        keys, counts = np.unique(readers * self.num_tiles + tiles, return_counts=True)
        element, tile = keys // self.num_tiles, keys % self.num_tiles
        order = np.lexsort((tile, -counts, element))  # by element, most reads, lowest tile
        first = np.ones(order.size, dtype=bool)
        first[1:] = element[order][1:] != element[order][:-1]
        result = np.zeros(small_size, dtype=self.tile_dtype)
        result[element[order][first]] = tile[order][first]
        return result

    def sliceable_tiles(self, num_entries: int, embedding_size: int, dtype: str) -> np.ndarray:
        """An embedding table [entries, size] split along its unsliced axis."""
        arrays = self.model.sliceable_table_arrays(num_entries, embedding_size, dtype)
        owners = np.repeat(np.arange(arrays.num_tiles), np.diff(arrays.tile_starts))
        return tiles_from_intervals(arrays.intervals, owners, num_entries * embedding_size,
                                    self.num_tiles, "sliceable table")

    def elementwise_output(self, input_tiles: Sequence[np.ndarray]) -> int:
        """The input an elementwise result is laid out like: Poplibs' preference order —
        smallest most-loaded tile, then most tiles used, then fewest regions, lowest index."""
        if not input_tiles:
            raise TargetError("elementwise_output needs at least one input")
        best_key, best = None, 0
        for index, tiles in enumerate(input_tiles):
            flat = np.asarray(tiles).reshape(-1)
            counts = np.bincount(flat, minlength=self.num_tiles) if flat.size else np.zeros(1)
            runs = int(np.count_nonzero(np.diff(flat))) + 1 if flat.size else 0
            key = (int(counts.max()), -int(np.count_nonzero(counts)), runs, index)
            if best_key is None or key < best_key:
                best_key, best = key, index
        return best


def _operand_shape(groups: int, rows: int, inner: int, cols: int,
                   operand: str) -> tuple[int, int, int]:
    return {"lhs": (groups, rows, inner), "rhs": (groups, inner, cols),
            "output": (groups, rows, cols)}[operand]


def _block_ids(shape: tuple[int, int, int], parts: tuple[int, int, int]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each element's block (row-major over the parts) and each block's size, for a [A,B,C]
    tensor cut into parts[0] x parts[1] x parts[2] blocks at floor(p * size / parts)."""
    per_axis = []
    sizes = []
    for size, count in zip(shape, parts, strict=True):
        bounds = np.arange(count + 1) * size // count
        per_axis.append(np.searchsorted(bounds, np.arange(size), side="right") - 1)
        sizes.append(np.diff(bounds))
    a, b, c = per_axis
    blocks = ((a[:, None, None] * parts[1] + b[None, :, None]) * parts[2]
              + c[None, None, :]).reshape(-1)
    block_sizes = (sizes[0][:, None, None] * sizes[1][None, :, None]
                   * sizes[2][None, None, :]).reshape(-1)
    return blocks, block_sizes


def _reader_blocks(plan: MatmulPartition, operand: str, num_tiles: int) -> np.ndarray:
    """For each tile, the block of ``operand`` it reads (-1 for tiles the plan leaves idle).

    Tile index ((g * gM + m) * gN + n) * gK + k, as ``MatmulPartition.tile``."""
    used = plan.tiles_used
    tile = np.arange(used)
    k = tile % plan.inner
    n = (tile // plan.inner) % plan.cols
    m = (tile // (plan.inner * plan.cols)) % plan.rows
    g = tile // (plan.inner * plan.cols * plan.rows)
    if operand == "lhs":
        block = (g * plan.rows + m) * plan.inner + k
    else:
        block = (g * plan.inner + k) * plan.cols + n
    result = np.full(num_tiles, -1, dtype=np.int64)
    result[:used] = block
    return result
