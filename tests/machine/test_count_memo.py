"""Tile counts remembered inside a cost walk (``count_memo.remembered_counts``): the same
ids counted once, each answer ``np.bincount``'s (the oracle), whatever array, view, copy
or new array in freed memory is asked about."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from popart_unwind.errors import TargetError
from popart_unwind.machine import count_memo
from popart_unwind.machine.hooks import tile_counts


def _oracle(tiles, num_tiles):
    return np.bincount(np.asarray(tiles).reshape(-1).astype(np.int64), minlength=num_tiles)


def test_counts_inside_are_bincounts_and_counted_once(monkeypatch):
    rng = np.random.default_rng(0)
    layouts = [rng.integers(0, 7, size).astype(np.int16) for size in (1, 300, 300, 5000)]
    counted = []
    real = count_memo.CountMemo.counts

    def counting(self, ids, num_tiles, count):
        return real(self, ids, num_tiles, lambda *a: counted.append(1) or count(*a))

    monkeypatch.setattr(count_memo.CountMemo, "counts", counting)
    with count_memo.remembered_counts():
        for _ in range(3):
            for tiles in layouts:
                for asked in (tiles, tiles.reshape(1, -1), tiles.copy()):
                    found = tile_counts(asked, 7)
                    np.testing.assert_array_equal(found, _oracle(tiles, 7))
                    assert not found.flags.writeable
        assert len(counted) <= len(layouts)  # each layout once (the two of 300 may differ)
    assert tile_counts(layouts[0], 7).flags.writeable  # outside: counted, as before


def test_memory_freed_and_reused_is_counted_again():
    with count_memo.remembered_counts():
        for value in range(20):  # each array dies before the next takes (maybe) its memory
            tiles = np.full(1000, value % 5, dtype=np.int16)
            np.testing.assert_array_equal(tile_counts(tiles, 5), _oracle(tiles, 5))
            del tiles
            gc.collect()


def test_a_slice_of_remembered_memory_is_its_own_question():
    tiles = np.arange(12, dtype=np.int16) % 4
    with count_memo.remembered_counts():
        tile_counts(tiles, 4)
        np.testing.assert_array_equal(tile_counts(tiles[:6], 4), _oracle(tiles[:6], 4))
        np.testing.assert_array_equal(tile_counts(tiles, 6), _oracle(tiles, 6))


def test_ids_out_of_range_still_raise():
    with count_memo.remembered_counts(), pytest.raises(TargetError):
        tile_counts(np.array([0, 9], dtype=np.int16), 4)


def test_counts_of_a_layout_expanded_from_its_runs_are_its_bincount():
    from popart_unwind.cost.layouts import expanded
    from popart_unwind.ir.tile_mapping import TileIntervals

    tiles = np.repeat(np.array([3, 0, 3, 1], np.int16), [40, 25, 7, 60])
    runs = TileIntervals.from_tiles(tiles, 6)
    assert runs.tiles is None  # kept as runs
    np.testing.assert_array_equal(runs.elements_per_tile(6), _oracle(tiles, 6))
    with count_memo.remembered_counts() as memo:
        laid_out = expanded(runs, tiles.size, 6)
        np.testing.assert_array_equal(laid_out, tiles)
        asked = []
        found = memo.counts(laid_out, 6, lambda *a: asked.append(1) or _oracle(*a))
        np.testing.assert_array_equal(found, _oracle(tiles, 6))
        assert asked == []  # known from the runs, not counted


def test_a_memo_inside_another_is_the_outer_one():
    with count_memo.remembered_counts() as outer:
        with count_memo.remembered_counts() as inner:
            assert inner is outer and count_memo.active() is outer
        assert count_memo.active() is outer
    assert count_memo.active() is None
    with count_memo.remembered_counts() as first, count_memo.remembered_counts() as again:
        assert again is first
    with count_memo.remembered_counts() as later:
        assert later is not first  # a new session, a new memo
