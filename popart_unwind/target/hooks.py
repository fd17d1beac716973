"""Python face of the C++ layout hooks (``popart_unwind._hooks``).

The hooks compute tile mappings in Poplar's format: for each tile, a list of half-open
``(begin, end)`` intervals of the row-major flattened tensor. The ``*_tiles`` functions at
the end give the same layouts as per-element tile arrays, filled in C++, and
``poplar_mapping`` builds Poplar's format from such an array: at real model sizes, a Python
tuple per interval is what costs. This module validates arguments and turns bad ones into
typed errors before they reach C++, so that a caller sees a
:class:`~popart_unwind.errors.TargetError` naming the argument, never a pybind11 message.
The rules each hook follows, and the public facts they rest on, are in docs/ipu-model.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from math import prod
from typing import Any, TypeVar

import numpy as np

from popart_unwind import _hooks
from popart_unwind.errors import TargetError

TileMapping = list[list[tuple[int, int]]]

#: Largest element count (and matmul work G*M*K*N) the hooks accept: sizes stay far from
#: 64-bit overflow inside C++.
MAX_ELEMENTS = 2**62

_T = TypeVar("_T")


def _require_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TargetError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise TargetError(f"{name} must be at least {minimum}, got {value}")
    if value > MAX_ELEMENTS:
        raise TargetError(f"{name} must be at most 2**62, got {value}")
    return value


def _require_shape(name: str, shape: object) -> tuple[int, ...]:
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence):
        raise TargetError(f"{name} must be a sequence of ints, got {shape!r}")
    dims = tuple(_require_int(f"{name}[{axis}]", dim, 0) for axis, dim in enumerate(shape))
    if prod(dims) > MAX_ELEMENTS:
        raise TargetError(f"{name} {list(dims)} has more than 2**62 elements")
    return dims


def _call(what: str, hook: Callable[..., _T], *args: Any) -> _T:
    """Run a C++ hook, turning its ValueError/TypeError into a TargetError about ``what``."""
    try:
        return hook(*args)
    except ValueError as error:
        raise TargetError(str(error)) from error
    except TypeError as error:
        raise TargetError(
            f"{what}: a tile mapping must be a list (one entry per tile) of lists of "
            f"(begin, end) pairs of non-negative ints"
        ) from error


def _require_linear(num_elements: int, num_tiles: int, grain_size: int,
                    min_elements_per_tile: int, start_tile: int) -> None:
    _require_int("num_elements", num_elements, 0)
    _require_int("num_tiles", num_tiles, 1)
    _require_int("grain_size", grain_size, 1)
    _require_int("min_elements_per_tile", min_elements_per_tile, 0)
    _require_int("start_tile", start_tile, 0)
    if start_tile >= num_tiles:
        raise TargetError(f"start_tile must be below num_tiles {num_tiles}, got {start_tile}")


def linear_tile_mapping(
    num_elements: int,
    num_tiles: int,
    grain_size: int = 1,
    min_elements_per_tile: int = 0,
    start_tile: int = 0,
) -> TileMapping:
    """Map ``num_elements`` elements linearly over ``num_tiles`` tiles (Poplibs' rule).

    Elements go to tiles in increasing flat order, in whole grains of ``grain_size``
    elements, with at least ``min_elements_per_tile`` elements on each used tile where the
    tensor is large enough. With ``start_tile`` s, what would land on tile t lands on tile
    ``(t + s) % num_tiles`` instead, as PopART's linear mapper does so that successive small
    tensors do not all pile onto tile 0.
    """
    _require_linear(num_elements, num_tiles, grain_size, min_elements_per_tile, start_tile)
    return _hooks.linear_tile_mapping(
        num_elements, num_tiles, grain_size, min_elements_per_tile, start_tile
    )


@dataclass(frozen=True)
class MatmulCosts:
    """Machine figures the matmul partition cost uses (see docs/ipu-model.md)."""

    bytes_per_element: int
    partial_bytes_per_element: int
    exchange_bytes_per_cycle: int
    macs_per_cycle: int
    sync_cycles: int

    def __post_init__(self) -> None:
        for field in fields(self):
            minimum = 0 if field.name == "sync_cycles" else 1
            _require_int(field.name, getattr(self, field.name), minimum)

    def as_args(self) -> tuple[int, int, int, int, int]:
        return (
            self.bytes_per_element,
            self.partial_bytes_per_element,
            self.exchange_bytes_per_cycle,
            self.macs_per_cycle,
            self.sync_cycles,
        )


@dataclass(frozen=True)
class MatmulPartition:
    """How many parts each axis of a grouped matmul [G,M,K] x [G,K,N] is cut into.

    ``groups`` (gG), ``rows`` (gM, the convolution's batch), ``inner`` (gK, the reduced input
    channels) and ``cols`` (gN, the output channels). Tile (g, m, k, n) computes one part;
    its index is ``((g * gM + m) * gN + n) * gK + k``.
    """

    groups: int
    rows: int
    inner: int
    cols: int

    def __post_init__(self) -> None:
        for field in fields(self):
            _require_int(f"partition {field.name}", getattr(self, field.name), 1)

    @property
    def tiles_used(self) -> int:
        return self.groups * self.rows * self.inner * self.cols

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.groups, self.rows, self.inner, self.cols)

    def tile(self, g: int, m: int, k: int, n: int) -> int:
        """The tile computing part (g, m, k, n)."""
        return ((g * self.rows + m) * self.cols + n) * self.inner + k


def _require_matmul(groups: int, rows: int, inner: int, cols: int) -> None:
    for name, value in (("groups", groups), ("rows", rows), ("inner", inner), ("cols", cols)):
        _require_int(name, value, 1)
    if groups * rows * inner * cols > MAX_ELEMENTS:
        raise TargetError(
            f"matmul [{groups},{rows},{inner}]x[{groups},{inner},{cols}] is too large to plan"
        )


def _require_costs(costs: object) -> None:
    if not isinstance(costs, MatmulCosts):
        raise TargetError(f"costs must be a MatmulCosts, got {costs!r}")


def _require_partition(
    groups: int, rows: int, inner: int, cols: int, partition: MatmulPartition, num_tiles: int
) -> None:
    _require_matmul(groups, rows, inner, cols)
    _require_int("num_tiles", num_tiles, 1)
    if not isinstance(partition, MatmulPartition):
        raise TargetError(f"partition must be a MatmulPartition, got {partition!r}")
    for name, split, size in zip(
        ("groups", "rows", "inner", "cols"), partition.as_tuple(), (groups, rows, inner, cols),
        strict=True,
    ):
        if split > size:
            raise TargetError(f"partition splits {name} of size {size} into {split} parts")
    if partition.tiles_used > num_tiles:
        raise TargetError(
            f"partition {partition.as_tuple()} needs {partition.tiles_used} tiles, "
            f"only {num_tiles} available"
        )


def matmul_partition_cycles(
    groups: int, rows: int, inner: int, cols: int, partition: MatmulPartition, costs: MatmulCosts
) -> int:
    """Estimated cycles of the matmul [G,M,K] x [G,K,N] cut as ``partition``.

    The busiest tile's multiply-accumulates, plus the exchange of the operand parts it does
    not hold and a sync, plus (when K is split) the exchange of partial sums and a sync.
    """
    _require_partition(groups, rows, inner, cols, partition, partition.tiles_used)
    _require_costs(costs)
    return _hooks.matmul_partition_cycles(
        groups, rows, inner, cols, partition.as_tuple(), *costs.as_args()
    )


def plan_matmul(
    groups: int, rows: int, inner: int, cols: int, num_tiles: int, costs: MatmulCosts
) -> MatmulPartition:
    """The partition of [G,M,K] x [G,K,N] over ``num_tiles`` tiles with the fewest cycles.

    An exhaustive search over gG*gM*gK*gN <= num_tiles of :func:`matmul_partition_cycles`,
    an approximation of Poplibs' convolution planner; ties go to fewer tiles, then to the
    smallest (gG, gM, gK, gN).
    """
    _require_matmul(groups, rows, inner, cols)
    _require_int("num_tiles", num_tiles, 1)
    _require_costs(costs)
    splits = _hooks.plan_matmul(groups, rows, inner, cols, num_tiles, *costs.as_args())
    return MatmulPartition(*splits)


def matmul_lhs_mapping(
    groups: int, rows: int, inner: int, cols: int, partition: MatmulPartition, num_tiles: int
) -> TileMapping:
    """Mapping of the LHS [G, M, K]: each block spread over the gN tiles that read it.

    So the operand is stored once, and each reader already holds a 1/gN share of its block.
    """
    _require_partition(groups, rows, inner, cols, partition, num_tiles)
    return _hooks.matmul_lhs_mapping(groups, rows, inner, cols, partition.as_tuple(), num_tiles)


def matmul_rhs_mapping(
    groups: int, rows: int, inner: int, cols: int, partition: MatmulPartition, num_tiles: int
) -> TileMapping:
    """Mapping of the RHS [G, K, N]: each block spread over the gM tiles that read it."""
    _require_partition(groups, rows, inner, cols, partition, num_tiles)
    return _hooks.matmul_rhs_mapping(groups, rows, inner, cols, partition.as_tuple(), num_tiles)


def matmul_output_mapping(
    groups: int, rows: int, inner: int, cols: int, partition: MatmulPartition, num_tiles: int
) -> TileMapping:
    """Mapping of the output [G, M, N]: each block spread over the gK tiles reducing it."""
    _require_partition(groups, rows, inner, cols, partition, num_tiles)
    return _hooks.matmul_output_mapping(
        groups, rows, inner, cols, partition.as_tuple(), num_tiles
    )


def bias_tile_mapping(activation: TileMapping, activation_shape: Sequence[int]) -> TileMapping:
    """Map a bias over the channels (last axis) of an activation, following the activation.

    Bias element c goes to the tile holding the most elements of channel c in ``activation``
    (ties to the lowest tile), so adding the bias needs little exchange. The result has as
    many tiles as ``activation``.
    """
    shape = _require_shape("activation_shape", activation_shape)
    if not shape:
        raise TargetError("activation_shape must have at least one axis (the channels)")
    if not isinstance(activation, list) or not activation:
        raise TargetError("activation must be a non-empty list with one entry per tile")
    return _call(
        "bias_tile_mapping: activation", _hooks.bias_tile_mapping, activation, prod(shape),
        shape[-1],
    )


def sliceable_table_mapping(
    num_entries: int, embedding_size: int, num_tiles: int, grain_size: int = 1
) -> TileMapping:
    """Map a table [num_entries, embedding_size] that is sliced along axis 0 (a lookup).

    Columns are cut into ranges (whole grains of ``grain_size``) spread over tiles, each range
    holding its columns of every row, so that a lookup of any row reads from all used tiles
    in parallel; rows are also cut when column ranges leave tiles idle.
    """
    _require_int("num_entries", num_entries, 0)
    _require_int("embedding_size", embedding_size, 0)
    _require_int("num_tiles", num_tiles, 1)
    _require_int("grain_size", grain_size, 1)
    if num_entries * embedding_size > MAX_ELEMENTS:
        raise TargetError(f"table [{num_entries}, {embedding_size}] has too many elements")
    return _hooks.sliceable_table_mapping(num_entries, embedding_size, num_tiles, grain_size)


@dataclass(frozen=True, eq=False)
class TileIntervalArrays:
    """A tile mapping as two int64 arrays, for mappings with millions of intervals.

    Tile ``t`` holds the rows ``intervals[tile_starts[t]:tile_starts[t + 1]]``, each a
    half-open ``(begin, end)`` pair: Poplar's format without one Python tuple per interval.
    """

    tile_starts: np.ndarray
    intervals: np.ndarray

    @property
    def num_tiles(self) -> int:
        return len(self.tile_starts) - 1

    def tile(self, tile: int) -> np.ndarray:
        """The ``(begin, end)`` rows of one tile."""
        return self.intervals[self.tile_starts[tile]:self.tile_starts[tile + 1]]

    def to_lists(self) -> TileMapping:
        """The same mapping as lists of tuples (Poplar's format, as the other hooks return)."""
        pairs = [(int(begin), int(end)) for begin, end in self.intervals.tolist()]
        starts = self.tile_starts.tolist()
        return [pairs[starts[t]:starts[t + 1]] for t in range(self.num_tiles)]


def sliceable_table_arrays(
    num_entries: int, embedding_size: int, num_tiles: int, grain_size: int = 1
) -> TileIntervalArrays:
    """:func:`sliceable_table_mapping` as arrays.

    A real embedding table cut by columns has one interval per row and tile (about 6 million
    for a 30522 x 768 vocabulary), too many to hold as Python tuples.
    """
    _require_int("num_entries", num_entries, 0)
    _require_int("embedding_size", embedding_size, 0)
    _require_int("num_tiles", num_tiles, 1)
    _require_int("grain_size", grain_size, 1)
    if num_entries * embedding_size > MAX_ELEMENTS:
        raise TargetError(f"table [{num_entries}, {embedding_size}] has too many elements")
    starts, intervals = _hooks.sliceable_table_mapping_arrays(
        num_entries, embedding_size, num_tiles, grain_size
    )
    return TileIntervalArrays(starts, intervals)


def choose_elementwise_output(inputs: Sequence[TileMapping], num_elements: int) -> int:
    """Index of the input whose mapping an elementwise output is cloned from.

    Poplibs' preference: the smallest maximum of elements on one tile, then the most tiles
    occupied, then the fewest contiguous regions, then the lowest index.
    """
    _require_int("num_elements", num_elements, 0)
    if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence) or not inputs:
        raise TargetError("inputs must be a non-empty sequence of tile mappings")
    for index, mapping in enumerate(inputs):
        if not isinstance(mapping, list) or not mapping:
            raise TargetError(f"inputs[{index}] must be a non-empty list with one entry per tile")
    return _call(
        "choose_elementwise_output: inputs", _hooks.choose_elementwise_output, list(inputs),
        num_elements,
    )


# -- the same layouts as per-element tile arrays (tile_array_bindings.cpp) ------------------
def tile_id_dtype(num_tiles: int) -> np.dtype:
    """The narrowest tile-id type (as ``ir.tile_mapping.tile_dtype``): int16 up to 32,767."""
    return np.dtype(np.int16 if num_tiles <= np.iinfo(np.int16).max else np.int32)


def _empty_tiles(num_elements: int, num_tiles: int) -> np.ndarray:
    return np.empty(num_elements, dtype=tile_id_dtype(num_tiles))


def matmul_operand_tiles(
    groups: int, rows: int, inner: int, cols: int, partition: MatmulPartition, num_tiles: int,
    operand: str,
) -> np.ndarray:
    """Each element's tile in :func:`matmul_lhs_mapping` (``operand`` "lhs"),
    :func:`matmul_rhs_mapping` ("rhs") or :func:`matmul_output_mapping` ("output"), filled
    in C++: the same layout without a Python tuple per interval."""
    _require_partition(groups, rows, inner, cols, partition, num_tiles)
    sizes = {"lhs": (groups, rows, inner), "rhs": (groups, inner, cols),
             "output": (groups, rows, cols)}
    if operand not in sizes:
        raise TargetError(f"matmul operand must be lhs, rhs or output, got {operand!r}")
    out = _empty_tiles(prod(sizes[operand]), num_tiles)
    _call(f"matmul {operand} tiles", _hooks.fill_matmul_tiles, out, groups, rows, inner, cols,
          partition.as_tuple(), num_tiles, operand)
    return out


def sliceable_table_tiles(
    num_entries: int, embedding_size: int, num_tiles: int, grain_size: int = 1
) -> np.ndarray:
    """Each element's tile in :func:`sliceable_table_mapping`, filled in C++ (a real
    vocabulary has millions of intervals)."""
    _require_int("num_entries", num_entries, 0)
    _require_int("embedding_size", embedding_size, 0)
    _require_int("num_tiles", num_tiles, 1)
    _require_int("grain_size", grain_size, 1)
    if num_entries * embedding_size > MAX_ELEMENTS:
        raise TargetError(f"table [{num_entries}, {embedding_size}] has too many elements")
    out = _empty_tiles(num_entries * embedding_size, num_tiles)
    _call("sliceable table tiles", _hooks.fill_sliceable_tiles, out, num_entries,
          embedding_size, num_tiles, grain_size)
    return out


def linear_tiles(
    num_elements: int, num_tiles: int, grain_size: int = 1, min_elements_per_tile: int = 0,
    start_tile: int = 0,
) -> tuple[np.ndarray, int]:
    """Each element's tile in :func:`linear_tile_mapping`, and how many tiles it uses (what
    PopART's rotating linear mapper advances by)."""
    _require_linear(num_elements, num_tiles, grain_size, min_elements_per_tile, start_tile)
    out = _empty_tiles(num_elements, num_tiles)
    used = _call("linear tiles", _hooks.fill_linear_tiles, out, num_elements, num_tiles,
                 grain_size, min_elements_per_tile, start_tile)
    return out, used


def poplar_mapping(tiles: np.ndarray, num_tiles: int) -> TileMapping:
    """Poplar's format of a per-element tile array: per tile, its maximal runs of
    consecutive elements as ``(begin, end)`` in order (as ``ir.tile_mapping.tile_mapping``,
    built in C++: a real embedding table has millions of runs). TargetError if an id is
    outside ``[0, num_tiles)``."""
    return _call("poplar mapping", _hooks.poplar_mapping, _tile_ids(tiles, num_tiles),
                 num_tiles)


def _tile_ids(tiles: np.ndarray, num_tiles: int) -> np.ndarray:
    """Flat contiguous int16 or int32 ids (what the C++ side reads), checked in range when
    they had to be converted (the C++ side checks the others)."""
    _require_int("num_tiles", num_tiles, 1)
    flat = np.ascontiguousarray(np.asarray(tiles).reshape(-1))
    if flat.dtype in (np.int16, np.int32):
        return flat
    if flat.dtype.kind not in "iu":
        raise TargetError(f"tile ids must be integers, got an array of {flat.dtype}")
    if flat.size and (flat.min() < 0 or flat.max() >= num_tiles):
        raise TargetError(f"tile ids must lie in [0, {num_tiles}); got "
                          f"[{int(flat.min())}, {int(flat.max())}]")
    return flat.astype(tile_id_dtype(num_tiles))


def tile_counts(tiles: np.ndarray, num_tiles: int) -> np.ndarray:
    """How many elements of a tile-id array lie on each tile: ``np.bincount`` with
    ``minlength=num_tiles``, counted in C++ without widening 16-bit ids to 64 bits first.
    TargetError if an id is outside ``[0, num_tiles)``."""
    return _call("tile counts", _hooks.tile_counts, _tile_ids(tiles, num_tiles), num_tiles)


def block_reader_counts(tiles: np.ndarray, blocks: np.ndarray, block_starts: np.ndarray,
                        tile_block: np.ndarray, num_blocks: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For an operand laid out as ``tiles`` whose element e lies in block ``blocks[e]``
    (int32; ``block_starts`` marks where blocks begin in flat order) and read by tiles as
    ``tile_block`` (int64, -1 for none): the runs (consecutive elements, one tile) of each
    block, and the elements and runs each tile already holds of the block it reads. The
    counts ``TileTarget.matmul_readers`` needs, in one pass instead of eight array ones."""
    return _call("block reader counts", _hooks.block_reader_counts,
                 _tile_ids(tiles, max(len(tile_block), 1)), blocks, block_starts, tile_block,
                 num_blocks)
