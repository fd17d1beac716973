"""Two forms of one layout: Poplar's per-tile interval lists and a per-element tile array.

Poplar's format (per tile, half-open intervals of the row-major flattened tensor) is what
plans are written in; the planner and the cost model compute on a flat array holding each
element's tile, where views are numpy views and comparisons are vectorised. Conversions are
exact both ways and validate: every element on exactly one tile, tile ids in range.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from popart_unwind import _hooks
from popart_unwind.errors import PlanError

TileMapping = list[list[tuple[int, int]]]


def tile_dtype(num_tiles: int) -> np.dtype:
    """The narrowest integer type that holds tile ids (int16 up to 32,767 tiles)."""
    return np.dtype(np.int16 if num_tiles <= np.iinfo(np.int16).max else np.int32)


def tile_array(mapping: TileMapping | TileIntervals, num_elements: int, num_tiles: int,
               what: str = "tensor") -> np.ndarray:
    """Each element's tile, from a Poplar-format mapping; PlanError naming ``what`` unless
    the mapping has at most ``num_tiles`` tiles and covers each element exactly once. A
    ``TileIntervals`` that keeps its tile array gives that array (read-only), not a copy."""
    if len(mapping) > num_tiles:
        raise PlanError(f"{what}: mapping has {len(mapping)} tiles, the target {num_tiles}")
    if isinstance(mapping, TileIntervals):
        if mapping.tiles is not None:  # kept as a tile array: checked when it was made
            if mapping.tiles.size != num_elements:
                raise PlanError(f"{what}: the mapping covers {mapping.tiles.size} elements "
                                f"(intervals must cover [0, {num_elements}) exactly once)")
            return mapping.tiles.astype(tile_dtype(num_tiles), copy=False)
        pairs, owners = mapping.owners()
        return tiles_from_intervals(pairs, owners, num_elements, num_tiles, what)
    counts = [len(intervals) for intervals in mapping]
    pairs = np.array([pair for intervals in mapping for pair in intervals],
                     dtype=np.int64).reshape(-1, 2)
    owners = np.repeat(np.arange(len(mapping)), counts)
    return tiles_from_intervals(pairs, owners, num_elements, num_tiles, what)


def read_only_tiles(mapping: TileMapping | TileIntervals, num_elements: int, num_tiles: int,
                    what: str = "tensor") -> np.ndarray:
    """``tile_array``, read-only: what a held layout hands its readers, none of which may
    change the plan through it."""
    tiles = tile_array(mapping, num_elements, num_tiles, what)
    tiles.flags.writeable = False
    return tiles


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


def tile_mapping(tiles: np.ndarray, num_tiles: int) -> TileIntervals:
    """Poplar's format from each element's tile: per tile, its maximal runs in order.

    Built from whole-array operations: an embedding table split by columns has millions of
    runs."""
    return TileIntervals.from_tiles(tiles, num_tiles)


class TileIntervals(Sequence):
    """Poplar's format — per tile, the ``(begin, end)`` runs it holds, in order — kept in
    three integer arrays instead of one Python tuple per run: the layouts of a real model
    have tens of millions of runs, gigabytes as tuples. Immutable; indexing a tile gives its
    runs as a list of tuples, and it compares equal to the same mapping as nested lists.

    ``from_tiles`` keeps whichever form is smaller: the runs (8 bytes each), or, when a
    layout has more runs than a quarter of its elements (an embedding table split by
    columns: about one run per two elements), the read-only tile array itself (2 bytes an
    element), from which the runs are built on first use and then kept."""

    __slots__ = ("_begins_", "_bounds_", "_ends_", "_num_runs", "_num_tiles", "_tiles")

    def __init__(self, bounds: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> None:
        """``begins[bounds[t]:bounds[t + 1]]`` and the same slice of ``ends`` are tile t's
        runs."""
        self._tiles: np.ndarray | None = None
        self._set_runs(bounds, begins, ends)
        self._num_tiles = self._bounds_.size - 1
        self._num_runs = int(self._begins_.size)

    def _set_runs(self, bounds: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> None:
        self._bounds_ = np.asarray(bounds, dtype=np.int64)
        ends = np.asarray(ends)
        narrow = np.int32 if not ends.size or int(ends.max()) <= np.iinfo(np.int32).max \
            else np.int64  # half the memory for any tensor under 2**31 elements
        self._begins_ = np.asarray(begins, dtype=narrow)
        self._ends_ = np.asarray(ends, dtype=narrow)
        for array in (self._bounds_, self._begins_, self._ends_):
            array.flags.writeable = False

    @classmethod
    def from_tiles(cls, tiles: np.ndarray, num_tiles: int) -> TileIntervals:
        """Each tile's maximal runs, counted and placed in C++ (``_hooks.tile_runs``): an
        embedding table has tens of millions of runs, and numpy's way (run starts, a stable
        argsort by tile, gathers) made several 64-bit arrays of that length. A layout whose
        runs, with their index of 8 bytes a tile, would take more bytes than its tile array
        keeps the array instead (not copied when it is read-only already): a [4, 8] tensor
        on 1,472 tiles takes 64 bytes so, 11.8 KB as runs."""
        flat = np.ascontiguousarray(np.asarray(tiles).reshape(-1))
        if flat.dtype.kind not in "iu":
            raise PlanError(f"tile ids must be integers, got an array of {flat.dtype}")
        if flat.size and (flat.min() < 0 or flat.max() >= num_tiles):
            raise PlanError(f"tile ids must lie in [0, {num_tiles}); got "
                            f"[{int(flat.min())}, {int(flat.max())}]")
        if flat.dtype not in (np.int16, np.int32):
            flat = flat.astype(tile_dtype(num_tiles))
        num_runs = _hooks.run_count(flat)
        offset_bytes = 4 if flat.size <= np.iinfo(np.int32).max else 8
        if 2 * offset_bytes * num_runs + 8 * (num_tiles + 1) <= flat.nbytes:
            return cls(*_hooks.tile_runs(flat, num_tiles))
        made = cls.__new__(cls)
        made._bounds_ = made._begins_ = made._ends_ = None
        if flat.flags.writeable:
            flat = flat.copy()  # the caller may change its own array later
        flat.flags.writeable = False
        made._tiles, made._num_tiles, made._num_runs = flat, num_tiles, num_runs
        return made

    @property
    def _bounds(self) -> np.ndarray:
        if self._bounds_ is None:
            self._runs()
        return self._bounds_

    @property
    def _begins(self) -> np.ndarray:
        if self._begins_ is None:
            self._runs()
        return self._begins_

    @property
    def _ends(self) -> np.ndarray:
        if self._ends_ is None:
            self._runs()
        return self._ends_

    def _runs(self) -> None:
        """Build the runs from the kept tile array, once (same runs as ``from_tiles``)."""
        self._set_runs(*_hooks.tile_runs(self._tiles, self._num_tiles))

    @property
    def tiles(self) -> np.ndarray | None:
        """The read-only tile array kept instead of the runs, or None if the runs are kept."""
        return self._tiles

    @property
    def num_elements(self) -> int:
        """How many elements the runs cover (they cover ``[0, num_elements)``)."""
        if self._tiles is not None:
            return int(self._tiles.size)
        return int(self._ends.max()) if self._ends.size else 0

    def __len__(self) -> int:
        return self._num_tiles

    def __getitem__(self, tile: int | slice) -> list:
        """Tile ``tile``'s runs (a list of lists for a slice), indexed as a list is."""
        if isinstance(tile, slice):
            return [self[t] for t in range(*tile.indices(len(self)))]
        tile = range(len(self))[tile]  # negative indices and IndexError as for lists
        low, high = int(self._bounds[tile]), int(self._bounds[tile + 1])
        return list(zip(self._begins[low:high].tolist(), self._ends[low:high].tolist(),
                        strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TileIntervals):
            if self._tiles is not None and other._tiles is not None:
                # one tile array gives one set of runs: compare without building them
                return (self._num_tiles == other._num_tiles
                        and np.array_equal(self._tiles, other._tiles))
            if len(self) != len(other) or self._num_runs != other._num_runs:
                return False
            return (np.array_equal(self._bounds, other._bounds)
                    and np.array_equal(self._begins, other._begins)
                    and np.array_equal(self._ends, other._ends))
        if not isinstance(other, Sequence) or isinstance(other, str | bytes) \
                or len(other) != len(self):
            return False
        try:
            return all(self[t] == [(int(b), int(e)) for b, e in other[t]]
                       for t in range(len(self)))
        except (TypeError, ValueError):
            return False

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"TileIntervals({len(self)} tiles, {self._num_runs} runs)"

    @property
    def num_runs(self) -> int:
        return self._num_runs

    def __iter__(self) -> Iterator[list]:
        """Each tile's runs in turn, from one conversion of the arrays (indexing tile by
        tile costs a numpy slice each: minutes for thousands of tensors on 1472 tiles)."""
        return iter(self.to_lists())

    def to_lists(self) -> TileMapping:
        """The same mapping as nested Python lists (for JSON)."""
        lists: TileMapping = [[] for _ in range(len(self))]
        for tile, runs in self.held():
            lists[tile] = runs
        return lists

    def held(self) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """(tile, its runs) for each tile holding any, in tile order: a small tensor on a
        big machine leaves most tiles empty. A kept tile array's runs are made for the
        call, not kept (they would take more memory than the array)."""
        if self._bounds_ is None:
            bounds, begins, ends = _hooks.tile_runs(self._tiles, self._num_tiles)
        else:
            bounds, begins, ends = self._bounds_, self._begins_, self._ends_
        begins, ends = np.asarray(begins).tolist(), np.asarray(ends).tolist()
        for tile in np.flatnonzero(np.diff(bounds)).tolist():
            low, high = int(bounds[tile]), int(bounds[tile + 1])
            yield tile, list(zip(begins[low:high], ends[low:high], strict=True))

    def elements_per_tile(self, num_tiles: int) -> np.ndarray | None:
        """How many elements each of ``num_tiles`` tiles holds (int64), summed over the
        runs, or None when a tile array is kept instead of runs (count that)."""
        if self._bounds_ is None:
            return None
        covered = np.zeros(self._begins_.size + 1, np.int64)
        np.cumsum(self._ends_.astype(np.int64) - self._begins_, out=covered[1:])
        counts = np.zeros(max(num_tiles, len(self)), np.int64)
        counts[:len(self)] = covered[self._bounds_[1:]] - covered[self._bounds_[:-1]]
        return counts

    def run_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bounds, begins, ends), read-only and not copied: tile t's runs are
        ``begins[bounds[t]:bounds[t + 1]]`` and the same slice of ``ends`` (a writer
        taking a few tiles at a time slices them)."""
        return self._bounds, self._begins, self._ends

    def owners(self) -> tuple[np.ndarray, np.ndarray]:
        """((begin, end) rows, the tile of each row), without building tuples."""
        owners = np.repeat(np.arange(len(self)), np.diff(self._bounds))
        return np.stack([self._begins, self._ends], axis=1).astype(np.int64), owners


def held_layout(tiles: np.ndarray, num_tiles: int) -> np.ndarray | TileIntervals:
    """A layout in the form that takes less memory to keep: a small tile array as it is
    (read-only), a large one as ``TileIntervals``, whose per-tile index alone takes 8 bytes
    a tile."""
    tiles = np.asarray(tiles).reshape(-1)
    if tiles.nbytes <= 8 * (num_tiles + 1):
        kept = tiles.astype(tile_dtype(num_tiles), copy=False).view()
        kept.flags.writeable = False
        return kept
    return TileIntervals.from_tiles(tiles, num_tiles)


class ExpandedLayouts(Mapping):
    """Layouts held as ``held_layout`` keeps them (large ones as ``TileIntervals``), read as
    flat read-only tile arrays, expanded at each read: a plan of VGG-19 takes 288 MB as tile
    arrays, 17 MB as intervals. ``held`` is the layouts as held (what the cost model
    takes)."""

    def __init__(self, held: Mapping[tuple[str, str], np.ndarray | TileIntervals],
                 num_tiles: int) -> None:
        self.held = dict(held)
        self.num_tiles = num_tiles

    @classmethod
    def of_arrays(cls, mappings: Mapping[tuple[str, str], np.ndarray],
                  num_tiles: int) -> ExpandedLayouts:
        """Tile arrays (a baseline's plan) held as ``held_layout`` keeps each."""
        return cls({key: held_layout(tiles, num_tiles) for key, tiles in mappings.items()},
                   num_tiles)

    def __getitem__(self, key: tuple[str, str]) -> np.ndarray:
        layout = self.held[key]
        if not isinstance(layout, TileIntervals):
            return layout
        return read_only_tiles(layout, layout.num_elements, self.num_tiles, repr(key))

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.held)

    def __len__(self) -> int:
        return len(self.held)
