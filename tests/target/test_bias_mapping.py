"""The bias hook against a brute-force count of each channel's elements per tile."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mapping_oracles import mapping_from_owner, owner_of, random_mapping

from popart_unwind.errors import TargetError
from popart_unwind.target import IpuModel, bias_tile_mapping, linear_tile_mapping


def expected_bias_owner(activation_owner: np.ndarray, channels: int, tiles: int) -> np.ndarray:
    counts = np.zeros((tiles, channels), dtype=np.int64)
    channel = np.arange(activation_owner.size) % channels
    np.add.at(counts, (activation_owner, channel), 1)
    return counts.argmax(axis=0)  # argmax takes the first (lowest) tile on ties


shapes = st.lists(st.integers(1, 7), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(shape=shapes, tiles=st.integers(1, 12), seed=st.integers(0, 2**32 - 1),
       pieces=st.integers(1, 60))
def test_bias_goes_to_the_tile_holding_most_of_its_channel(shape, tiles, seed, pieces):
    numel = int(np.prod(shape))
    activation = random_mapping(np.random.default_rng(seed), numel, tiles, pieces)
    bias = bias_tile_mapping(activation, shape)
    assert len(bias) == tiles
    owner = owner_of(bias, shape[-1])
    expected = expected_bias_owner(owner_of(activation, numel), shape[-1], tiles)
    np.testing.assert_array_equal(owner, expected)


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(1, 40), channels=st.integers(1, 40), tiles=st.integers(1, 16),
       seed=st.integers(0, 2**32 - 1))
def test_bias_with_an_elementwise_random_activation(rows, channels, tiles, seed):
    # Element-by-element random owners: many short intervals, many ties.
    activation_owner = np.random.default_rng(seed).integers(0, tiles, size=rows * channels)
    activation = mapping_from_owner(activation_owner, tiles)
    bias = bias_tile_mapping(activation, [rows, channels])
    np.testing.assert_array_equal(
        owner_of(bias, channels), expected_bias_owner(activation_owner, channels, tiles))


def test_bias_follows_a_channel_split_activation():
    # [4, 6] with columns 0-2 on tile 1 and 3-5 on tile 2 (one interval per row).
    activation = [[], [(r * 6, r * 6 + 3) for r in range(4)], [(r * 6 + 3, r * 6 + 6)
                                                             for r in range(4)]]
    assert bias_tile_mapping(activation, (4, 6)) == [[], [(0, 3)], [(3, 6)]]


def test_ties_go_to_the_lowest_tile():
    # Channel 0 is split 1:1 between tiles 2 and 1: tile 1 wins.
    activation = [[], [(2, 3)], [(0, 2)]]  # shape [3, 1]: tile 2 holds rows 0-1 (two elements)
    assert bias_tile_mapping(activation, [3, 1]) == [[], [], [(0, 1)]]
    activation = [[], [(1, 2)], [(0, 1)]]  # shape [2, 1]: one element each
    assert bias_tile_mapping(activation, [2, 1]) == [[], [(0, 1)], []]


def test_activation_without_elements_maps_the_bias_linearly():
    assert bias_tile_mapping([[], [], []], [0, 5]) == linear_tile_mapping(5, 3)


def test_bias_of_a_real_matmul_output_covers_every_channel():
    model = IpuModel()
    out = model.matmul_output(1, 512, 768, 3072, "float16")
    bias = model.bias(out, [1, 512, 3072])
    owner = owner_of(bias, 3072)
    out_owner = owner_of(out, 512 * 3072).reshape(512, 3072)
    # Each bias element sits on a tile holding some of its channel.
    assert all(owner[c] in out_owner[:, c] for c in range(0, 3072, 97))


@pytest.mark.parametrize(
    ("activation", "shape", "fragment"),
    [
        ([[(0, 4)], [(3, 6)]], [6], "more than one tile"),
        ([[(0, 4)], []], [6], "not mapped"),
        ([[(0, 7)]], [6], "outside"),
        ([[(4, 2)]], [6], "outside"),
        ([[(0, -1)]], [6], "pairs of non-negative ints"),
        ([[("a", 2)]], [6], "pairs of non-negative ints"),
        ([], [6], "non-empty list"),
        ([[(0, 6)]], [], "at least one axis"),
        ([[(0, 6)]], [2, -3], "activation_shape"),
        ([[(0, 6)]], "ab", "sequence of ints"),
    ],
)
def test_bad_bias_arguments_raise_target_error(activation, shape, fragment):
    with pytest.raises(TargetError, match=fragment):
        bias_tile_mapping(activation, shape)


def test_model_bias_checks_the_tile_count():
    with pytest.raises(TargetError, match="maps 2 tiles"):
        IpuModel().bias([[(0, 6)], []], [6])
