"""Python face of the C++ layout hooks (``popart_unwind._hooks``).

The hooks compute tile mappings in Poplar's format: for each tile, a list of half-open
``(begin, end)`` intervals of the row-major flattened tensor. This module validates arguments
and turns bad ones into typed errors before they reach C++.
"""

from __future__ import annotations

from popart_unwind import _hooks
from popart_unwind.errors import TargetError

TileMapping = list[list[tuple[int, int]]]


def _require_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TargetError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise TargetError(f"{name} must be at least {minimum}, got {value}")
    return value


def linear_tile_mapping(
    num_elements: int, num_tiles: int, grain_size: int = 1, min_elements_per_tile: int = 0
) -> TileMapping:
    """Map ``num_elements`` elements linearly over ``num_tiles`` tiles (Poplibs' rule).

    Elements go to tiles in increasing flat order, in whole grains of ``grain_size``
    elements, with at least ``min_elements_per_tile`` elements on each used tile where the
    tensor is large enough. See docs/ipu-model.md for the formula and its source.
    """
    _require_int("num_elements", num_elements, 0)
    _require_int("num_tiles", num_tiles, 1)
    _require_int("grain_size", grain_size, 1)
    _require_int("min_elements_per_tile", min_elements_per_tile, 0)
    return _hooks.linear_tile_mapping(num_elements, num_tiles, grain_size, min_elements_per_tile)
