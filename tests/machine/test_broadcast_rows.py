"""A broadcast operand counted row by row (its elements against their reads,
``broadcast_rows``): its most-read tiles (``most_read_by_rows``) equal the pair counting of
``most_read_tiles``, and what its readers receive (``broadcast_read_need``) equals
``read_need``'s sort of every pair (the oracles), ties, preferences, regions across the
blocks and every broadcast pattern included."""

from __future__ import annotations

from math import prod

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.machine import IpuModel, TileTarget, exchange
from popart_unwind.machine.exchange import (
    broadcast_index,
    broadcast_index_view,
    broadcast_read_need,
    broadcast_rows,
    most_read_by_rows,
    most_read_tiles,
    read_need,
)


@st.composite
def broadcasts(draw):
    """(full shape, small shape numpy broadcasts to it, tiles, each element's tile,
    a preference or None)."""
    full = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=4)))
    kept = len(full) - draw(st.integers(0, len(full)))
    small = tuple(size if draw(st.booleans()) else 1 for size in full[len(full) - kept:])
    num_tiles = draw(st.integers(1, 9))
    tiles = np.array(draw(st.lists(st.integers(0, num_tiles - 1), min_size=prod(full),
                                   max_size=prod(full))), dtype=np.int16)
    preference = None
    if draw(st.booleans()):
        preference = np.array(draw(st.permutations(range(num_tiles))), dtype=np.int64)
    return full, small, num_tiles, tiles, preference


@settings(max_examples=300, deadline=None)
@given(broadcasts(), st.booleans())
def test_rows_give_the_pair_counts(case, rows_in_target):
    full, small, num_tiles, tiles, preference = case
    table = exchange.DENSE_COUNTS_MAX
    # the target takes rows beyond one table of (element, tile) counts: 0 makes it take them
    exchange.DENSE_COUNTS_MAX = 0 if rows_in_target else table
    try:
        _check_rows(full, small, num_tiles, tiles, preference)
    finally:
        exchange.DENSE_COUNTS_MAX = table


def _check_rows(full, small, num_tiles, tiles, preference):
    rows = broadcast_rows(tiles, full, small)
    assert rows is not None and rows.shape[0] == prod(small)
    assert rows.size == tiles.size
    expected = most_read_tiles(tiles, broadcast_index_view(small, full), prod(small),
                               num_tiles, np.int64, preference)
    np.testing.assert_array_equal(most_read_by_rows(rows, num_tiles, np.int64, preference),
                                  expected)
    block = exchange.COUNT_BLOCK
    exchange.COUNT_BLOCK = 3  # blocks of rows, and rows cut into blocks of reads
    try:
        np.testing.assert_array_equal(
            exchange.most_read_by_table(rows, num_tiles, np.int64, preference), expected)
    finally:
        exchange.COUNT_BLOCK = block
    target = TileTarget(IpuModel(tiles_per_ipu=num_tiles))
    np.testing.assert_array_equal(
        target.broadcast_operand_tiles(tiles, full, small, preference), expected)


def test_ties_go_to_the_lowest_tile_or_the_most_preferred():
    rows = np.array([[3, 1, 3, 1], [2, 2, 0, 0], [5, 4, 4, 5]])
    np.testing.assert_array_equal(most_read_by_rows(rows, 6), [1, 0, 4])
    preference = np.array([5, 3, 2, 4, 1, 0])
    np.testing.assert_array_equal(most_read_by_rows(rows, 6, preference=preference), [3, 2, 5])
    np.testing.assert_array_equal(most_read_by_rows(np.array([[4, 2, 2, 4, 4]]), 6), [4])


def test_a_small_operand_not_broadcast_axis_for_axis_has_no_rows():
    assert broadcast_rows(np.zeros(0, np.int16), (0, 3), (1, 3)) is None


