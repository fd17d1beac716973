"""The reduction accounting of machine/exchange.py (Poplibs' popops::reduce as the model
states it, docs/ipu-model.md "Reductions") against element-by-element oracles."""

from __future__ import annotations

from math import prod

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.machine.exchange import (
    read_need,
    reduced_rows,
    reduction_groups,
    reduction_need,
    reduction_partials,
    row_partials,
    row_read_need,
    single_partial_tiles,
)


def oracle_groups(shape, axes):
    """Each element's result index: its kept coordinates, row-major over the kept axes."""
    kept = [a for a in range(len(shape)) if a not in axes]
    groups = []
    for flat in range(prod(shape)):
        coords = np.unravel_index(flat, shape) if shape else ()
        index = 0
        for axis in kept:
            index = index * shape[axis] + int(coords[axis])
        groups.append(index)
    return np.array(groups, dtype=np.int64)


@st.composite
def reductions(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=4)))
    axes = tuple(sorted(draw(st.sets(st.sampled_from(range(len(shape))), max_size=len(shape)))
                        if shape else set()))
    tiles = np.array(draw(st.lists(st.integers(0, 5), min_size=prod(shape),
                                   max_size=prod(shape))), dtype=np.int16)
    return shape, axes, tiles


@settings(max_examples=200, deadline=None)
@given(reductions())
def test_groups_are_numpys_reduction_order(case):
    shape, axes, _ = case
    assert np.array_equal(reduction_groups(shape, axes), oracle_groups(shape, axes))
    # numpy's own reduction puts result k where these groups say
    if shape:
        values = np.arange(prod(shape), dtype=np.int64).reshape(shape)
        summed = values.sum(axis=axes).reshape(-1) if axes else values.reshape(-1)
        by_group = np.bincount(reduction_groups(shape, axes), weights=values.reshape(-1),
                               minlength=summed.size)
        assert np.array_equal(by_group.astype(np.int64), summed)


@settings(max_examples=200, deadline=None)
@given(reductions(), st.lists(st.integers(0, 5), min_size=1, max_size=64))
def test_partials_and_their_exchange_against_brute_force(case, result_layout):
    shape, axes, tiles = case
    groups = oracle_groups(shape, axes)
    num_groups = prod(1 if a in axes else d for a, d in enumerate(shape))
    result_tiles = np.resize(np.array(result_layout, np.int16), num_groups)
    pairs = sorted({(int(t), int(g)) for t, g in zip(tiles, groups, strict=True)})
    tile, group = reduction_partials(groups, tiles, num_groups)
    assert list(zip(tile.tolist(), group.tolist(), strict=True)) == pairs
    need = reduction_need(groups, tiles, result_tiles, 4, 6)
    received = np.zeros(6, np.int64)
    for t, g in pairs:
        if result_tiles[g] != t:
            received[result_tiles[g]] += 4
    assert np.array_equal(need.received_bytes, received)
    remote = [(int(result_tiles[g]), t) for t, g in pairs if result_tiles[g] != t]
    assert len(set(remote)) <= int(need.regions.sum()) <= len(remote)
    known = reduction_need(groups, tiles, result_tiles, 4, 6, partials=(tile, group))
    assert np.array_equal(known.received_bytes, need.received_bytes)
    assert np.array_equal(known.regions, need.regions)
    single = single_partial_tiles(groups, tiles, num_groups)
    known_single = single_partial_tiles(groups, tiles, num_groups, (tile, group))
    assert (single is None) == (known_single is None)
    assert single is None or np.array_equal(single, known_single)
    holders = {}
    for t, g in pairs:
        holders.setdefault(g, set()).add(t)
    if len(holders) == num_groups and all(len(h) == 1 for h in holders.values()):
        assert single is not None
        assert [int(single[g]) for g in range(num_groups)] == \
            [next(iter(holders[g])) for g in range(num_groups)]
        assert not reduction_need(groups, tiles, single, 4, 6).received_bytes.any()
    else:
        assert single is None


def test_a_row_sum_split_over_two_tiles_by_hand():
    """x[2, 4]: row 0 on tiles 0,0,1,1, row 1 on tile 1; summing rows leaves partials
    (0, row 0), (1, row 0), (1, row 1). With both results on tile 0, tile 0 receives two
    partials from tile 1, consecutive results from one tile: one region."""
    tiles = np.array([0, 0, 1, 1, 1, 1, 1, 1], np.int16)
    groups = reduction_groups((2, 4), (1,))
    assert groups.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert single_partial_tiles(groups, tiles, 2) is None
    need = reduction_need(groups, tiles, np.array([0, 0], np.int16), 4, 2)
    assert need.received_bytes.tolist() == [8, 0]
    assert need.regions.tolist() == [1, 0]


def test_results_spread_over_tiles_are_mapped_from_tile_zero():
    """popops::reduce maps a result it creates with calcLinearTileMapping from tile 0: a
    grain of one vector width, at least four per tile (float32: 2 and 8 elements), so 20
    results are 10 grains, at least 4 per used tile: 2 tiles of 5 grains."""
    target = TileTarget(IpuModel(tiles_per_ipu=8))
    target.linear_tiles((100,), "float32")  # the rotating mapper's state does not matter
    tiles = target.reduction_result_tiles(20, "float32")
    assert tiles.tolist() == [0] * 10 + [1] * 10
    assert target.reduction_result_tiles(3, "float16").tolist() == [0, 0, 0]


@st.composite
def row_reductions(draw):
    """(shape, its innermost axes reduced, a layout in runs of one tile, result tiles)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    reduced = draw(st.integers(1, len(shape)))
    run = draw(st.integers(1, 5))
    values = draw(st.lists(st.integers(0, 3), min_size=prod(shape) // run + 1,
                           max_size=prod(shape) // run + 1))
    tiles = np.repeat(np.array(values, np.int16), run)[:prod(shape)]
    results = prod(shape[:len(shape) - reduced])
    result_tiles = np.array(draw(st.lists(st.integers(0, 3), min_size=results,
                                          max_size=results)), np.int16)
    return shape, tuple(range(len(shape) - reduced, len(shape))), tiles, result_tiles


@settings(max_examples=200, deadline=None)
@given(row_reductions())
def test_row_statistics_are_the_grouped_ones(case):
    """A reduction over the innermost axes, taken row by row, has the partials and the
    read-back exchange of the per-element groups (the oracle)."""
    shape, axes, tiles, result_tiles = case
    rows = reduced_rows(shape, axes, tiles)
    groups = oracle_groups(shape, axes)
    for found, expected in zip(row_partials(rows),
                               reduction_partials(groups, tiles, result_tiles.size),
                               strict=True):
        np.testing.assert_array_equal(found, expected)
    found = row_read_need(rows, result_tiles, 2, 4)
    expected = read_need(tiles, groups, result_tiles, 2, 4)
    np.testing.assert_array_equal(found.received_bytes, expected.received_bytes)
    np.testing.assert_array_equal(found.regions, expected.regions)


def test_only_innermost_axes_reduce_by_rows():
    tiles = np.zeros(6, np.int16)
    assert reduced_rows((2, 3), (1,), tiles).shape == (2, 3)
    assert reduced_rows((2, 3), (0, 1), tiles).shape == (1, 6)
    assert reduced_rows((2, 3), (0,), tiles) is None
    assert reduced_rows((2, 3), (), tiles) is None
