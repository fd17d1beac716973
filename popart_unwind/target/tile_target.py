"""The IPU Model in per-element tile arrays: the target the layout rules and planner call.

``IpuModel`` answers in Poplar's interval format (what plans are written in); planning and
costing compare layouts element by element, so this adapter turns every hook's answer into a
flat array of tile ids and adds the two derived questions the rules ask: where a broadcast
operand goes, and what a matmul's tiles must receive given an operand's actual layout.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from math import prod

import numpy as np

from popart_unwind.errors import TargetError
from popart_unwind.ir.tile_mapping import tile_array, tile_dtype
from popart_unwind.ops.layout import (
    DENSE_PAIRS_MAX,
    ExchangeNeed,
    axis_parts,
    matmul_reader_blocks,
    read_need,
)
from popart_unwind.target.hooks import (
    MatmulPartition,
    TileMapping,
    block_reader_counts,
    poplar_mapping,
    tile_counts,
)
from popart_unwind.target.ipu_model import IpuModel

OPERANDS = ("lhs", "rhs", "output")
#: A remembered hook answer: one array, or several computed together.
Answer = np.ndarray | tuple[np.ndarray, ...]
#: Bytes of hook answers (matmul operand and table layouts) a target keeps, least recently
#: used dropped first: room for every distinct matmul of BERT-base or GPT-2 training and
#: their embedding tables.
ANSWER_BYTES_KEPT = 256 * 2**20
#: Poplibs' convolution copies an operand into the plan's own layout before broadcasting it
#: when more tiles than this read each of its elements (``inViewMaxBroadcastDests`` and
#: ``weightViewMaxBroadcastDests`` in lib/poplin/Convolution.cpp).
REARRANGE_ABOVE_DESTINATIONS = 7


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
        self._answers: OrderedDict[tuple, Answer] = OrderedDict()  # least recent first
        self._answer_bytes = 0

    def reset(self) -> None:
        self._next_start_tile = 0

    def dtype_size(self, dtype: str) -> int:
        return self.model.dtype_size(dtype)

    def to_tiles(self, mapping: list, num_elements: int, what: str = "tensor") -> np.ndarray:
        return tile_array(mapping, num_elements, self.num_tiles, what)

    def to_mapping(self, tiles: np.ndarray) -> TileMapping:
        """Poplar's format of a tile array (built in C++: real tables have millions of runs)."""
        return poplar_mapping(tiles, self.num_tiles)

    def remembered(self, key: tuple, compute: Callable[[], Answer]) -> Answer:
        """An answer derived from the target alone (an array or a tuple of arrays), computed
        once per key: every layer of a model asks the same matmul, table and convolution
        questions, in the planner, the baseline and the cost model alike. Answers are
        read-only, so no caller can change what the next one gets."""
        found = self._answers.get(key)
        if found is not None:
            self._answers.move_to_end(key)
            return found
        found = compute()
        for array in _arrays(found):
            array.flags.writeable = False
        self._answers[key] = found
        self._answer_bytes += _nbytes(found)
        while self._answer_bytes > ANSWER_BYTES_KEPT and len(self._answers) > 1:
            self._answer_bytes -= _nbytes(self._answers.popitem(last=False)[1])
        return found

    # -- hooks as tile arrays ------------------------------------------------------------
    def linear_tiles(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        """A linear mapping starting where the previous one ended (PopART's LinearMapper)."""
        tiles, used = self.model.linear_tiles(tuple(shape), dtype, self._next_start_tile)
        self._next_start_tile = (self._next_start_tile + used) % self.num_tiles
        return tiles

    def matmul_plan(self, groups: int, rows: int, inner: int, cols: int,
                    dtype: str) -> MatmulPartition:
        return self.model.matmul_plan(groups, rows, inner, cols, dtype)

    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str) -> np.ndarray:
        """Where the matmul plan wants ``operand`` ([G,M,K], [G,K,N] or the output [G,M,N])."""
        if operand not in OPERANDS:
            raise TargetError(f"matmul operand must be one of {OPERANDS}, got {operand!r}")
        return self.remembered(
            ("matmul", groups, rows, inner, cols, dtype, operand),
            lambda: self.model.matmul_tiles(groups, rows, inner, cols, dtype, operand))

    def matmul_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray) -> ExchangeNeed:
        """What each tile must receive before the matmul computes, ``operand`` laid out as
        ``tiles`` (in grouped [G,M,K] / [G,K,N] order).

        Tile (g, m, k, n) reads LHS block (g, m, k) and RHS block (g, k, n). An operand
        broadcast to more than ``REARRANGE_ABOVE_DESTINATIONS`` tiles is first copied into
        the plan's own layout (Poplibs' pre-convolution rearrangement), so it costs that
        copy — the elements not already where the plan wants them — plus the broadcast from
        the plan's layout; any other operand is broadcast from where it lies. See
        docs/ipu-model.md.
        """
        if operand not in ("lhs", "rhs"):
            raise TargetError(f"matmul_readers: operand must be 'lhs' or 'rhs', got {operand!r}")
        dims = (groups, rows, inner, cols, dtype, operand)
        if broadcast_destinations(self.matmul_plan(*dims[:5]), operand) \
                <= REARRANGE_ABOVE_DESTINATIONS:
            return self._block_readers(*dims, tiles)
        wanted = self.matmul_tiles(*dims)
        copy = read_need(wanted, None, tiles, self.dtype_size(dtype), self.num_tiles)
        received, regions = self.remembered(
            ("broadcast", *dims),
            lambda: self._block_readers(*dims, wanted).arrays())
        return copy + ExchangeNeed(received, regions)

    def _block_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray) -> ExchangeNeed:
        """Each reading tile receives the elements of its block it does not hold, in as
        many regions as there are maximal runs of consecutive elements of that block
        sharing a source tile, less the runs it holds itself (removing a tile's own runs
        never joins two others: they are not contiguous)."""
        blocks, block_starts, block_sizes, tile_block = self.remembered(
            ("readers", groups, rows, inner, cols, dtype, operand),
            lambda: self._reader_layout(groups, rows, inner, cols, dtype, operand))
        runs_per_block, held_elements, held_runs = block_reader_counts(
            tiles, blocks, block_starts, tile_block, block_sizes.size)
        readers = tile_block >= 0
        size = self.dtype_size(dtype)
        received = np.zeros(self.num_tiles, np.int64)
        regions = np.zeros(self.num_tiles, np.int64)
        reader_blocks = tile_block[readers]
        received[readers] = (block_sizes[reader_blocks] - held_elements[readers]) * size
        regions[readers] = runs_per_block[reader_blocks] - held_runs[readers]
        return ExchangeNeed(received, regions)

    def _reader_layout(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str) -> tuple[np.ndarray, ...]:
        """What ``matmul_readers`` needs of the plan alone: each operand element's block,
        where blocks start in flat order, each block's size, and the block each tile reads."""
        plan = self.matmul_plan(groups, rows, inner, cols, dtype)
        shape = _operand_shape(groups, rows, inner, cols, operand)
        splits = ((plan.groups, plan.rows, plan.inner) if operand == "lhs"
                  else (plan.groups, plan.inner, plan.cols))
        blocks, block_sizes = _block_ids(shape, splits)
        blocks = blocks.astype(np.int32)  # at most one block per tile: kept small
        block_starts = np.ones(blocks.size, dtype=bool)
        block_starts[1:] = blocks[1:] != blocks[:-1]
        return (blocks, block_starts, block_sizes,
                matmul_reader_blocks(plan, operand, self.num_tiles))

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
        keys = readers * self.num_tiles + tiles
        space = small_size * self.num_tiles
        if (space <= DENSE_PAIRS_MAX and space <= 16 * keys.size + (1 << 20)
                and (not tiles.size or 0 <= tiles.min() <= tiles.max() < self.num_tiles)):
            # One count per (element, tile); argmax takes the lowest tile among equals.
            counts = np.bincount(keys, minlength=space).reshape(small_size, self.num_tiles)
            return counts.argmax(axis=1).astype(self.tile_dtype)
        keys, counts = np.unique(keys, return_counts=True)
        element, tile = keys // self.num_tiles, keys % self.num_tiles
        order = np.lexsort((tile, -counts, element))  # by element, most reads, lowest tile
        first = np.ones(order.size, dtype=bool)
        first[1:] = element[order][1:] != element[order][:-1]
        result = np.zeros(small_size, dtype=self.tile_dtype)
        result[element[order][first]] = tile[order][first]
        return result

    def sliceable_tiles(self, num_entries: int, embedding_size: int, dtype: str) -> np.ndarray:
        """An embedding table [entries, size] split along its unsliced axis."""
        return self.remembered(
            ("sliceable", num_entries, embedding_size, dtype),
            lambda: self.model.sliceable_table_tiles(num_entries, embedding_size, dtype))

    def elementwise_output(self, input_tiles: Sequence[np.ndarray]) -> int:
        """The input an elementwise result is laid out like: Poplibs' preference order —
        smallest most-loaded tile, then most tiles used, then fewest regions, lowest index."""
        if not input_tiles:
            raise TargetError("elementwise_output needs at least one input")
        best_key, best = None, 0
        for index, tiles in enumerate(input_tiles):
            flat = np.asarray(tiles).reshape(-1)
            counts = tile_counts(flat, self.num_tiles) if flat.size else np.zeros(1)
            runs = int(np.count_nonzero(np.diff(flat))) + 1 if flat.size else 0
            key = (int(counts.max()), -int(np.count_nonzero(counts)), runs, index)
            if best_key is None or key < best_key:
                best_key, best = key, index
        return best


def broadcast_destinations(plan: MatmulPartition, operand: str) -> int:
    """How many tiles read each element of a matmul operand under ``plan``: the output
    channel split for the LHS (activations), the batch split for the RHS (weights)."""
    return plan.cols if operand == "lhs" else plan.rows


def _arrays(answer: Answer) -> tuple[np.ndarray, ...]:
    return answer if isinstance(answer, tuple) else (answer,)


def _nbytes(answer: Answer) -> int:
    return sum(array.nbytes for array in _arrays(answer))


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
        per_axis.append(axis_parts(size, count))
        sizes.append(np.diff(np.arange(count + 1) * size // count))
    a, b, c = per_axis
    blocks = ((a[:, None, None] * parts[1] + b[None, :, None]) * parts[2]
              + c[None, None, :]).reshape(-1)
    block_sizes = (sizes[0][:, None, None] * sizes[1][None, :, None]
                   * sizes[2][None, None, :]).reshape(-1)
    return blocks, block_sizes
