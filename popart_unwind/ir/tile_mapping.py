"""Two forms of one layout: Poplar's per-tile interval lists and a per-element tile array.

Poplar's format (per tile, half-open intervals of the row-major flattened tensor) is what
plans are written in; the planner and the cost model compute on a flat array holding each
element's tile, where views are numpy views and comparisons are vectorised. Conversions are
exact both ways and validate: every element on exactly one tile, tile ids in range.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import PlanError

TileMapping = list[list[tuple[int, int]]]


def tile_dtype(num_tiles: int) -> np.dtype:
    """The narrowest integer type that holds tile ids (int16 up to 32,767 tiles)."""
    return np.dtype(np.int16 if num_tiles <= np.iinfo(np.int16).max else np.int32)


def tile_array(mapping: TileMapping, num_elements: int, num_tiles: int, what: str = "tensor"
               ) -> np.ndarray:
    """Each element's tile, from a Poplar-format mapping; PlanError naming ``what`` unless
    the mapping has at most ``num_tiles`` tiles and covers each element exactly once."""
    if len(mapping) > num_tiles:
        raise PlanError(f"{what}: mapping has {len(mapping)} tiles, the target {num_tiles}")
    counts = [len(intervals) for intervals in mapping]
    pairs = np.array([pair for intervals in mapping for pair in intervals],
                     dtype=np.int64).reshape(-1, 2)
    owners = np.repeat(np.arange(len(mapping)), counts)
    return tiles_from_intervals(pairs, owners, num_elements, num_tiles, what)


def tiles_from_intervals(pairs: np.ndarray, owners: np.ndarray, num_elements: int,
                         num_tiles: int, what: str = "tensor") -> np.ndarray:
    """Each element's tile from (begin, end) rows and the tile owning each row, checking
    that the non-empty rows tile [0, num_elements) exactly."""
    begins, ends = pairs[:, 0], pairs[:, 1]
    bad = (begins < 0) | (ends < begins) | (ends > num_elements)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise PlanError(f"{what}: interval [{begins[row]}, {ends[row]}) on tile "
                        f"{owners[row]} is outside [0, {num_elements})")
    keep = ends > begins
    begins, ends, owners = begins[keep], ends[keep], owners[keep]
    order = np.argsort(begins, kind="stable")
    begins, ends, owners = begins[order], ends[order], owners[order]
    gaps = np.flatnonzero(np.concatenate(([0], ends[:-1])) != begins)
    if gaps.size or (begins.size and ends[-1] != num_elements) or \
            (not begins.size and num_elements):
        where = int(begins[gaps[0]]) if gaps.size else 0
        raise PlanError(f"{what}: elements are mapped twice or to no tile near element "
                        f"{where} (intervals must cover [0, {num_elements}) exactly once)")
    return np.repeat(owners.astype(tile_dtype(num_tiles)), ends - begins)


def tile_mapping(tiles: np.ndarray, num_tiles: int) -> TileMapping:
    """Poplar's format from each element's tile: per tile, its maximal runs in order.

    Built from whole-array operations: an embedding table split by columns has millions of
    runs."""
    flat = np.asarray(tiles).reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= num_tiles):
        raise PlanError(f"tile ids must lie in [0, {num_tiles}); got "
                        f"[{int(flat.min())}, {int(flat.max())}]")
    mapping: TileMapping = [[] for _ in range(num_tiles)]
    if not flat.size:
        return mapping
    starts = np.concatenate(([0], np.flatnonzero(np.diff(flat)) + 1))
    ends = np.append(starts[1:], flat.size)
    run_tiles = flat[starts]
    order = np.argsort(run_tiles, kind="stable")
    bounds = np.searchsorted(run_tiles[order], np.arange(num_tiles + 1))
    begin_list, end_list = starts[order].tolist(), ends[order].tolist()
    for tile in np.flatnonzero(np.diff(bounds)).tolist():
        low, high = int(bounds[tile]), int(bounds[tile + 1])
        mapping[tile] = list(zip(begin_list[low:high], end_list[low:high], strict=True))
    return mapping
