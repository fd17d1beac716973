"""The C++ linear tile mapping against an independent numpy re-derivation of the rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import byte_model, checked_layout, tile_of_each_element

from popart_unwind.errors import PopartUnwindError, TargetError
from popart_unwind.machine import IpuModel, TileTarget, hooks


def linear(num_elements, num_tiles, grain_size=1, min_elements_per_tile=0, start_tile=0):
    """The hook's layout (as int64 ids, checked) and its count of tiles used."""
    params = byte_model(num_tiles, grain_size, min_elements_per_tile).tile_params("int8")
    tiles, used = hooks.linear_tiles(params, num_elements, start_tile)
    return checked_layout(tiles, num_elements, num_tiles), used


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
    owner, used = linear(num_elements, num_tiles, grain_size, min_elements_per_tile)
    expected = tile_of_each_element(num_elements, num_tiles, grain_size, min_elements_per_tile)
    np.testing.assert_array_equal(owner, expected)
    assert used == len(np.unique(expected))


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
    owner, used = linear(num_elements, num_tiles, grain_size, min_elements_per_tile)
    sizes = np.bincount(owner, minlength=num_tiles)
    assert sizes.sum() == num_elements
    occupied = np.flatnonzero(sizes)
    assert occupied.tolist() == list(range(used)), "used tiles are the lowest ones"
    assert np.all(np.diff(owner) >= 0), "in order"
    # Each tile's piece starts on a grain boundary and ends on one or at the end.
    starts = np.flatnonzero(np.diff(owner)) + 1
    assert np.all(starts % grain_size == 0)
    if used > 1:
        # Spreading over several tiles only happens when each gets its minimum of grains.
        min_grains = -(-min_elements_per_tile // grain_size)
        assert sizes[occupied[:-1]].min() >= min_grains * grain_size


def test_linear_mapping_of_the_docs_example():
    # 10 elements, grain 2 -> 5 grains over 3 tiles: 2 grains per tile, partitions of 1, 2, 2.
    owner, used = linear(10, 3, 2)
    assert owner.tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert used == 3
    owner, used = linear(0, 4)
    assert owner.size == 0 and used == 0


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: IpuModel(tiles_per_ipu=0), "tiles_per_ipu"),
        (lambda: IpuModel(grain_bytes=0), "grain_bytes"),
        (lambda: TileTarget().linear_tiles([-1], "float32"), "negative dimension"),
        (lambda: IpuModel(min_bytes_per_tile=-3), "min_bytes_per_tile"),
        (lambda: TileTarget().linear_tiles([10.0], "float32"), "sequence of ints"),
        (lambda: hooks.linear_tiles(IpuModel().tile_params("float32"), 10, 1472), "start tile"),
    ],
)
def test_linear_mapping_rejects_bad_arguments(call, fragment):
    with pytest.raises(TargetError, match=fragment) as info:
        call()
    assert isinstance(info.value, PopartUnwindError)
    assert isinstance(info.value, ValueError)


@settings(max_examples=100, deadline=None)
@given(count=st.integers(0, 3000), num_tiles=st.integers(1, 64), data=st.data())
def test_lookup_indices_are_mapped_linearly_with_32_a_tile_in_the_preferred_order(
        count, num_tiles, data):
    """popops' createIndicesTensor: mapTensorLinearly with a grain of 1 and at least 32 a
    tile, from tile 0 (whatever the rotating mapper has done), or over ``preference``'s
    tiles in its order."""
    target = TileTarget(IpuModel(tiles_per_ipu=num_tiles))
    target.linear_tiles((data.draw(st.integers(0, 500)),), "float32")
    expected = tile_of_each_element(count, num_tiles, 1, 32)
    np.testing.assert_array_equal(target.indices_tiles(count), expected)
    order = np.array(data.draw(st.permutations(range(num_tiles))))
    preferred = target.indices_tiles(count, preference=order)
    assert preferred.dtype == target.tile_dtype
    np.testing.assert_array_equal(preferred, order[expected])


@pytest.mark.parametrize("preference", [np.arange(3), np.array([0, 0, 1, 2]), np.arange(1, 5)])
def test_an_indices_preference_must_order_every_tile(preference):
    with pytest.raises(TargetError, match="must order all 4 tiles"):
        TileTarget(IpuModel(tiles_per_ipu=4)).indices_tiles(10, preference=preference)
