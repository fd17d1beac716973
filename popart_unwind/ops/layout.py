"""How an op type bears on tile layouts: the layout rule each ``OpDef`` carries.

One rule object per op type answers every layout question about that op, so the planner,
the cost model and the PopART baseline never switch on op names:

- ``view_chain`` — for view ops, the exact element map from an input to an output as a
  ``memory.Chain`` (Poplar views: no data moves, the output aliases the input);
- ``unwind`` — what the op contributes to the unwinding problem (seed 001): view ops become
  unwindable ops, matmul operands Sources, elementwise ops SumLike, the rest Barriers;
- ``output_tiles`` — the tile of each output element, derived from the inputs' tiles the way
  Poplar lays out the op's results (views alias; matmul outputs follow the matmul plan;
  elementwise outputs clone the best-balanced input; other results are mapped linearly);
- ``exchange`` — which input elements must reach which tiles before the op computes;
- ``agreement`` — the op's ValuedPairs scored on concrete tiles (any plan, one scale);
- ``creates_input`` — whether PopART would let this op *create* an input's layout (its
  ``Opx::createInput``), with the priority PopART's search ranks creators by;
- ``unwind_tiles`` — the input layout that gives an output a wanted layout (PopART's
  ``unwindTensorLayout``), for ops that can pass a layout back.

The rule families live in ``layout_views`` (view ops), ``layout_compute`` (elementwise,
MatMul/Gemm, Gather) and ``layout_control`` (Call/Loop/If); their classes and ready-made
instances (``MATMUL``, ``GATHER``, ``SUBGRAPH``, ...) can be imported from here too. The
base class is the conservative rule for any op the tool does not model (a Barrier,
linear outputs, no exchange counted): see docs/ipu-model.md for what that approximates.
Rules receive the target and the planner's emitter as arguments (protocols below), so this
module depends on neither.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.ir.tile_mapping import TileIntervals, tile_array

if TYPE_CHECKING:
    from popart_unwind.ir.op import Op
    from popart_unwind.ir.tensor import Tensor
    from popart_unwind.memory import Chain
    from popart_unwind.unwind import Graph, TensorId


class TileTarget(Protocol):
    """What rules need of a target, in per-element tile arrays (flat, row-major)."""

    num_tiles: int

    def dtype_size(self, dtype: str) -> int: ...
    def linear_tiles(self, shape: tuple[int, ...], dtype: str) -> np.ndarray: ...
    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str) -> np.ndarray: ...
    def matmul_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray) -> ExchangeNeed: ...
    def bias_tiles(self, activation_tiles: np.ndarray, activation_shape: tuple[int, ...]
                   ) -> np.ndarray: ...
    def broadcast_operand_tiles(self, full_tiles: np.ndarray, full_shape: tuple[int, ...],
                                small_shape: tuple[int, ...]) -> np.ndarray: ...
    def sliceable_tiles(self, num_entries: int, embedding_size: int, dtype: str
                        ) -> np.ndarray: ...
    def remembered(self, key: tuple, compute: Callable[[], Any]) -> Any: ...
    def elementwise_output(self, input_tiles: list[np.ndarray]) -> int: ...


class ExchangeNeed:
    """Data one op needs moved before it computes: per receiving tile, bytes and regions.

    ``received_bytes[t]`` is what tile t must receive; ``regions[t]`` the number of distinct
    contiguous pieces it receives them in (each piece costs exchange code).
    """

    __slots__ = ("received_bytes", "regions")

    def __init__(self, received_bytes: np.ndarray, regions: np.ndarray) -> None:
        self.received_bytes = received_bytes
        self.regions = regions

    @classmethod
    def none(cls, num_tiles: int) -> ExchangeNeed:
        return cls(np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64))

    def __add__(self, other: ExchangeNeed) -> ExchangeNeed:
        return ExchangeNeed(self.received_bytes + other.received_bytes,
                            self.regions + other.regions)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(received bytes, regions): the form a target's answer cache keeps."""
        return self.received_bytes, self.regions


#: A layout a root of the unwinding problem carries: flat tiles, or a function of the target
#: giving them (called only if the planner needs that root's tiles).
RootTiles = np.ndarray | Callable[[TileTarget], np.ndarray]


class UnwindEmitter(Protocol):
    """The planner's side of building the unwinding problem from the IR.

    ``tensor`` is the unwind tensor standing for an IR tensor (every op output must be
    ``define``d by its op's rule); ``source`` and ``fixed_point`` make roots with known
    layouts; ``barrier`` makes the op's outputs roots laid out by the rule's
    ``output_tiles``; ``sink`` makes an op output a tensor the solver lays out (call
    outputs), whose mapping the planner writes back like a producer-less tensor's.
    """

    graph: Graph
    valuations: Any  # options.UnwindValuations
    target: TileTarget

    def tensor(self, tensor: Tensor) -> TensorId: ...
    def define(self, tensor: Tensor, unwind_tensor: TensorId) -> None: ...
    def source(self, tensor: Tensor, tiles: RootTiles, name: str) -> TensorId: ...
    def fixed_point(self, inputs: Sequence[TensorId], shapes: Sequence[tuple[int, ...]],
                    tiles: Sequence[RootTiles], name: str) -> list[TensorId]: ...
    def barrier(self, op: Op) -> None: ...
    def sink(self, tensor: Tensor) -> TensorId: ...


