"""Tensor layouts in a few hundred characters, for the page's script to draw as SVG.

A layout is drawn as a tiles × elements map: the flat tensor in at most ``ELEMENT_BINS``
bins of consecutive elements, the tiles either plan uses in at most ``TILE_BINS`` bins,
and in each cell the share of the element bin's elements held by that bin of tiles,
rounded up to one of ``LEVELS`` levels (0: none). The cells are sent column by column
(element bin by element bin, tiles upwards), run-length encoded: a letter ``a``–``j`` for
the level, followed by the run's length when it is more than one (``a40c2`` is 40 empty
cells then two of level 2). Binning loses detail on tensors larger than the grid; the
page says which tiles and elements a cell covers.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

ELEMENT_BINS = 64
TILE_BINS = 48
LEVELS = 9
#: Most characters one tensor's drawings (every plan's together) may take: a finer grid
#: that needs more is halved until it fits, which bounds the page's size per tensor.
DRAWING_BUDGET = 2400


def frame(layouts: Mapping[str, np.ndarray], numel: int, num_tiles: int,
          element_bins: int = ELEMENT_BINS, tile_bins: int = TILE_BINS
          ) -> tuple[int, int, int, int]:
    """(first tile, last tile + 1, element bins, tile bins) shared by every plan's drawing
    of one tensor: the tiles span those any plan uses."""
    used = [np.asarray(t).reshape(-1) for t in layouts.values() if np.size(t)]
    first = min((int(t.min()) for t in used), default=0)
    end = max((int(t.max()) + 1 for t in used), default=num_tiles)
    return first, end, max(1, min(numel, element_bins)), max(1, min(end - first, tile_bins))


def levels(tiles: np.ndarray, first: int, end: int, element_bins: int, tile_bins: int
           ) -> np.ndarray:
    """[element_bins, tile_bins] integer levels 0..LEVELS: the share of each element bin's
    elements on each bin of tiles, rounded up (any element at all is level 1 or more)."""
    flat = np.asarray(tiles).reshape(-1).astype(np.int64)
    if flat.size == 0:
        return np.zeros((element_bins, tile_bins), np.int64)
    # element i falls in bin floor(i * bins / n)
    column = np.arange(flat.size, dtype=np.int64) * element_bins // flat.size
    row = (flat - first) * tile_bins // (end - first)
    counts = np.bincount(column * tile_bins + row, minlength=element_bins * tile_bins)
    counts = counts.reshape(element_bins, tile_bins)
    per_column = np.bincount(column, minlength=element_bins).reshape(-1, 1)
    return (counts * LEVELS + per_column - 1) // np.maximum(per_column, 1)


def run_length(cells: np.ndarray) -> str:
    """The cells (row-major) as runs: a level's letter, then its count when above one."""
    flat = np.asarray(cells).reshape(-1)
    if flat.size == 0:
        return ""
    starts = np.flatnonzero(np.r_[True, flat[1:] != flat[:-1]])
    lengths = np.diff(np.r_[starts, flat.size])
    return "".join(chr(97 + int(flat[s])) + (str(int(n)) if n > 1 else "")
                   for s, n in zip(starts, lengths, strict=True))


def decode(text: str, size: int) -> np.ndarray:
    """The inverse of :func:`run_length` (the page's script does the same)."""
    values: list[int] = []
    i = 0
    while i < len(text):
        level = ord(text[i]) - 97
        j = i + 1
        while j < len(text) and text[j].isdigit():
            j += 1
        values += [level] * (int(text[i + 1:j]) if j > i + 1 else 1)
        i = j
    if len(values) != size:
        raise ValueError(f"{len(values)} cells encoded, {size} expected")
    return np.array(values, np.int64)


def encoded_layouts(layouts: Mapping[str, np.ndarray], numel: int, num_tiles: int
                    ) -> dict[str, object]:
    """The drawing of one tensor under each plan: its frame, and per plan the tiles it
    uses and its encoded cells (on the finest grid within ``DRAWING_BUDGET``)."""
    bins = (ELEMENT_BINS, TILE_BINS)
    used = {plan: int(np.count_nonzero(np.bincount(np.asarray(tiles).reshape(-1))))
            if np.size(tiles) else 0 for plan, tiles in layouts.items()}
    while True:
        first, end, element_bins, tile_bins = frame(layouts, numel, num_tiles, *bins)
        cells = {plan: run_length(levels(tiles, first, end, element_bins, tile_bins))
                 for plan, tiles in layouts.items()}
        if sum(map(len, cells.values())) <= DRAWING_BUDGET or bins == (1, 1):
            break
        bins = (max(1, bins[0] // 2), max(1, bins[1] // 2))
    return {"frame": [first, end, element_bins, tile_bins, numel],
            "plans": {plan: [used[plan], cells[plan]] for plan in layouts}}
