"""The IPU Model as a tile machine: the C++ hooks' answers as per-element tile arrays,
PopART's rotating linear mapper, and the two derived questions the rules ask (where a
broadcast operand goes, and what a matmul's tiles must receive given an operand's layout).
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from math import prod

import numpy as np

from popart_unwind import _hooks
from popart_unwind.errors import ShapeError, TargetError
from popart_unwind.ir.tile_mapping import tile_dtype
from popart_unwind.machine import count_memo, exchange, hooks
from popart_unwind.machine.exchange import (
    axis_bounds,
    axis_parts,
    broadcast_index_view,
    broadcast_rows,
    matmul_reader_blocks,
    most_read_by_rows,
    most_read_tiles,
    read_need,
    reader_need,
    remembered_need,
    shared_bus_need,
)
from popart_unwind.machine.interface import (
    MATMUL_OPERANDS,
    REARRANGE_ABOVE_DESTINATIONS,
    Answer,
    ExchangeNeed,
    MatmulCost,
    MatmulPartition,
    MatmulPlan,
    TileMachine,
)
from popart_unwind.machine.ipu_model import IpuModel
from popart_unwind.validation import as_shape

#: Bytes of hook answers (matmul operand and table layouts) a target keeps, least recently
#: used dropped first: room for every distinct matmul of BERT-base or GPT-2 training and
#: their embedding tables. An answer over a quarter of it is not kept (made again when asked
#: again): a [8192, 8192] matmul's three layouts, 128 MB each, cycled through the room,
#: evicting each other, while holding two of them. Such an answer is remembered weakly
#: instead: asked again while a reader still holds it, it is that same array, not a second.
ANSWER_BYTES_KEPT = 256 * 2**20

#: The fewest indices popops puts on a tile when it creates them (``minIndicesPerTile``,
#: lib/popops/DynamicSlice.cpp).
MIN_INDICES_PER_TILE = 32


class TileTarget(TileMachine):
    """An :class:`IpuModel` answering the tile machine's questions (see ``TileMachine``)."""

    def __init__(self, model: IpuModel | None = None) -> None:
        self.model = model if model is not None else IpuModel()
        self.num_tiles = self.model.tiles_per_ipu
        self.bytes_per_tile = self.model.bytes_per_tile
        self.num_ipus = self.model.ipus
        self.tile_dtype = tile_dtype(self.num_tiles)
        self._next_start_tile = 0
        self._answers = _Answers()
        self._last_broadcast = _LastBroadcast()
        self._plans: dict[tuple[str, int], MatmulPlan] = {}

    def with_plans(self, plans: Mapping[tuple[str, int], MatmulPlan]) -> TileTarget:
        """A copy answering ``chosen_plan`` from ``plans``; it shares the answers remembered
        (they depend on the question alone) and starts its own linear rotation at 0."""
        view = self.rotated_to(0)
        view._plans = dict(plans)
        return view

    def rotated_to(self, start_tile: int) -> TileTarget:
        view = copy.copy(self)
        view._next_start_tile = int(start_tile) % self.num_tiles
        return view

    def chosen_plan(self, key: tuple[str, int]) -> MatmulPlan | None:
        return self._plans.get(key)

    def reset(self) -> None:
        self._next_start_tile = 0

    @property
    def next_start_tile(self) -> int:
        return self._next_start_tile

    def dtype_size(self, dtype: str) -> int:
        return self.model.dtype_size(dtype)

    def exchange_cycles(self, busiest_tile_bytes: int) -> int:
        return self.model.exchange_cycles(busiest_tile_bytes)

    def ipu_copy_cycles(self, num_bytes: int) -> int:
        return self.model.ipu_copy_cycles(num_bytes)

    def receive_cycles(self, num_bytes: int) -> int:
        return -(-num_bytes // self.model.exchange_bytes_per_cycle)

    def vector_elements(self, dtype: str) -> int:
        """One 64-bit vector per cycle (the grain of the linear mapping)."""
        return self.model.grain_size(dtype)

    def elementwise_cycles(self, elements: int, dtype: str, operation: str | None = None
                           ) -> int:
        return self.model.elementwise_cycles(elements, dtype, operation)

    def compound_cycles(self, elements: int, dtype: str,
                        operations: tuple[str | None, ...]) -> int:
        return self.model.compound_cycles(elements, dtype, operations)

    def reduce_cycles(self, outputs: int, partials: int, dtype: str, operation: str,
                      strided: bool) -> int:
        return self.model.reduce_cycles(outputs, partials, dtype, operation, strided)

    def gathered_partials_cycles(self, outputs: int, partials: int, dtype: str,
                                 operation: str) -> int:
        return self.model.gathered_partials_cycles(outputs, partials, dtype, operation)

    def remembered(self, key: tuple, compute: Callable[[], Answer],
                   kept: bool = True) -> Answer:
        """Answers are read-only, so no caller can change what the next one gets; at most
        ``ANSWER_BYTES_KEPT`` bytes of them are kept."""
        return self._answers.get(key, compute, kept)

    def forget(self) -> None:
        self._answers.clear()

    # -- hooks -------------------------------------------------------------------------------
    def linear_tiles(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        """Poplibs' linear mapping, started where the previous one ended (PopART's
        LinearMapper)."""
        numel = prod(as_shape(shape, "shape", TargetError))
        tiles, used = hooks.linear_tiles(self.model.tile_params(dtype), numel,
                                         self._next_start_tile)
        self._next_start_tile = (self._next_start_tile + used) % self.num_tiles
        return tiles

    def reduction_result_tiles(self, num_elements: int, dtype: str) -> np.ndarray:
        """``popops::reduce``'s mapping of a result it creates when the partials lie on
        several tiles: ``calcLinearTileMapping`` from tile 0 with a grain of one vector
        width and at least four vector widths per tile (``intermediateToOutput``,
        lib/popops/reduction/ReductionStages.cpp)."""
        grain = self.model.tile_params(dtype).grain_elements
        return self._linear_from_tile_0(int(num_elements), dtype, grain, 4 * grain)

    def indices_tiles(self, count: int, preference: np.ndarray | None = None) -> np.ndarray:
        """``popops::createIndicesTensor``: the indices (32-bit) mapped with
        ``mapTensorLinearly`` from tile 0, a grain of one index and at least 32 per tile
        (``minIndicesPerTile``, lib/popops/DynamicSlice.cpp)."""
        tiles = self._linear_from_tile_0(int(count), "int32", 1, MIN_INDICES_PER_TILE)
        if preference is None:
            return tiles
        order = np.asarray(preference).reshape(-1)
        if order.size != self.num_tiles or not np.array_equal(
                np.sort(order), np.arange(self.num_tiles)):
            raise TargetError(f"a tile preference must order all {self.num_tiles} tiles, "
                              f"got {order.size} ids")
        return order[tiles].astype(self.tile_dtype)

    def _linear_from_tile_0(self, num_elements: int, dtype: str, grain: int,
                            min_per_tile: int) -> np.ndarray:
        """Poplibs' linear mapping from tile 0 with its own grain and minimum per tile."""
        params = self.model.tile_params(dtype)
        linear_params = _hooks.TileParams(
            num_tiles=params.num_tiles, element_bytes=params.element_bytes,
            grain_elements=grain, min_elements_per_tile=min_per_tile,
            partial_bytes_per_element=params.partial_bytes_per_element,
            exchange_bytes_per_cycle=params.exchange_bytes_per_cycle,
            macs_per_cycle=params.macs_per_cycle, sync_cycles=params.sync_cycles)
        tiles, _ = hooks.linear_tiles(linear_params, num_elements, 0)
        return tiles

    def matmul_plan(self, groups: int, rows: int, inner: int, cols: int,
                    dtype: str, memory_proportion: float | None = None) -> MatmulPartition:
        """The partition of [G,M,K] x [G,K,N] the model's planner picks (cached)."""
        self.dtype_size(dtype)  # an unknown (or unhashable) dtype is a TargetError
        return _plan(self._model_for(memory_proportion),
                     _matmul_dims(groups, rows, inner, cols), dtype)

    def matmul_candidates(self, cube: Sequence[int], dtype: str,
                          passes: Sequence[str] = ("mkn",),
                          count: int = 1,
                          memory_proportion: float | None = None) -> list[MatmulPartition]:
        """The partitions of the cube with the fewest cycles summed over ``passes`` (each
        pass costed as the matmul it computes; docs/ipu-model.md, "Plans as decisions"), best
        first."""
        self.dtype_size(dtype)
        dims = _matmul_dims(*cube)
        axes = tuple(_pass_axes(p) for p in passes)
        if not axes or isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TargetError(f"matmul candidates need at least one pass and a positive count, "
                              f"got {list(passes)} and {count!r}")
        return list(_candidates(self._model_for(memory_proportion), dims, dtype, axes, count))

    def matmul_cost(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                    partition: MatmulPartition, shared: str = "rhs",
                    memory_proportion: float | None = None) -> MatmulCost:
        self.dtype_size(dtype)
        return hooks.matmul_cost(self._model_for(memory_proportion).tile_params(dtype),
                                 _matmul_dims(groups, rows, inner, cols), partition, shared)

    def _model_for(self, memory_proportion: float | None) -> IpuModel:
        """The model, its matmuls' temporary memory bounded at ``memory_proportion`` of a
        tile when given (an op's own proportion), else at the model's."""
        if memory_proportion in (None, self.model.available_memory_proportion):
            return self.model
        return _with_proportion(self.model, memory_proportion)

    def rearrangement_cycles(self, elements: int, dtype: str, tiles_used: int) -> int:
        """Poplibs' estimate of rearranging a convolution operand or result
        (``addTransformCycleEstimate``, lib/poplin/ConvModel.cpp): each tile's share of the
        bytes is exchanged, then reordered on the tile at one element per cycle with a 5/4
        overhead (its factor for channel counts its grain divides)."""
        if elements <= 0:
            return 0
        size = self.dtype_size(dtype)
        share = -(-elements * size // max(1, min(tiles_used, self.num_tiles)))
        return -(-share // self.model.exchange_bytes_per_cycle) + -(-share * 5 // (size * 4))

    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str, partition: MatmulPartition | None = None) -> np.ndarray:
        if operand not in MATMUL_OPERANDS:
            raise TargetError(f"matmul operand must be one of {MATMUL_OPERANDS}, got "
                              f"{operand!r}")
        dims = _matmul_dims(groups, rows, inner, cols)
        partition = self._partition(dims, dtype, partition)
        return self.remembered(
            ("matmul", *dims, dtype, operand, partition.as_tuple()),
            lambda: hooks.matmul_tiles(self.model.tile_params(dtype), dims, partition,
                                       operand))

    @property
    def tiles_per_exchange_bus(self) -> int:
        return self.model.tiles_per_exchange_bus

    def matmul_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray,
                       partition: MatmulPartition | None = None,
                       shared_buses: bool = True) -> ExchangeNeed:
        """Tile (g, m, k, n) reads LHS block (g, m, k), RHS block (g, k, n) and, in a pass
        sharing the partition, output block (g, m, n). An operand broadcast to more than
        ``REARRANGE_ABOVE_DESTINATIONS`` tiles is first copied into the plan's own layout
        (Poplibs' pre-convolution rearrangement), so it costs that copy — the elements not
        already where the plan wants them — plus the broadcast from the plan's layout; any
        other operand is broadcast from where it lies. The RHS of an even row split reaches
        the pairs of its readers on one super tile together (``shared_buses``: the plan's
        tiles start on an even tile, so its pairs are super tiles). Inside a cost walk a
        question asked before about equal tiles is answered again (``remembered_need``).
        See docs/ipu-model.md."""
        if operand not in MATMUL_OPERANDS:
            raise TargetError(f"matmul_readers: operand must be one of {MATMUL_OPERANDS}, got "
                              f"{operand!r}")
        dims = _matmul_dims(groups, rows, inner, cols)
        partition = self._partition(dims, dtype, partition)
        g, m, k, n = dims
        numel = g * {"lhs": m * k, "rhs": k * n, "output": m * n}[operand]
        if np.size(tiles) != numel:
            raise TargetError(f"matmul_readers: {np.size(tiles)} tiles given for a {operand} of "
                              f"{numel} elements ([G,M,K] x [G,K,N] = "
                              f"{[groups, rows, inner]} x {[groups, inner, cols]})")
        return remembered_need(
            ("matmul readers", self.model, dims, dtype, operand, partition.as_tuple(),
             shared_buses), (np.asarray(tiles),),
            lambda: self._matmul_readers(dims, dtype, operand, tiles, partition,
                                         shared_buses))

    def _matmul_readers(self, dims: tuple[int, int, int, int], dtype: str, operand: str,
                        tiles: np.ndarray, partition: MatmulPartition,
                        shared_buses: bool) -> ExchangeNeed:
        """``matmul_readers``, worked out."""
        question = (*dims, dtype, operand, partition)
        if partition.broadcast_destinations(operand) <= REARRANGE_ABOVE_DESTINATIONS:
            return self._block_readers(*question, tiles, shared_buses)
        wanted = self.matmul_tiles(*dims, dtype, operand, partition)
        copied = read_need(wanted, None, tiles, self.dtype_size(dtype), self.num_tiles)
        received, regions = self.remembered(
            ("broadcast", *dims, dtype, operand, partition.as_tuple(), shared_buses),
            lambda: self._block_readers(*question, wanted, shared_buses).arrays())
        return copied + ExchangeNeed(received, regions)

    def _partition(self, dims: tuple[int, int, int, int], dtype: str,
                   partition: MatmulPartition | None) -> MatmulPartition:
        """``partition``, checked against the matmul, or the cheapest one (the dtype checked
        either way)."""
        self.dtype_size(dtype)
        if partition is None:
            return self.matmul_plan(*dims, dtype)
        for axis, size, split in zip("gmkn", dims, partition.as_tuple(), strict=True):
            if not 1 <= split <= size:
                raise TargetError(f"matmul partition {partition.as_tuple()} splits axis {axis} "
                                  f"of size {size} into {split} parts")
        if partition.tiles_used > self.num_tiles:
            raise TargetError(f"matmul partition {partition.as_tuple()} needs "
                              f"{partition.tiles_used} tiles; the machine has {self.num_tiles}")
        return partition

    def _block_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, partition: MatmulPartition, tiles: np.ndarray,
                       shared_buses: bool) -> ExchangeNeed:
        """Each reading tile receives the elements of its block it does not hold, in as
        many regions as the block has runs from one source tile, less those it holds
        (an operand element lies in one block; ``exchange.block_need`` for any blocks).
        With ``shared_buses``, the RHS of an even row split reaches each super tile's pair
        of readers together (``exchange.shared_bus_need``)."""
        *parts, splits, block_sizes, tile_block = self.remembered(
            ("readers", groups, rows, inner, cols, dtype, operand, partition.as_tuple()),
            lambda: self._reader_layout(groups, rows, inner, cols, operand, partition))
        runs_per_block, held_elements, held_runs = hooks.grid_reader_counts(
            tiles, parts, splits, tile_block, block_sizes.size)
        need = reader_need(runs_per_block, held_elements, held_runs, block_sizes,
                           tile_block, self.dtype_size(dtype), self.num_tiles)
        pair = self.tiles_per_exchange_bus
        if shared_buses and operand == "rhs" and pair > 1 and partition.rows % pair == 0:
            need = shared_bus_need(need, held_elements, block_sizes, tile_block,
                                   self.dtype_size(dtype))
        return need

    def _reader_layout(self, groups: int, rows: int, inner: int, cols: int, operand: str,
                       partition: MatmulPartition) -> tuple[np.ndarray, ...]:
        """What ``matmul_readers`` needs of the partition alone: each of the three axes'
        part per index, the parts per axis, each block's size (row-major over the parts),
        and the block each tile reads."""
        axes = {"lhs": "gmk", "rhs": "gkn", "output": "gmn"}[operand]
        size = dict(zip("gmkn", (groups, rows, inner, cols), strict=True))
        shape = tuple(size[axis] for axis in axes)
        splits = tuple(partition.split(axis) for axis in axes)
        parts = [axis_parts(n, count) for n, count in zip(shape, splits, strict=True)]
        sizes = [np.diff(axis_bounds(n, count)) for n, count in zip(shape, splits, strict=True)]
        block_sizes = (sizes[0][:, None, None] * sizes[1][None, :, None]
                       * sizes[2][None, None, :]).reshape(-1)
        return (*parts, np.array(splits), block_sizes,
                matmul_reader_blocks(partition, operand, self.num_tiles))

    def broadcast_operand_tiles(self, full_tiles: np.ndarray, full_shape: Sequence[int],
                                small_shape: Sequence[int],
                                preference: np.ndarray | None = None,
                                any_reader: bool = False) -> np.ndarray:
        """Each element of a numpy-broadcast operand on the tile holding the most full
        elements that read it (ties: the lowest tile, or the earliest in ``preference``) —
        Poplibs' createBroadcastOperand rule, of which the bias mapping is the one-axis
        case. Every reading tile receives an element once, so any tile reading it leaves
        the same bytes to exchange: a preference among equals (or, ``any_reader``, runs of
        elements dealt over all the readers) moves memory, not exchange. An elementwise
        op's agreement and its least exchange ask this of one layout, its first operand's
        and its result's copy of it: inside a cost walk its memo answers a question asked
        about equal tiles again (``count_memo``), elsewhere the last few answers are kept
        (``_LastBroadcast``)."""
        question = (tuple(full_shape), tuple(small_shape), any_reader)
        memo = count_memo.active()
        if memo is not None:  # a cost walk: its questions remembered by value
            return memo.remembered(
                ("broadcast operand", self.model, *question), (full_tiles, preference),
                lambda: self._broadcast_operand_tiles(full_tiles, question[0], question[1],
                                                      preference, any_reader)).copy()
        answer = self._last_broadcast.answer(question, full_tiles, preference)
        if answer is None:
            answer = self._broadcast_operand_tiles(full_tiles, question[0], question[1],
                                                   preference, any_reader)
            self._last_broadcast.keep(question, full_tiles, preference, answer)
        return answer.copy()

    def _broadcast_operand_tiles(self, full_tiles: np.ndarray, full_shape: tuple[int, ...],
                                 small_shape: tuple[int, ...], preference: np.ndarray | None,
                                 any_reader: bool) -> np.ndarray:
        """``broadcast_operand_tiles``, computed."""
        if np.size(full_tiles) != prod(full_shape):
            raise TargetError(f"broadcast_operand_tiles: {np.size(full_tiles)} tiles given for "
                              f"a full tensor of shape {full_shape}")
        try:
            index = broadcast_index_view(small_shape, full_shape)
        except ShapeError as error:
            raise TargetError(f"shape {small_shape} does not broadcast to {full_shape}: "
                              f"{error}") from None
        # from the rows of reads (``broadcast_rows``): many elements sorted row by row, few
        # counted in one table made from the rows (no index array as long as the readers);
        # few dealt to any reader keep ``most_read_tiles``' one table of pairs
        table = prod(small_shape) * self.num_tiles <= exchange.DENSE_COUNTS_MAX
        rows = None if table and any_reader else \
            broadcast_rows(full_tiles, full_shape, small_shape)
        if rows is not None:
            if rows.size and not 0 <= int(rows.min()) <= int(rows.max()) < self.num_tiles:
                raise TargetError(f"broadcast_operand_tiles: tile ids must lie in "
                                  f"[0, {self.num_tiles})")
            if any_reader:
                return exchange.dealt_by_rows(rows, self.num_tiles, self.tile_dtype,
                                              preference)
            if table:
                return exchange.most_read_by_table(rows, self.num_tiles, self.tile_dtype,
                                                   preference)
            return most_read_by_rows(rows, self.num_tiles, self.tile_dtype, preference)
        return most_read_tiles(full_tiles, index, prod(small_shape), self.num_tiles,
                               self.tile_dtype, preference, any_reader)

    def sliceable_tiles(self, num_entries: int, embedding_size: int, dtype: str) -> np.ndarray:
        """An embedding table [entries, size] split along its unsliced axis (Poplibs'
        createSliceableTensor)."""
        as_shape((num_entries, embedding_size), "table shape", TargetError)
        self.dtype_size(dtype)
        return self.remembered(
            ("sliceable", num_entries, embedding_size, dtype),
            lambda: hooks.sliceable_tiles(self.model.tile_params(dtype), num_entries,
                                          embedding_size))

    def elementwise_output(self, input_tiles: Sequence[np.ndarray]) -> int:
        """Poplibs' preference order: smallest most-loaded tile, then most tiles used, then
        fewest regions, then the lowest index."""
        if not input_tiles:
            raise TargetError("elementwise_output needs at least one input")
        sizes = sorted({np.size(tiles) for tiles in input_tiles})
        if len(sizes) > 1:
            raise TargetError(f"elementwise_output compares layouts of one shape; got tile "
                              f"arrays of {sizes} elements")
        best_key, best = None, 0
        for index, tiles in enumerate(input_tiles):
            flat = np.asarray(tiles).reshape(-1)
            counts = hooks.tile_counts(flat, self.num_tiles) if flat.size else np.zeros(1)
            runs = hooks.run_count(flat)
            key = (int(counts.max()), -int(np.count_nonzero(counts)), runs, index)
            if best_key is None or key < best_key:
                best_key, best = key, index
        return best


@lru_cache(maxsize=64)
def _with_proportion(model: IpuModel, memory_proportion: float) -> IpuModel:
    return dataclasses.replace(model, available_memory_proportion=memory_proportion)


@lru_cache(maxsize=256)
def _plan(model: IpuModel, dims: tuple[int, int, int, int], dtype: str) -> MatmulPartition:
    return hooks.plan_matmul(model.tile_params(dtype), dims)


@lru_cache(maxsize=1024)
def _candidates(model: IpuModel, cube: tuple[int, int, int, int], dtype: str,
                passes: tuple[tuple[int, int, int], ...],
                count: int) -> tuple[MatmulPartition, ...]:
    return tuple(hooks.matmul_candidates(model.tile_params(dtype), cube, passes, count))


def _pass_axes(axes: str) -> tuple[int, int, int]:
    if not isinstance(axes, str) or sorted(axes) != ["k", "m", "n"]:
        raise TargetError(f"a pass names the cube axes m, k and n once each, got {axes!r}")
    return tuple("mkn".index(axis) for axis in axes)  # type: ignore[return-value]


class _LastBroadcast:
    """The last few ``broadcast_operand_tiles`` questions and answers: each its shapes
    and flags, and copies of the full tensor's tiles and the preference (a later change
    to the caller's arrays cannot make a different question look the same). Layouts of
    ``KEPT_TILES_MAX`` elements or more are not kept."""

    KEPT_TILES_MAX = 1 << 24
    #: Questions kept: an op's broadcast operands (a mask and a fill, say), each asked
    #: by its agreement and its least exchange.
    KEPT = 4

    def __init__(self) -> None:
        self._kept: list[tuple[tuple, np.ndarray, np.ndarray | None, np.ndarray]] = []

    def answer(self, question: tuple, full_tiles: np.ndarray,
               preference: np.ndarray | None) -> np.ndarray | None:
        """The kept answer to ``question`` about these tiles and preference, else None."""
        for kept_question, tiles, kept_preference, answer in self._kept:
            if question != kept_question or not _same_values(full_tiles, tiles):
                continue
            if (preference is None) != (kept_preference is None):
                continue
            if preference is None or _same_values(preference, kept_preference):
                return answer
        return None

    def keep(self, question: tuple, full_tiles: np.ndarray, preference: np.ndarray | None,
             answer: np.ndarray) -> None:
        """Keep an answer (the oldest kept one is dropped)."""
        if np.size(full_tiles) >= self.KEPT_TILES_MAX:
            return
        self._kept = [*self._kept[-(self.KEPT - 1):], (
            question, np.array(full_tiles).reshape(-1),
            None if preference is None else np.array(preference).reshape(-1),
            np.array(answer))]


def _same_values(given: np.ndarray, kept: np.ndarray | None) -> bool:
    """Whether ``given`` (any shape) holds ``kept``'s values in row-major order (the
    leading ones compared first: different layouts mostly differ early)."""
    if kept is None:
        return False
    flat = np.asarray(given).reshape(-1)
    return flat.size == kept.size and np.array_equal(flat[:256], kept[:256]) \
        and np.array_equal(flat, kept)


class _Answers:
    """Remembered hook answers, least recently used first, at most ``ANSWER_BYTES_KEPT``
    bytes; one object shared by a target and its ``with_plans`` views."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple, Answer] = OrderedDict()
        self._bytes = 0
        # answers too large to keep, while their readers hold them (a single array each)
        self._held: weakref.WeakValueDictionary[tuple, np.ndarray] = \
            weakref.WeakValueDictionary()

    def get(self, key: tuple, compute: Callable[[], Answer], kept: bool = True) -> Answer:
        """The answer to ``key``, computed if it is not remembered; ``kept`` False: held
        only while its readers hold it (a single array), never in the kept room."""
        found = self._kept.get(key)
        if found is not None:
            self._kept.move_to_end(key)
            return found
        found = self._held.get(key)
        if found is not None:
            return found
        found = compute()
        for array in _arrays(found):
            array.flags.writeable = False
        if not kept or _nbytes(found) > ANSWER_BYTES_KEPT // 4:
            # kept by its readers only: a few such answers would fill the room
            if isinstance(found, np.ndarray):
                self._held[key] = found
            return found
        self._kept[key] = found
        self._bytes += _nbytes(found)
        while self._bytes > ANSWER_BYTES_KEPT and len(self._kept) > 1:
            self._bytes -= _nbytes(self._kept.popitem(last=False)[1])
        return found

    def clear(self) -> None:
        self._kept.clear()
        self._held.clear()
        self._bytes = 0


def _matmul_dims(*sizes: int) -> tuple[int, int, int, int]:
    for name, value in zip(("groups", "rows", "inner", "cols"), sizes, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TargetError(f"matmul {name} must be a positive int, got {value!r}")
    if prod(sizes) > hooks.MAX_ELEMENTS:
        raise TargetError(f"matmul [{sizes[0]},{sizes[1]},{sizes[2]}]x[{sizes[0]},{sizes[2]},"
                          f"{sizes[3]}] is too large to plan")
    return sizes  # type: ignore[return-value]


def _arrays(answer: Answer) -> tuple[np.ndarray, ...]:
    return answer if isinstance(answer, tuple) else (answer,)


def _nbytes(answer: Answer) -> int:
    return sum(array.nbytes for array in _arrays(answer))