class LayoutRule:
    """The rule of an op the tool does not model: a barrier with linearly mapped outputs.

    Tile arrays are flat (row-major); ``input_tiles[i]`` holds input index ``i``'s layout
    (None where the input is absent or its layout is not known), and ``output_tiles``
    returns one flat array per output in index order. ``kind`` names the rule family:
    "view", "elementwise", "matmul", "gather", "subgraph" or "barrier".
    """

    kind = "barrier"

    def view_chain(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """The element map from input ``in_index`` to output ``out_index``, if a view."""
        return None

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        emitter.barrier(op)

    def output_tiles(self, op: Op, input_tiles: list[np.ndarray | None],
                     target: TileTarget) -> list[np.ndarray]:
        return [target.linear_tiles(t.shape, t.dtype) for t in op.outputs]

    def exchange(self, op: Op, input_tiles: list[np.ndarray | None],
                 output_tiles: list[np.ndarray], target: TileTarget) -> ExchangeNeed:
        """Unmodelled ops are assumed to compute where their operands lie (no exchange)."""
        return ExchangeNeed.none(target.num_tiles)

    def agreement(self, op: Op, input_tiles: list[np.ndarray | None], target: TileTarget,
                  valuations: Any) -> tuple[float, float]:
        """This op's ValuedPairs scored on concrete tiles: (value of equal elements, bound).

        Lets any plan (ours, PopART's, linear) be scored on the planner's own scale."""
        return 0.0, 0.0

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """PopART's creator priority for input ``in_index`` (higher wins), or None."""
        return None

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileTarget) -> np.ndarray | None:
        """The layout of input ``index`` for which this op receives least, its outputs laid
        out as ``output_tiles``; None when the input's layout changes nothing the op
        receives."""
        return None

    def least_received(self, op: Op, input_tiles: list[np.ndarray | None],
                       output_tiles: list[np.ndarray], planned: set[int],
                       target: TileTarget) -> int:
        """A lower bound on the bytes this op receives over every layout of the inputs in
        ``planned``, the others as ``input_tiles`` — how much exchange a plan leaves to
        save. This default holds for ops whose outputs' layouts do not depend on the
        planned inputs: each planned input as ``best_input_tiles`` wants it."""
        best = list(input_tiles)
        for index in planned:
            wanted = self.best_input_tiles(op, index, output_tiles, target) \
                if index < len(best) else None
            if wanted is not None:
                best[index] = np.asarray(wanted).reshape(-1)
        need = self.exchange(op, best, output_tiles, target)
        return int(np.asarray(need.received_bytes).sum())

    def unwind_tiles(self, op: Op, in_index: int, out_index: int,
                     out_tiles: np.ndarray) -> np.ndarray | None:
        """The layout of input ``in_index`` that gives output ``out_index`` the layout
        ``out_tiles`` (PopART's ``unwindTensorLayout``), -1 where the output does not
        determine an element; None if the op cannot unwind that way."""
        return None


BARRIER = LayoutRule()


def tile_array_of(mapping: Sequence[Sequence[tuple[int, int]]], numel: int) -> np.ndarray:
    """Each element's tile from a Poplar-format mapping (-1 where no interval covers it)."""
    if isinstance(mapping, TileIntervals):  # usually complete: then no per-run loop
        try:
            return tile_array(mapping, numel, max(len(mapping), 1)).astype(np.int64)
        except PlanError:
            pass
    tiles = np.full(numel, -1, dtype=np.int64)
    for tile, intervals in enumerate(mapping):
        for begin, end in intervals:
            tiles[begin:end] = tile
    return tiles


def read_need(reader_tiles: np.ndarray, source_index: np.ndarray | None,
              source_tiles: np.ndarray, element_bytes: int, num_tiles: int,
              distinct: bool = True) -> ExchangeNeed:
    """What tiles must receive when element k is computed on ``reader_tiles[k]`` from
    source element ``source_index[k]`` held on ``source_tiles[source_index[k]]``.

    Each (tile, source element) pair is received once; a tile's regions are its maximal
    runs of consecutive source elements coming from one tile. ``source_index=None`` means
    element k reads source element k (a same-shape operand: no index array to build).
    ``distinct=False`` promises that no pair repeats and that ``source_index`` ascends.
    """
    readers = _ids(reader_tiles)
    held = _ids(source_tiles)
    if source_index is None:
        return _same_shape_need(readers, held, element_bytes, num_tiles)
    index = np.asarray(source_index).reshape(-1).astype(np.int64, copy=False)
    remote = held[index] != readers
    tile, element = readers[remote], index[remote]
    if not tile.size:
        return ExchangeNeed.none(num_tiles)
    if distinct:
        tile, element = _distinct_pairs(tile, element, held.size)
    else:
        order = np.argsort(_narrow(tile), kind="stable")
        tile, element = tile[order], element[order]
    source = held[element]
    starts = np.ones(tile.size, dtype=bool)
    starts[1:] = ((tile[1:] != tile[:-1]) | (element[1:] != element[:-1] + 1)
                  | (source[1:] != source[:-1]))
    received = np.bincount(tile, minlength=num_tiles)[:num_tiles] * element_bytes
    regions = np.bincount(tile[starts], minlength=num_tiles)[:num_tiles]
    return ExchangeNeed(received.astype(np.int64), regions.astype(np.int64))


