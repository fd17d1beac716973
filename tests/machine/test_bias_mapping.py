"""The bias layout (``TileTarget.broadcast_operand_tiles`` of a [C] operand against its
activation [..., C]) against a brute-force count of each channel's elements per tile."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import checked_layout, random_tiles

from popart_unwind.errors import TargetError
from popart_unwind.machine import IpuModel, TileTarget


def expected_bias_owner(activation_owner: np.ndarray, channels: int, tiles: int) -> np.ndarray:
    counts = np.zeros((tiles, channels), dtype=np.int64)
    channel = np.arange(activation_owner.size) % channels
    np.add.at(counts, (activation_owner, channel), 1)
    return counts.argmax(axis=0)  # argmax takes the first (lowest) tile on ties


def bias_tiles(activation: np.ndarray, shape, tiles: int) -> np.ndarray:
    """The target's bias layout for an activation of ``shape`` laid out as ``activation``."""
    found = TileTarget(IpuModel(tiles_per_ipu=tiles)).broadcast_operand_tiles(
        activation, shape, (shape[-1],))
    return checked_layout(found, shape[-1], tiles)


shapes = st.lists(st.integers(1, 7), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(shape=shapes, tiles=st.integers(1, 12), seed=st.integers(0, 2**32 - 1),
       pieces=st.integers(1, 60))
def test_bias_goes_to_the_tile_holding_most_of_its_channel(shape, tiles, seed, pieces):
    numel = int(np.prod(shape))
    activation = random_tiles(np.random.default_rng(seed), numel, tiles, pieces)
    expected = expected_bias_owner(activation.astype(np.int64), shape[-1], tiles)
    np.testing.assert_array_equal(bias_tiles(activation, shape, tiles), expected)


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(1, 40), channels=st.integers(1, 40), tiles=st.integers(1, 16),
       seed=st.integers(0, 2**32 - 1))
def test_bias_with_an_elementwise_random_activation(rows, channels, tiles, seed):
    # Element-by-element random owners: many short runs, many ties.
    activation = np.random.default_rng(seed).integers(0, tiles, size=rows * channels)
    np.testing.assert_array_equal(bias_tiles(activation.astype(np.int16), [rows, channels],
                                             tiles),
                                  expected_bias_owner(activation, channels, tiles))


def test_bias_follows_a_channel_split_activation():
    # [4, 6] with columns 0-2 on tile 1 and 3-5 on tile 2.
    activation = np.array([[1, 1, 1, 2, 2, 2]] * 4, np.int16).reshape(-1)
    assert bias_tiles(activation, (4, 6), 3).tolist() == [1, 1, 1, 2, 2, 2]


def test_ties_go_to_the_lowest_tile():
    # Shape [3, 1]: tile 2 holds rows 0-1 (two elements), tile 1 row 2: tile 2 wins.
    assert bias_tiles(np.array([2, 2, 1], np.int16), [3, 1], 3).tolist() == [2]
    # Shape [2, 1]: one element each on tiles 2 and 1: the tie goes to tile 1.
    assert bias_tiles(np.array([2, 1], np.int16), [2, 1], 3).tolist() == [1]


def test_bias_of_a_real_matmul_output_covers_every_channel():
    target = TileTarget()
    out = target.matmul_tiles(1, 512, 768, 3072, "float16", "output")
    bias = checked_layout(target.broadcast_operand_tiles(out, (1, 512, 3072), (3072,)),
                          3072, target.num_tiles)
    # Each bias element sits on a tile holding some of its channel.
    assert np.all((out.reshape(512, 3072) == bias[None, :]).any(axis=0))


@pytest.mark.parametrize(
    ("full_shape", "small_shape"),
    [((4, 6), (5,)), ((4, 6), (4,)), ((6,), (2, 6)), ((2, 3, 4), (2, 1, 3))],
)
def test_a_shape_that_does_not_broadcast_raises_target_error(full_shape, small_shape):
    full = np.zeros(int(np.prod(full_shape)), np.int16)
    with pytest.raises(TargetError, match="does not broadcast"):
        TileTarget().broadcast_operand_tiles(full, full_shape, small_shape)


def test_a_tile_array_of_the_wrong_length_raises_target_error():
    with pytest.raises(TargetError, match="5 tiles given for a full tensor of shape"):
        TileTarget().broadcast_operand_tiles(np.zeros(5, np.int16), (2, 3), (3,))
