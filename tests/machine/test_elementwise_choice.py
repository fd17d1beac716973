"""The elementwise output choice against a numpy re-derivation of Poplibs' preference order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import random_tiles

from popart_unwind.errors import TargetError
from popart_unwind.machine import IpuModel, TileTarget


def balance_key(owner, num_tiles):
    counts = np.bincount(owner.astype(np.int64), minlength=num_tiles)
    # A region is a maximal run of consecutive elements on one tile.
    regions = 1 + int(np.count_nonzero(np.diff(owner))) if owner.size else 0
    return (int(counts.max()) if owner.size else 0, -int(np.count_nonzero(counts)), regions)


def choice(inputs, num_tiles=4):
    return TileTarget(IpuModel(tiles_per_ipu=num_tiles)).elementwise_output(
        [np.array(tiles, np.int16) for tiles in inputs])


@settings(max_examples=200, deadline=None)
@given(numel=st.integers(0, 60), tiles=st.integers(1, 8), count=st.integers(1, 5),
       seed=st.integers(0, 2**32 - 1))
def test_choice_matches_the_preference_order(numel, tiles, count, seed):
    rng = np.random.default_rng(seed)
    inputs = [random_tiles(rng, numel, tiles, int(rng.integers(1, 12))) for _ in range(count)]
    if count > 1 and rng.integers(2):
        inputs[-1] = inputs[0]  # an exact tie goes to the lower index
    keys = [balance_key(tiles_of, tiles) for tiles_of in inputs]
    assert choice(inputs, tiles) == keys.index(min(keys))


def test_hand_checked_choices():
    balanced = [0, 0, 1, 1, 2, 2, 3, 3]  # 8 elements mapped linearly over 4 tiles
    lopsided = [0, 0, 0, 0, 0, 1, 1, 1]
    assert choice([lopsided, balanced]) == 1
    assert choice([balanced, balanced]) == 0
    # Same maximum (4): more tiles occupied wins.
    two_tiles = [0, 0, 0, 0, 1, 1, 1, 1]
    three_tiles = [0, 0, 0, 0, 1, 1, 2, 2]
    assert choice([two_tiles, three_tiles]) == 1
    # Same maximum and tiles: fewer regions wins (touching pieces are one region).
    scattered = [0, 0, 1, 1, 0, 0, 1, 1]
    touching = [0, 0, 0, 0, 1, 1, 1, 1]
    assert choice([scattered, touching]) == 1
    # The order of the criteria: a smaller maximum beats more tiles and fewer regions ...
    alternating = [0, 1, 0, 1, 0, 1, 0, 1]  # maximum 4, two tiles, eight regions
    assert choice([[0, 0, 0, 0, 0, 1, 2, 3], alternating]) == 1  # maximum 5, four tiles
    # ... and more tiles beat fewer regions.
    assert choice([[0, 0, 1, 1, 2, 2], [0, 1, 2, 3, 0, 1]]) == 1


def test_target_elementwise_output_takes_shaped_layouts():
    target = TileTarget(IpuModel(tiles_per_ipu=4, min_bytes_per_tile=0))
    linear = target.linear_tiles([2, 4], "float32").reshape(2, 4)
    assert linear.tolist() == [[0, 0, 1, 1], [2, 2, 3, 3]]
    one_tile = np.zeros((2, 4), target.tile_dtype)
    assert target.elementwise_output([one_tile, linear]) == 1
    assert target.elementwise_output([linear, one_tile]) == 0


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        ([], "at least one input"),
        ([np.array([0, 4], np.int16)], "tile id 4 of element 1"),
        ([np.zeros(2, np.int16), np.array([0, 9], np.int64)], r"tile ids must lie in \[0, 4\)"),
        ([np.array([-1, 0], np.int64)], r"tile ids must lie in \[0, 4\)"),
        ([np.array([0.5, 1.0])], "tile ids must be integers"),
        ([np.zeros(2, np.int16), np.zeros(3, np.int16)], r"tile arrays of \[2, 3\] elements"),
    ],
)
def test_bad_elementwise_arguments_raise_target_error(inputs, fragment):
    with pytest.raises(TargetError, match=fragment):
        TileTarget(IpuModel(tiles_per_ipu=4)).elementwise_output(inputs)