def _same_shape_need(readers: np.ndarray, held: np.ndarray, element_bytes: int,
                     num_tiles: int) -> ExchangeNeed:
    """``read_need`` when element k reads source element k, without sorting by tile: a
    received element starts a region unless the element before it was received by the same
    tile from the same tile (a tile's elements ascend, so that is its previous one)."""
    remote = held != readers
    if not remote.any():
        return ExchangeNeed.none(num_tiles)
    starts = remote.copy()
    starts[1:] &= ~(remote[:-1] & (readers[1:] == readers[:-1]) & (held[1:] == held[:-1]))
    received = np.bincount(readers[remote], minlength=num_tiles)[:num_tiles] * element_bytes
    regions = np.bincount(readers[starts], minlength=num_tiles)[:num_tiles]
    return ExchangeNeed(received.astype(np.int64), regions.astype(np.int64))


def _ids(tiles: np.ndarray) -> np.ndarray:
    """Flat integer tile ids, kept in their own (narrow) type: widening every operand to
    int64 first was a large share of costing a real model."""
    flat = np.asarray(tiles).reshape(-1)
    return flat if np.can_cast(flat.dtype, np.int64) else flat.astype(np.int64)


def axis_parts(size: int, count: int) -> np.ndarray:
    """The part of each index of an axis of ``size`` cut into ``count`` parts at
    ``floor(p * size / count)`` (the matmul partition model's cut)."""
    bounds = np.arange(count + 1) * size // count
    return np.searchsorted(bounds, np.arange(size), side="right") - 1


def matmul_reader_blocks(plan: Any, operand: str, num_tiles: int) -> np.ndarray:
    """For each tile, the block of matmul ``operand`` ("lhs" or "rhs") it reads under a
    partition ``plan`` (splits ``groups``, ``rows``, ``inner``, ``cols``), -1 for tiles the
    plan leaves idle. Tile ((g * gM + m) * gN + n) * gK + k reads LHS block (g, m, k) and
    RHS block (g, k, n)."""
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


#: Up to this many possible (tile, element) pairs, distinct pairs are found by marking a
#: boolean table (one pass) rather than by sorting: a broadcast bias read by 1472 tiles has
#: about a million; a gather from a real embedding table has billions and sorts.
#: (Also the limit for counting per (element, tile) in ``broadcast_operand_tiles``.)
DENSE_PAIRS_MAX = 1 << 26


def _distinct_pairs(tile: np.ndarray, element: np.ndarray, num_elements: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (tile, element) pairs, sorted by tile then element (``np.unique`` of
    ``tile * num_elements + element``, the same order)."""
    stride = max(num_elements, 1)
    keys = tile.astype(np.int64) * stride + element
    space = (int(tile.max()) + 1) * stride
    if (int(tile.min()) >= 0 and space <= DENSE_PAIRS_MAX
            and space <= 64 * keys.size + (1 << 20)):
        seen = np.zeros(space, dtype=bool)
        seen[keys] = True
        keys = np.flatnonzero(seen)
    else:  # sorting beats np.unique's hash table here
        keys = np.sort(keys)
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return keys // stride, keys % stride


def _narrow(tiles: np.ndarray) -> np.ndarray:
    """Tile ids as int16 when they fit: numpy's stable sort of 16-bit keys is a radix sort."""
    small = np.iinfo(np.int16)
    if tiles.dtype.itemsize <= 2:
        return tiles
    if small.min <= int(tiles.min()) and int(tiles.max()) <= small.max:
        return tiles.astype(np.int16)
    return tiles


_RULE_MODULES = {
    **dict.fromkeys(("ViewRule", "ReshapeRule", "TransposeRule", "SliceRule", "IdentityRule",
                     "ExpandRule", "SplitRule", "ConcatRule", "RESHAPE", "TRANSPOSE", "SLICE",
                     "IDENTITY", "EXPAND", "SPLIT", "CONCAT"), "layout_views"),
    **dict.fromkeys(("ElementwiseRule", "MatMulRule", "GatherRule", "ELEMENTWISE",
                     "FIRST_INPUT_ELEMENTWISE", "MATMUL", "GATHER", "matmul_groups"),
                    "layout_compute"),
    **dict.fromkeys(("ConvRule", "CONV", "conv_geometry"), "layout_conv"),
    **dict.fromkeys(("SubgraphRule", "SUBGRAPH"), "layout_control"),
}


def __getattr__(name: str) -> Any:
    """The rule classes live in family modules (which import this one); reach them here."""
    module = _RULE_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"popart_unwind.ops.{module}"), name)
