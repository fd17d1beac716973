"""The layouts a plan gives: every producer-less tensor's tiles, read from the plan's
mappings or the IR's own tile mappings, checked once, and expanded to one tile per
element only where an op reads them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ir.tile_mapping import TileIntervals, held_layout, tile_array
from popart_unwind.machine import count_memo
from popart_unwind.machine.hooks import tile_counts
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops.layout_rule import planned_shape

#: (graph id, tensor id) -> each element's tile: a flat array, or Poplar's intervals
#: (``TileIntervals``), which the walk expands only while an op reads them (our plan of
#: VGG-19 is 288 MB as tile arrays, 17 MB as intervals).
Mappings = Mapping[tuple[str, str], "np.ndarray | TileIntervals"]


def tile_bytes(tiles: np.ndarray, element_bytes: int, num_tiles: int) -> np.ndarray:
    """Bytes of a tensor on each tile."""
    return tile_counts(tiles, num_tiles) * element_bytes


def numel(tensor: Tensor) -> int:
    """Elements of ``tensor`` as planned (its planned shape)."""
    return prod(planned_shape(tensor))


def expanded(layout: np.ndarray | TileIntervals, size: int, num_tiles: int,
             what: str = "tensor") -> np.ndarray:
    """A layout as each element's tile."""
    if isinstance(layout, TileIntervals):
        return _from_intervals(layout, size, num_tiles, what)
    return layout


def _from_intervals(layout: TileIntervals, size: int, num_tiles: int,
                    what: str) -> np.ndarray:
    """``tile_array`` of intervals; inside a cost walk its tile counts, summed over the
    runs, are given to the walk's ``count_memo`` (each expansion is a new array, which
    would be counted again element by element)."""
    tiles = tile_array(layout, size, num_tiles, what)
    memo = count_memo.active()
    if memo is not None and (counts := layout.elements_per_tile(num_tiles)) is not None:
        memo.know(tiles, num_tiles, counts)
    return tiles


#: A layout of at least this many elements is held as intervals between the ops that read
#: it, and an op's rule expands it at each read instead of once for the whole op: a
#: [8192, 8192] matmul's two operands, its output and the plan's wanted layouts are 128 MB
#: each as tile arrays, and holding them all at once was most of planning's peak.
HELD_AS_INTERVALS = 1 << 24


def held(layout: np.ndarray | TileIntervals, num_tiles: int) -> np.ndarray | TileIntervals:
    """A computed layout as the walk keeps it until its last reader: a large tile array as
    intervals (``HELD_AS_INTERVALS``), anything else as it is."""
    if isinstance(layout, np.ndarray) and layout.size >= HELD_AS_INTERVALS:
        return held_layout(layout, num_tiles)
    return layout


class ReadOnDemand(Sequence):
    """An op's input (or result) layouts by index, as its rule reads them: a large layout
    held as intervals is expanded at each read and dropped when the rule lets it go, so
    the rule's steps over one input at a time never hold every input expanded at once (the
    price: an expansion per read). Small layouts are expanded once."""

    def __init__(self, values: Sequence[np.ndarray | TileIntervals | None],
                 sizes: Sequence[int], num_tiles: int, names: Sequence[str]) -> None:
        self._values = [
            value if value is None or (isinstance(value, TileIntervals) and value.tiles is None
                                       and size >= HELD_AS_INTERVALS)
            else expanded(value, size, num_tiles, name)
            for value, size, name in zip(values, sizes, names, strict=True)]
        self._sizes, self._names, self._num_tiles = list(sizes), list(names), num_tiles

    def __len__(self) -> int:
        return len(self._values)

    def held_values(self) -> list[np.ndarray | TileIntervals | None]:
        """The layouts as held (intervals not expanded)."""
        return list(self._values)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        value = self._values[index]
        if isinstance(value, TileIntervals):
            tiles = _from_intervals(value, self._sizes[index], self._num_tiles,
                                    self._names[index])
            tiles.flags.writeable = False
            return tiles
        return value


def held_results(layouts: list[np.ndarray], sizes: Sequence[int], num_tiles: int,
                 names: Sequence[str]) -> list[np.ndarray] | ReadOnDemand:
    """An op's result layouts as its rule's questions after ``output_tiles`` read them:
    when one is large (``HELD_AS_INTERVALS``), all are held as the walk keeps them from
    then on and expanded only while read, so a result is not held expanded beside the
    operands each question expands (a [8192, 8192] matmul reads no result to price its
    operands); otherwise the arrays as they are."""
    if all(layout.size < HELD_AS_INTERVALS for layout in layouts):
        return layouts
    return ReadOnDemand([held(layout, num_tiles) for layout in layouts], sizes, num_tiles,
                        names)


def producerless_mappings(ir: Ir, target: TileMachine, mappings: Mappings | None
                          ) -> dict[tuple[str, str], np.ndarray | TileIntervals]:
    """Every producer-less tensor's layout, validated (from ``mappings`` or the IR): a tile
    array, or intervals as given (checked by expanding them once)."""
    result: dict[tuple[str, str], np.ndarray | TileIntervals] = {}
    for graph in ir.graphs:
        for tensor in graph.producerless_tensors():
            result[(graph.id, tensor.id)] = _given_layout(tensor, target, mappings)
    return result


def _given_layout(tensor: Tensor, target: TileMachine, mappings: Mappings | None
                  ) -> np.ndarray | TileIntervals:
    given = mappings.get((tensor.graph.id, tensor.id)) if mappings is not None \
        else tensor.tile_mapping
    checked = given_tiles(tensor, target, mappings, required=True)
    if isinstance(given, TileIntervals) and given.tiles is None:
        return given  # checked, then kept as intervals
    assert checked is not None
    return checked


def given_tiles(tensor: Tensor, target: TileMachine, mappings: Mappings | None,
                required: bool) -> np.ndarray | None:
    """The plan's tiles of ``tensor`` (``mappings``, or the IR's tile mapping when there
    are none), checked against the tensor and the target; None when it has none and none
    is ``required``."""
    what = tensor.describe()
    size = numel(tensor)
    if mappings is None:
        if tensor.tile_mapping is None:
            return _missing(f"{what} has no tile mapping", required)
        return tile_array(tensor.tile_mapping, size, target.num_tiles, what)
    tiles = mappings.get((tensor.graph.id, tensor.id))
    if tiles is None:
        return _missing(f"{what} has no tile mapping in the plan", required)
    if isinstance(tiles, TileIntervals):
        return tile_array(tiles, size, target.num_tiles, what)
    tiles = np.asarray(tiles).reshape(-1)
    if tiles.size != size:
        raise PlanError(f"{what}: the plan maps {tiles.size} elements, the tensor has "
                        f"{size}")
    if tiles.size and (tiles.min() < 0 or tiles.max() >= target.num_tiles):
        raise PlanError(f"{what}: tile ids must lie in [0, {target.num_tiles}), got "
                        f"[{int(tiles.min())}, {int(tiles.max())}]")
    return tiles.astype(target.tile_dtype, copy=False)


def _missing(message: str, required: bool) -> None:
    if required:
        raise PlanError(message)
    return None
