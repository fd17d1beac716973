"""The layouts a plan gives: every producer-less tensor's tiles, read from the plan's
mappings or the IR's own tile mappings, checked once, and expanded to one tile per
element only where an op reads them."""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ir.tile_mapping import TileIntervals, tile_array
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
        return tile_array(layout, size, num_tiles, what)
    return layout


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
