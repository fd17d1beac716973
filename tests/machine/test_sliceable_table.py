"""The sliceable (embedding) table layout: coverage, column contiguity, rows split when idle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import byte_model, checked_layout

from popart_unwind.errors import TargetError
from popart_unwind.machine import IpuModel, TileTarget, hooks


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def table(rows: int, cols: int, tiles: int, grain: int = 1) -> np.ndarray:
    """The target's layout of a [rows, cols] table of a dtype with this grain (checked)."""
    found = TileTarget(byte_model(tiles, grain)).sliceable_tiles(rows, cols, "int8")
    return checked_layout(found, rows * cols, tiles).reshape(rows, cols)


@settings(max_examples=300, deadline=None)
@given(rows=st.integers(0, 60), cols=st.integers(0, 60), tiles=st.integers(1, 80),
       grain=st.integers(1, 8))
def test_each_tile_holds_a_column_range_of_a_row_range(rows, cols, tiles, grain):
    owner = table(rows, cols, tiles, grain)
    if rows * cols == 0:
        return
    cols_per_part = ceil_div(ceil_div(cols, tiles), grain) * grain
    col_parts = ceil_div(cols, cols_per_part)
    row_parts = max(1, min(rows, tiles // col_parts))
    used = np.unique(owner)
    np.testing.assert_array_equal(used, np.arange(col_parts * row_parts))
    for tile in used:
        r, c = np.nonzero(owner == tile)
        # A rectangle: contiguous rows and contiguous columns, all of them present.
        assert r.max() - r.min() + 1 == len(np.unique(r))
        assert c.max() - c.min() + 1 == len(np.unique(c))
        assert len(r) == len(np.unique(r)) * len(np.unique(c))
        assert c.min() % grain == 0 and c.min() == (tile % col_parts) * cols_per_part
    # Rows are only split when the column ranges leave tiles idle.
    assert row_parts == 1 or col_parts * 2 <= tiles
    # A lookup of any row reads from all the column ranges.
    for row in range(rows):
        assert len(np.unique(owner[row])) == col_parts


def test_hand_checked_table():
    # 3 rows x 4 columns on 2 tiles: two columns per tile, one interval per row.
    assert table(3, 4, 2).tolist() == [[0, 0, 1, 1]] * 3
    # More tiles than columns: one column each, rows split in two.
    assert table(2, 2, 4).tolist() == [[0, 1], [2, 3]]
    # A grain of 4 columns: 6 columns on 4 tiles are two ranges, [0, 4) and [4, 6), and the
    # two idle tiles split the rows.
    assert table(2, 6, 4, grain=4).tolist() == [[0, 0, 0, 0, 1, 1], [2, 2, 2, 2, 3, 3]]


def test_real_vocabulary_as_tile_arrays():
    target = TileTarget()
    tiles = target.sliceable_tiles(30522, 768, "float16")
    # Checked in the target's own int16 ids: 23 million elements.
    assert tiles.shape == (30522 * 768,) and tiles.dtype == target.tile_dtype
    # float16 grain: four columns per range, 192 ranges, rows cut in 7 parts.
    assert np.count_nonzero(hooks.tile_counts(tiles, target.num_tiles)) == 192 * 7
    starts = np.concatenate(([0], np.flatnonzero(tiles[1:] != tiles[:-1]) + 1))
    lengths = np.diff(np.append(starts, tiles.size))
    assert np.all(lengths == 4)  # every run (Poplar interval) is one row of one range
    runs_on_tile_0 = np.count_nonzero(tiles[starts] == 0)
    assert runs_on_tile_0 == 30522 // 7  # the first row part is the shortest
    assert target.sliceable_tiles(30522, 768, "float16") is tiles


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: IpuModel(tiles_per_ipu=0), "tiles_per_ipu"),
        (lambda: IpuModel(grain_bytes=0), "grain_bytes"),
        (lambda: TileTarget().sliceable_tiles(-1, 4, "float16"), "negative dimension"),
        (lambda: TileTarget().sliceable_tiles(3, 4.5, "float16"), "sequence of ints"),
        (lambda: TileTarget().sliceable_tiles(2**40, 2**40, "float16"), "too large"),
        (lambda: TileTarget().sliceable_tiles(3, 4, "complex64"), "unknown dtype"),
    ],
)
def test_bad_table_arguments_raise_target_error(call, fragment):
    with pytest.raises(TargetError, match=fragment):
        call()
