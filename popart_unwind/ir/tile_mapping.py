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
    tiles = np.full(num_elements, -1, dtype=tile_dtype(num_tiles))
    covered = 0
    for tile, intervals in enumerate(mapping):
        for begin, end in intervals:
            if not 0 <= begin <= end <= num_elements:
                raise PlanError(f"{what}: interval [{begin}, {end}) on tile {tile} is outside "
                                f"[0, {num_elements})")
            if end > begin and (tiles[begin:end] != -1).any():
                raise PlanError(f"{what}: an element of [{begin}, {end}) is mapped twice")
            tiles[begin:end] = tile
            covered += end - begin
    if covered != num_elements:
        missing = int(np.flatnonzero(tiles == -1)[0])
        raise PlanError(f"{what}: element {missing} is on no tile")
    return tiles


def tile_mapping(tiles: np.ndarray, num_tiles: int) -> TileMapping:
    """Poplar's format from each element's tile: maximal runs, grouped by tile in order."""
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
    for index in np.argsort(run_tiles, kind="stable"):
        mapping[int(run_tiles[index])].append((int(starts[index]), int(ends[index])))
    return mapping
