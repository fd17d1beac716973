"""Python face of the C++ layout hooks (``popart_unwind._hooks``).

Each layout hook takes the IPU Model's ``TileParams`` for the tensor's dtype; the fill hooks
write a flat array of tile ids, one per element, in the machine's tile dtype (at real model
sizes a Python object per element or per interval is what costs), and ``plan_matmul`` gives a
matmul's splits. The counting kernels take tile arrays and a tile count. A C++
``ValueError`` becomes a :class:`~popart_unwind.errors.TargetError` naming what was asked.
The rules each hook follows, and the public facts they rest on, are in docs/ipu-model.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from popart_unwind import _hooks
from popart_unwind.errors import TargetError
from popart_unwind.ir.tile_mapping import tile_dtype
from popart_unwind.machine import count_memo
from popart_unwind.machine.interface import MATMUL_OPERANDS, MatmulCost, MatmulPartition

_T = TypeVar("_T")
#: Most elements (and matmul work G*M*K*N) a hook is asked for: sizes stay far from 64-bit
#: overflow inside C++.
MAX_ELEMENTS = 2**62


def _call(what: str, hook: Callable[..., _T], *args: object) -> _T:
    try:
        return hook(*args)
    except ValueError as error:
        raise TargetError(f"{what}: {error}") from error


def _tiles_for(num_elements: int, params: _hooks.TileParams) -> np.ndarray:
    if num_elements > MAX_ELEMENTS:
        raise TargetError(f"a layout of {num_elements} elements is too large (at most 2**62)")
    return np.empty(num_elements, dtype=tile_dtype(params.num_tiles))


def linear_tiles(params: _hooks.TileParams, num_elements: int,
                 start_tile: int) -> tuple[np.ndarray, int]:
    """Poplibs' linear mapping of ``num_elements`` elements rotated to start on
    ``start_tile``, and the number of tiles it uses (what PopART's mapper advances by)."""
    out = _tiles_for(num_elements, params)
    used = _call("linear mapping", _hooks.fill_linear_tiles, out, params, start_tile)
    return out, used


def plan_matmul(params: _hooks.TileParams, dims: tuple[int, int, int, int]) -> MatmulPartition:
    """The cheapest partition of the grouped matmul ``dims`` (G, M, K, N)."""
    return MatmulPartition(*_call("matmul plan", _hooks.plan_matmul, params, dims))


def matmul_candidates(params: _hooks.TileParams, cube: tuple[int, int, int, int],
                      passes: tuple[tuple[int, int, int], ...],
                      count: int) -> list[MatmulPartition]:
    """The ``count`` partitions of ``cube`` with the fewest cycles summed over ``passes``
    (each the cube axes, 0: M, 1: K, 2: N, of a pass's rows, inner axis and columns)."""
    return [MatmulPartition(*splits) for splits in
            _call("matmul candidates", _hooks.matmul_candidates, params, cube, list(passes),
                  count)]


def matmul_cost(params: _hooks.TileParams, dims: tuple[int, int, int, int],
                partition: MatmulPartition, shared: str = "rhs") -> MatmulCost:
    """What the grouped matmul ``dims`` costs cut as ``partition`` (``shared``: the operand
    read over shared exchange buses, "lhs", "rhs" or "none")."""
    return MatmulCost(*_call("matmul cost", _hooks.matmul_cost, params, dims,
                             partition.as_tuple(), shared))


def matmul_tiles(params: _hooks.TileParams, dims: tuple[int, int, int, int],
                 plan: MatmulPartition, operand: str) -> np.ndarray:
    """Each element's tile of matmul ``operand`` ("lhs", "rhs" or "output") under ``plan``."""
    groups, rows, inner, cols = dims
    sizes = {"lhs": groups * rows * inner, "rhs": groups * inner * cols,
             "output": groups * rows * cols}
    if operand not in MATMUL_OPERANDS:
        raise TargetError(f"matmul operand must be one of {MATMUL_OPERANDS}, got {operand!r}")
    out = _tiles_for(sizes[operand], params)
    _call(f"matmul {operand} layout", _hooks.fill_matmul_tiles, out, params, dims,
          plan.as_tuple(), operand)
    return out


def sliceable_tiles(params: _hooks.TileParams, num_rows: int, num_cols: int) -> np.ndarray:
    """Each element's tile of a [rows, cols] table sliced along its rows."""
    out = _tiles_for(num_rows * num_cols, params)
    _call("sliceable table layout", _hooks.fill_sliceable_tiles, out, params, num_rows,
          num_cols)
    return out


#: Up to this many ids ``tile_counts`` counts with ``np.bincount``, which widens them to 64
#: bits (32 MB at most here) but counts in about half the hook's time.
BINCOUNT_IDS_MAX = 1 << 22


def tile_counts(tiles: np.ndarray, num_tiles: int) -> np.ndarray:
    """How many elements of a tile-id array lie on each tile: ``np.bincount`` with
    ``minlength=num_tiles``; a large array counted in C++ without widening 16-bit ids to
    64 bits first. TargetError if an id is outside ``[0, num_tiles)``. Inside
    ``count_memo.remembered_counts()`` (a cost walk) the same ids are counted once, and
    the counts are read-only."""
    ids = _tile_ids(tiles, num_tiles)
    memo = count_memo.active()
    if memo is not None:
        return memo.counts(ids, num_tiles, _counted)
    return _counted(ids, num_tiles)


def _counted(ids: np.ndarray, num_tiles: int) -> np.ndarray:
    """``tile_counts`` of flat contiguous ids, counted."""
    if ids.size <= BINCOUNT_IDS_MAX and (
            not ids.size or (int(ids.min()) >= 0 and int(ids.max()) < num_tiles)):
        return np.bincount(ids, minlength=num_tiles).astype(np.int64, copy=False)
    return _call("tile counts", _hooks.tile_counts, ids, num_tiles)


def run_count(tiles: np.ndarray) -> int:
    """How many maximal runs of equal ids a flat tile-id array has (0 when empty): one
    pass in C++ for 16- and 32-bit ids, ``np.diff``'s nonzeros plus one for others."""
    flat = np.ascontiguousarray(np.asarray(tiles).reshape(-1))
    if not flat.size:
        return 0
    if flat.dtype in (np.int16, np.int32):
        return int(_hooks.run_count(flat))
    return int(np.count_nonzero(flat[1:] != flat[:-1])) + 1


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


def grid_reader_counts(tiles: np.ndarray, axis_parts: Sequence[np.ndarray],
                       splits: Sequence[int], tile_block: np.ndarray, num_blocks: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``block_reader_counts`` for an [A, B, C] operand cut into ``splits`` parts per axis:
    ``axis_parts`` gives each axis's part per index (int64), so element (i, j, k) lies in
    block ``(a[i] * splits[1] + b[j]) * splits[2] + c[k]``. No per-element block array is
    made (a matmul operand of 67 M elements would need 335 MB of them)."""
    a, b, c = (np.ascontiguousarray(parts, dtype=np.int64) for parts in axis_parts)
    return _call("grid reader counts", _hooks.grid_reader_counts,
                 _tile_ids(tiles, max(len(tile_block), 1)), a, b, c, int(splits[1]),
                 int(splits[2]), tile_block, num_blocks)


def _tile_ids(tiles: np.ndarray, num_tiles: int) -> np.ndarray:
    """Flat contiguous int16 or int32 ids (what the C++ side reads), checked in range when
    they had to be converted (the C++ side checks the others)."""
    flat = np.ascontiguousarray(np.asarray(tiles).reshape(-1))
    if flat.dtype in (np.int16, np.int32):
        return flat
    if flat.dtype.kind not in "iu":
        raise TargetError(f"tile ids must be integers, got an array of {flat.dtype}")
    if flat.size and (flat.min() < 0 or flat.max() >= num_tiles):
        raise TargetError(f"tile ids must lie in [0, {num_tiles}); got "
                          f"[{int(flat.min())}, {int(flat.max())}]")
    return flat.astype(tile_dtype(num_tiles))
