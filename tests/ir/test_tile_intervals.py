"""``TileIntervals``, the compact Poplar-format mapping written onto tensors, against the
nested lists it stands for."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import PlanError
from popart_unwind.ir.tile_mapping import TileIntervals, tile_array, tile_mapping


def runs_oracle(tiles: list[int], num_tiles: int) -> list[list[tuple[int, int]]]:
    """Per tile, the maximal runs of consecutive elements on it, element by element."""
    mapping: list[list[tuple[int, int]]] = [[] for _ in range(num_tiles)]
    for element, tile in enumerate(tiles):
        runs = mapping[tile]
        if runs and runs[-1][1] == element:
            runs[-1] = (runs[-1][0], element + 1)
        else:
            runs.append((element, element + 1))
    return mapping


arrays = st.integers(1, 9).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.integers(0, n - 1), max_size=60)))


@settings(max_examples=150, deadline=None)
@given(arrays)
def test_tile_intervals_are_the_runs_per_tile(case):
    num_tiles, tiles = case
    compact = tile_mapping(np.array(tiles, dtype=np.int64), num_tiles)
    expected = runs_oracle(tiles, num_tiles)
    assert isinstance(compact, TileIntervals)
    assert len(compact) == num_tiles
    assert [compact[t] for t in range(num_tiles)] == expected
    assert compact == expected and compact.to_lists() == expected
    assert compact.num_runs == sum(len(runs) for runs in expected)
    assert np.array_equal(tile_array(compact, len(tiles), num_tiles), tiles)
    assert json.loads(json.dumps(compact.to_lists())) == [[list(r) for r in runs]
                                                          for runs in expected]
    for dtype in (np.int16, np.int32, np.uint8):  # the C++ kernel reads int16 and int32
        assert tile_mapping(np.array(tiles, dtype=dtype), num_tiles) == compact


def test_the_smaller_form_is_kept():
    """Few runs: the runs (8 bytes each, and 8 bytes a tile for their index). More runs
    than that (a table split by columns, a small tensor on many tiles): the tile array (2
    bytes an element), the runs built on first use."""
    few = tile_mapping(np.repeat(np.arange(4, dtype=np.int16), 16), 4)
    assert few.tiles is None and few.num_runs == 4  # 72 bytes as runs, 128 as an array
    small = tile_mapping(np.repeat(np.arange(4, dtype=np.int16), 8), 4)
    assert small.tiles is not None  # 72 bytes as runs, 64 as an array
    wide = tile_mapping(np.arange(32, dtype=np.int16), 1472)
    assert wide.tiles is not None and list(wide.held()) == [(t, [(t, t + 1)]) for t in range(32)]
    assert wide._bounds_ is None  # runs listed for the plan file are not kept
    alternating = np.tile(np.array([0, 0, 1, 1], dtype=np.int16), 4)
    table = tile_mapping(alternating, 3)
    assert table.tiles is not None and not table.tiles.flags.writeable
    assert not np.shares_memory(table.tiles, alternating)  # a writeable array is copied
    held = alternating.copy()
    held.flags.writeable = False
    assert np.shares_memory(tile_mapping(held, 3).tiles, held)  # a read-only one is not
    assert table.num_runs == 8 and repr(table) == "TileIntervals(3 tiles, 8 runs)"
    expected = runs_oracle(alternating.tolist(), 3)
    eager = TileIntervals(*[np.asarray(a) for a in (
        [0, 4, 8, 8], [0, 4, 8, 12, 2, 6, 10, 14], [2, 6, 10, 14, 4, 8, 12, 16])])
    assert eager.tiles is None and eager.to_lists() == expected
    assert tile_mapping(alternating, 3) == table  # both kept as arrays
    assert table == eager and eager == table and table == expected
    assert table != tile_mapping(alternating[::-1].copy(), 3)
    assert table != tile_mapping(alternating, 4)
    assert np.array_equal(tile_array(table, 16, 3), alternating)
    with pytest.raises(ValueError):
        table._begins[0] = 1


def test_runs_are_kept_in_32_bits():
    compact = tile_mapping(np.array([3, 3, 0, 3], dtype=np.int16), 4)
    assert compact._begins.dtype == compact._ends.dtype == np.int32
    assert compact._bounds.dtype == np.int64
    assert compact.to_lists() == [[(2, 3)], [], [], [(0, 2), (3, 4)]]


def test_indexing_and_equality_behave_like_lists():
    compact = tile_mapping(np.array([1, 1, 0, 1]), 3)
    assert compact[-1] == [] and compact[-2] == [(0, 2), (3, 4)]
    assert compact[1:] == [[(0, 2), (3, 4)], []]
    assert list(compact) == [[(2, 3)], [(0, 2), (3, 4)], []]
    with pytest.raises(IndexError):
        compact[3]
    assert compact == [[[2, 3]], [[0, 2], [3, 4]], []]  # JSON's lists compare equal too
    assert compact != [[(2, 3)], [(0, 2)], []]
    assert compact != [[(2, 3)], [(0, 2), (3, 4)]]
    assert compact != "abc" and compact != 7
    assert compact == tile_mapping(np.array([1, 1, 0, 1]), 3)
    with pytest.raises(TypeError):
        hash(compact)


def test_tile_intervals_are_immutable_and_checked():
    compact = tile_mapping(np.array([0, 1]), 2)
    with pytest.raises(ValueError):
        compact._begins[0] = 5
    with pytest.raises(PlanError, match=r"\[0, 2\)"):
        tile_mapping(np.array([0, 2]), 2)
    with pytest.raises(PlanError, match=r"\[0, 2\)"):
        tile_mapping(np.array([0, -1], dtype=np.int16), 2)
    with pytest.raises(PlanError, match="integers"):
        tile_mapping(np.array([0.0, 1.0]), 2)
    with pytest.raises(PlanError, match=r"cover \[0, 3\) exactly once"):
        tile_array(compact, 3, 2)
