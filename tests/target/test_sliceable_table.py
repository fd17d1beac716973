"""The sliceable (embedding) table hook: coverage, column contiguity, rows split when idle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mapping_oracles import owner_of

from popart_unwind.errors import TargetError
from popart_unwind.target import IpuModel, sliceable_table_arrays, sliceable_table_mapping


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@settings(max_examples=300, deadline=None)
@given(rows=st.integers(0, 60), cols=st.integers(0, 60), tiles=st.integers(1, 80),
       grain=st.integers(1, 8))
def test_each_tile_holds_a_column_range_of_a_row_range(rows, cols, tiles, grain):
    mapping = sliceable_table_mapping(rows, cols, tiles, grain)
    assert len(mapping) == tiles
    owner = owner_of(mapping, rows * cols).reshape(rows, cols)
    if rows * cols == 0:
        assert mapping == [[] for _ in range(tiles)]
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


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(0, 40), cols=st.integers(0, 40), tiles=st.integers(1, 50),
       grain=st.integers(1, 4))
def test_arrays_equal_lists(rows, cols, tiles, grain):
    arrays = sliceable_table_arrays(rows, cols, tiles, grain)
    assert arrays.num_tiles == tiles
    assert arrays.intervals.dtype == np.int64
    assert arrays.to_lists() == sliceable_table_mapping(rows, cols, tiles, grain)


def test_hand_checked_table():
    # 3 rows x 4 columns on 2 tiles: two columns per tile, one interval per row.
    assert sliceable_table_mapping(3, 4, 2) == [[(0, 2), (4, 6), (8, 10)],
                                                [(2, 4), (6, 8), (10, 12)]]
    # More tiles than columns: one column each, rows split in two.
    assert sliceable_table_mapping(2, 2, 4) == [[(0, 1)], [(1, 2)], [(2, 3)], [(3, 4)]]


def test_real_vocabulary_as_arrays():
    model = IpuModel()
    arrays = model.sliceable_table_arrays(30522, 768, "float16")
    assert arrays.num_tiles == model.tiles_per_ipu
    lengths = arrays.intervals[:, 1] - arrays.intervals[:, 0]
    assert lengths.sum() == 30522 * 768
    assert np.all(lengths == 4)  # float16 grain: four columns per tile
    assert np.all(np.diff(arrays.tile_starts) >= 0)
    assert len(arrays.tile(0)) == 30522 // 7  # rows cut in 7 parts, the first the shortest


@pytest.mark.parametrize(
    ("args", "fragment"),
    [((3, 4, 0), "num_tiles"), ((3, 4, 2, 0), "grain_size"), ((-1, 4, 2), "num_entries"),
     ((3, 4.5, 2), "must be an int"), ((2**40, 2**40, 2), "too many elements")],
)
def test_bad_table_arguments_raise_target_error(args, fragment):
    with pytest.raises(TargetError, match=fragment):
        sliceable_table_mapping(*args)
    with pytest.raises(TargetError, match=fragment):
        sliceable_table_arrays(*args)
