"""The elementwise output choice against a numpy re-derivation of Poplibs' preference order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mapping_oracles import owner_of, random_mapping

from popart_unwind.errors import TargetError
from popart_unwind.target import IpuModel, choose_elementwise_output, linear_tile_mapping


def balance_key(mapping, num_elements):
    owner = owner_of(mapping, num_elements)
    counts = np.bincount(owner, minlength=len(mapping))
    # A region is a maximal run of consecutive elements on one tile.
    regions = 1 + int(np.count_nonzero(np.diff(owner))) if num_elements else 0
    return (int(counts.max()) if num_elements else 0, -int(np.count_nonzero(counts)), regions)


@settings(max_examples=200, deadline=None)
@given(numel=st.integers(0, 60), tiles=st.integers(1, 8), count=st.integers(1, 5),
       seed=st.integers(0, 2**32 - 1))
def test_choice_matches_the_preference_order(numel, tiles, count, seed):
    rng = np.random.default_rng(seed)
    inputs = [random_mapping(rng, numel, tiles, int(rng.integers(1, 12))) for _ in range(count)]
    if count > 1 and rng.integers(2):
        inputs[-1] = inputs[0]  # an exact tie goes to the lower index
    keys = [balance_key(m, numel) for m in inputs]
    assert choose_elementwise_output(inputs, numel) == keys.index(min(keys))


def test_hand_checked_choices():
    balanced = linear_tile_mapping(8, 4)
    lopsided = [[(0, 5)], [(5, 8)], [], []]
    assert choose_elementwise_output([lopsided, balanced], 8) == 1
    assert choose_elementwise_output([balanced, balanced], 8) == 0
    # Same maximum (4): more tiles occupied wins.
    two_tiles = [[(0, 4)], [(4, 8)], [], []]
    three_tiles = [[(0, 4)], [(4, 6)], [(6, 8)], []]
    assert choose_elementwise_output([two_tiles, three_tiles], 8) == 1
    # Same maximum and tiles: fewer regions wins (touching intervals are one region).
    scattered = [[(0, 2), (4, 6)], [(2, 4), (6, 8)], [], []]
    touching = [[(2, 4), (0, 2)], [(4, 8)], [], []]
    assert choose_elementwise_output([scattered, touching], 8) == 1


def test_model_elementwise_output_uses_the_shape():
    model = IpuModel(tiles_per_ipu=4, min_bytes_per_tile=0)
    linear = model.linear([2, 4], "float32")
    assert linear == [[(0, 2)], [(2, 4)], [(4, 6)], [(6, 8)]]
    one_tile = [[(0, 8)], [], [], []]
    assert model.elementwise_output([one_tile, linear], [2, 4]) == 1
    with pytest.raises(TargetError, match="maps 1 tiles"):
        model.elementwise_output([[[(0, 8)]]], [2, 4])


@pytest.mark.parametrize(
    ("inputs", "numel", "fragment"),
    [
        ([], 4, "non-empty sequence"),
        ([[[(0, 4)]], []], 4, r"inputs\[1\]"),
        ([[[(0, 4)]], [[(0, 3)]]], 4, "input 1: element 3 is not mapped"),
        ([[[(0, 4)], [(2, 3)]]], 4, "more than one tile"),
        ([[[(0, 4.0)]]], 4, "pairs of non-negative ints"),
        ([[[(0, 4)]]], -1, "num_elements"),
    ],
)
def test_bad_elementwise_arguments_raise_target_error(inputs, numel, fragment):
    with pytest.raises(TargetError, match=fragment):
        choose_elementwise_output(inputs, numel)