@settings(max_examples=300, deadline=None)
@given(broadcasts(), st.integers(1, 4), st.booleans())
def test_rows_receive_what_the_pairs_receive(case, block, few_tiles):
    full, small, num_tiles, tiles, _ = case
    held = np.arange(prod(small), dtype=np.int16) * 7 // 3 % num_tiles
    if few_tiles:  # long runs of one source tile, so that regions continue
        held = (np.arange(prod(small)) // 3 % min(num_tiles, 2)).astype(np.int16)
    saved = exchange.DENSE_PAIRS_MAX, exchange.ROW_PAIRS_BLOCK
    # rows taken for any size, a few at a time (the regions cross the blocks)
    exchange.DENSE_PAIRS_MAX, exchange.ROW_PAIRS_BLOCK = -1, block * 25
    try:
        found = broadcast_read_need(tiles, full, small, held, 2, num_tiles)
    finally:
        exchange.DENSE_PAIRS_MAX, exchange.ROW_PAIRS_BLOCK = saved
    expected = read_need(tiles, broadcast_index(small, full), held, 2, num_tiles)
    np.testing.assert_array_equal(found.received_bytes, expected.received_bytes)
    np.testing.assert_array_equal(found.regions, expected.regions)


@st.composite
def runs_of_tiles(draw):
    """(full shape, small shape, tiles, each element's tile in runs of one tile: as
    layouts are, so that rows repeat the row before them and regions continue)."""
    full = tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=4)))
    kept = len(full) - draw(st.integers(0, len(full)))
    small = tuple(size if draw(st.booleans()) else 1 for size in full[len(full) - kept:])
    num_tiles = draw(st.integers(1, 6))
    run = draw(st.integers(1, 7))
    values = draw(st.lists(st.integers(0, num_tiles - 1), min_size=prod(full) // run + 1,
                           max_size=prod(full) // run + 1))
    tiles = np.repeat(np.array(values, dtype=np.int16), run)[:prod(full)]
    return full, small, num_tiles, tiles


@settings(max_examples=300, deadline=None)
@given(runs_of_tiles(), st.sampled_from(["table", "rows"]), st.integers(1, 3))
def test_runs_of_reads_receive_what_the_pairs_receive(case, way, held_run):
    full, small, num_tiles, tiles = case
    held = (np.arange(prod(small)) // held_run % num_tiles).astype(np.int16)
    saved = exchange.DENSE_PAIRS_MAX, exchange.ROW_PAIRS_BLOCK, exchange.COUNT_BLOCK
    # the table of (element, tile) marks by default; rows for any size, a few at a time;
    # the table's blocks a few reads long, so that runs cross them
    exchange.COUNT_BLOCK = 5
    if way == "rows":
        exchange.DENSE_PAIRS_MAX, exchange.ROW_PAIRS_BLOCK = -1, 50
    try:
        found = broadcast_read_need(tiles, full, small, held, 2, num_tiles)
    finally:
        exchange.DENSE_PAIRS_MAX, exchange.ROW_PAIRS_BLOCK, exchange.COUNT_BLOCK = saved
    expected = read_need(tiles, broadcast_index(small, full), held, 2, num_tiles)
    np.testing.assert_array_equal(found.received_bytes, expected.received_bytes)
    np.testing.assert_array_equal(found.regions, expected.regions)


@settings(max_examples=200, deadline=None)
@given(runs_of_tiles(), st.booleans(), st.integers(1, 3))
def test_rows_dealt_to_any_reader_are_the_pairs_dealt(case, preferred, block):
    full, small, num_tiles, tiles = case
    preference = np.arange(num_tiles)[::-1].copy() if preferred else None
    expected = most_read_tiles(tiles, broadcast_index_view(small, full), prod(small),
                               num_tiles, np.int16, preference, any_reader=True)
    saved = exchange.DENSE_COUNTS_MAX, exchange.ROWS_BLOCK
    exchange.DENSE_COUNTS_MAX, exchange.ROWS_BLOCK = 0, block * 4  # rows, a few at a time
    try:
        target = TileTarget(IpuModel(tiles_per_ipu=num_tiles))
        found = target.broadcast_operand_tiles(tiles, full, small, preference,
                                               any_reader=True)
    finally:
        exchange.DENSE_COUNTS_MAX, exchange.ROWS_BLOCK = saved
    np.testing.assert_array_equal(found, expected)
    assert found.dtype == expected.dtype


def test_the_last_broadcast_answer_is_kept_for_the_same_tiles_only():
    target = TileTarget(IpuModel(tiles_per_ipu=4))
    tiles = np.array([0, 1, 1, 2, 3, 3], dtype=np.int16)
    first = target.broadcast_operand_tiles(tiles, (2, 3), (3,))
    first[:] = 0  # the caller's copy: not the kept answer
    np.testing.assert_array_equal(target.broadcast_operand_tiles(tiles.copy(), (2, 3), (3,)),
                                  [0, 1, 1])
    tiles[0] = 2  # the same array, changed: asked again, not answered from the last
    np.testing.assert_array_equal(target.broadcast_operand_tiles(tiles, (2, 3), (3,)),
                                  [2, 1, 1])
    np.testing.assert_array_equal(
        target.broadcast_operand_tiles(tiles, (2, 3), (3,), np.array([3, 2, 1, 0])),
        [2, 3, 3])


def _dealt_pair_by_pair(rows, num_tiles, preference):
    """``dealt_by_rows`` the plain way: every element's distinct readers listed (in
    preference order, else by id) and all the pairs dealt by ``exchange._dealt``."""
    rank = np.arange(num_tiles) if preference is None else np.argsort(preference)
    elements, tiles = [], []
    for element, row in enumerate(rows.tolist()):
        for tile in sorted(set(row), key=lambda t: rank[t]):
            elements.append(element)
            tiles.append(tile)
    return exchange._dealt(np.array(elements, np.int64), np.array(tiles, np.int64),
                           rows.shape[0], num_tiles, np.int16, preference)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 7), st.integers(0, 5), st.data(), st.booleans(), st.integers(1, 4))
def test_rows_dealt_run_by_run_are_the_pairs_dealt(num_tiles, reads, data, preferred, block):
    """Rows worked out once per run of equal rows give each element the tile dealing every
    (element, tile) pair gives, however the runs fall and the rows are compared."""
    runs = data.draw(st.lists(st.tuples(st.lists(st.integers(0, num_tiles - 1),
                                                 min_size=reads, max_size=reads),
                                        st.integers(1, 4)), max_size=8))
    listed = [row for row, repeat in runs for _ in range(repeat)]
    rows = np.array(listed, np.int16).reshape(len(listed), reads)
    preference = np.array(data.draw(st.permutations(range(num_tiles))), np.int64) \
        if preferred else None
    saved = exchange.ROWS_BLOCK
    exchange.ROWS_BLOCK = block * max(reads, 1)  # rows compared a few at a time
    try:
        found = exchange.dealt_by_rows(rows, num_tiles, np.int16, preference)
    finally:
        exchange.ROWS_BLOCK = saved
    np.testing.assert_array_equal(found, _dealt_pair_by_pair(rows, num_tiles, preference))
    assert found.dtype == np.int16
