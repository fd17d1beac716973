"""The C++ linear tile mapping against an independent numpy re-derivation of the rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import PopartUnwindError, TargetError
from popart_unwind.target import linear_tile_mapping


def tile_of_each_element(num_elements, num_tiles, grain_size, min_elements_per_tile):
    """Which tile each element lands on, derived element by element with numpy."""
    if num_elements == 0:
        return np.zeros(0, dtype=np.int64)
    num_grains = -(-num_elements // grain_size)
    grains_per_tile = -(-num_grains // num_tiles)
    if min_elements_per_tile:
        min_grains = -(-min_elements_per_tile // grain_size)
        grains_per_tile = max(grains_per_tile, -(-num_grains // max(1, num_grains // min_grains)))
    partitions = -(-num_grains // grains_per_tile)
    first_grain_of_tile = (np.arange(partitions + 1) * num_grains) // partitions
    grain_of_element = np.arange(num_elements) // grain_size
    return np.searchsorted(first_grain_of_tile, grain_of_element, side="right") - 1


def tiles_from_mapping(mapping, num_elements):
    owner = np.full(num_elements, -1)
    for tile, intervals in enumerate(mapping):
        for begin, end in intervals:
            assert np.all(owner[begin:end] == -1), "an element is mapped twice"
            owner[begin:end] = tile
    return owner


@settings(max_examples=400, deadline=None)
@given(
    num_elements=st.integers(0, 5000),
    num_tiles=st.integers(1, 64),
    grain_size=st.integers(1, 32),
    min_elements_per_tile=st.integers(0, 600),
)
def test_linear_mapping_matches_numpy_rederivation(
    num_elements, num_tiles, grain_size, min_elements_per_tile
):
    mapping = linear_tile_mapping(num_elements, num_tiles, grain_size, min_elements_per_tile)
    assert len(mapping) == num_tiles
    owner = tiles_from_mapping(mapping, num_elements)
    assert np.all(owner >= 0), "an element is unmapped"
    expected = tile_of_each_element(num_elements, num_tiles, grain_size, min_elements_per_tile)
    np.testing.assert_array_equal(owner, expected)


@settings(max_examples=200, deadline=None)
@given(
    num_elements=st.integers(1, 100_000),
    num_tiles=st.integers(1, 1472),
    grain_size=st.integers(1, 16),
    min_elements_per_tile=st.integers(0, 2000),
)
def test_linear_mapping_respects_grains_and_minimum(
    num_elements, num_tiles, grain_size, min_elements_per_tile
):
    mapping = linear_tile_mapping(num_elements, num_tiles, grain_size, min_elements_per_tile)
    sizes = [sum(end - begin for begin, end in intervals) for intervals in mapping]
    assert sum(sizes) == num_elements
    used = [tile for tile, size in enumerate(sizes) if size]
    assert used == list(range(len(used))), "used tiles are the lowest ones, in order"
    for intervals in mapping:
        for begin, end in intervals:
            assert begin % grain_size == 0
            assert end % grain_size == 0 or end == num_elements
    if len(used) > 1:
        # Spreading over several tiles only happens when each gets its minimum of grains.
        min_grains = -(-min_elements_per_tile // grain_size)
        assert min(sizes[tile] for tile in used[:-1]) >= min_grains * grain_size


def test_linear_mapping_of_the_docs_example():
    # 10 elements, grain 2 -> 5 grains over 3 tiles: 2 grains per tile, partitions of 1, 2, 2.
    assert linear_tile_mapping(10, 3, 2) == [[(0, 2)], [(2, 6)], [(6, 10)]]
    assert linear_tile_mapping(0, 4) == [[], [], [], []]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((10, 0), "num_tiles"),
        ((10, 4, 0), "grain_size"),
        ((-1, 4), "num_elements"),
        ((10, 4, 1, -3), "min_elements_per_tile"),
        ((10.0, 4), "must be an int"),
    ],
)
def test_linear_mapping_rejects_bad_arguments(args, fragment):
    with pytest.raises(TargetError, match=fragment) as info:
        linear_tile_mapping(*args)
    assert isinstance(info.value, PopartUnwindError)
    assert isinstance(info.value, ValueError)
