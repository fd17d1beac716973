"""``rotated_tiles`` moves tile ids around the machine as 64-bit modular arithmetic does,
whatever their dtype, range or the start tile (its narrow path against the plain one); a
whole turn leaves them as given."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.machine.interface import rotated_tiles


def _plain(tiles: np.ndarray, start_tile: int, num_tiles: int) -> np.ndarray:
    if not start_tile % num_tiles:  # a whole turn: the ids as given
        return tiles
    return ((tiles.astype(np.int64) + start_tile) % num_tiles).astype(tiles.dtype)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([np.int16, np.int32, np.int64, np.uint8]),
       st.integers(1, 20_000), st.integers(-50_000, 50_000), st.integers(0, 200),
       st.booleans(), st.integers(0, 2**32))
def test_moved_as_modular_arithmetic_moves_them(dtype, num_tiles, start_tile, size,
                                                outside, seed):
    info = np.iinfo(dtype)
    num_tiles = min(num_tiles, int(info.max))
    rng = np.random.default_rng(seed)
    high = min(int(info.max), 2 * num_tiles) if outside else num_tiles - 1
    low = max(int(info.min), -num_tiles) if outside else 0
    tiles = rng.integers(low, high, size=size, endpoint=True).astype(dtype)
    moved = rotated_tiles(tiles, start_tile, num_tiles)
    assert moved.dtype == tiles.dtype
    np.testing.assert_array_equal(moved, _plain(tiles, start_tile, num_tiles))


def test_a_real_machines_ids_move_in_their_own_dtype():
    tiles = np.arange(1472, dtype=np.int16).repeat(3)
    moved = rotated_tiles(tiles, 1000, 1472)
    assert moved.dtype == np.int16 and moved[0] == 1000 and moved[-1] == 999
    assert rotated_tiles(tiles, 1472, 1472) is tiles  # a whole turn moves nothing
