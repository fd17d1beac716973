"""IpuModel numbers, validation and hook parameters; linear rotation and PopART's rotating
mapper (``TileTarget.linear_tiles`` and ``next_start_tile``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import byte_model, checked_layout, tile_of_each_element

from popart_unwind.errors import TargetError
from popart_unwind.machine import IpuModel, TileTarget, hooks


def test_defaults_are_the_documented_gc200_figures():
    model = IpuModel()
    assert model.tiles_per_ipu == 1472
    assert model.bytes_per_tile == 624 * 1024
    assert model.exchange_bytes_per_cycle == 4
    assert model.sync_cycles == 236  # two syncs of 118 cycles (ELK's measurement)
    assert model.min_bytes_per_tile == 128
    assert model.partial_bytes_per_element == 4
    sizes = {"float32": 4, "float16": 2, "int32": 4, "int64": 8, "bool": 1, "int8": 1}
    assert {dtype: model.dtype_size(dtype) for dtype in sizes} == sizes


def test_per_dtype_figures():
    model = IpuModel()
    # Poplibs' calcLinearTileMapping: a 64-bit vector per grain, 128 bytes per tile at least.
    assert (model.grain_size("float32"), model.min_elements_per_tile("float32")) == (2, 32)
    assert (model.grain_size("float16"), model.min_elements_per_tile("float16")) == (4, 64)
    assert (model.grain_size("int64"), model.min_elements_per_tile("int64")) == (1, 16)
    assert (model.macs_per_cycle("float16"), model.macs_per_cycle("float32")) == (64, 16)
    params = model.tile_params("float16")
    assert (params.num_tiles, params.element_bytes, params.grain_elements,
            params.min_elements_per_tile, params.partial_bytes_per_element,
            params.exchange_bytes_per_cycle, params.macs_per_cycle, params.sync_cycles) == (
        1472, 2, 4, 64, 4, 4, 64, 236)
    assert params.vertex_costs
    params = model.tile_params("float32")
    assert (params.element_bytes, params.grain_elements, params.min_elements_per_tile,
            params.macs_per_cycle) == (4, 2, 32, 16)


def test_linear_uses_the_dtype_grain_and_minimum():
    target = TileTarget()
    found = checked_layout(target.linear_tiles([3, 100], "float32"), 300, 1472)
    np.testing.assert_array_equal(found, tile_of_each_element(300, 1472, 2, 32))
    assert target.next_start_tile == found.max() + 1
    found, _ = hooks.linear_tiles(target.model.tile_params("float16"), 300, 1470)
    np.testing.assert_array_equal(found, (tile_of_each_element(300, 1472, 4, 64) + 1470) % 1472)


def test_model_is_frozen_hashable_and_owns_its_dtype_table():
    sizes = {"float32": 4}
    model = IpuModel(dtype_sizes=sizes)
    sizes["float32"] = 99
    assert model.dtype_size("float32") == 4
    with pytest.raises(TypeError):
        model.dtype_sizes["float32"] = 8  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.tiles_per_ipu = 2  # type: ignore[misc]
    assert hash(IpuModel()) == hash(IpuModel()) and IpuModel() == IpuModel()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"tiles_per_ipu": 0}, "tiles_per_ipu"),
        ({"tiles_per_ipu": True}, "tiles_per_ipu"),
        ({"bytes_per_tile": 1.5}, "bytes_per_tile"),
        ({"exchange_bytes_per_cycle": 0}, "exchange_bytes_per_cycle"),
        ({"sync_cycles": -1}, "sync_cycles"),
        ({"min_bytes_per_tile": -1}, "min_bytes_per_tile"),
        ({"grain_bytes": 0}, "grain_bytes"),
        ({"macs_per_cycle_half": 0}, "macs_per_cycle_half"),
        ({"macs_per_cycle_float": 0}, "macs_per_cycle_float"),
        ({"partial_bytes_per_element": 0}, "partial_bytes_per_element"),
        ({"dtype_sizes": {}}, "dtype_sizes"),
        ({"dtype_sizes": {"float32": 0}}, "dtype_sizes"),
        ({"dtype_sizes": {4: 4}}, "dtype_sizes"),
    ],
)
def test_bad_model_numbers_raise_target_error(kwargs, fragment):
    with pytest.raises(TargetError, match=fragment):
        IpuModel(**kwargs)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda t: t.dtype_size("complex64"), "unknown dtype"),
        (lambda t: t.dtype_size(["float32"]), "unknown dtype"),
        (lambda t: t.model.tile_params("complex64"), "unknown dtype"),
        (lambda t: t.model.tile_params(["float32"]), "unknown dtype"),
        (lambda t: t.linear_tiles([2, -1], "float32"), r"shape \(2, -1\) has a negative"),
        (lambda t: t.linear_tiles(4, "float32"), "sequence of ints"),
        (lambda t: t.linear_tiles([4], "complex64"), "unknown dtype"),
        (lambda t: hooks.linear_tiles(t.model.tile_params("float32"), 4, 1472), "start tile"),
        (lambda t: t.sliceable_tiles(4, 4, "complex64"), "unknown dtype"),
    ],
)
def test_bad_target_calls_raise_target_error(call, fragment):
    target = TileTarget(IpuModel())
    with pytest.raises(TargetError, match=fragment):
        call(target)
    assert target.next_start_tile == 0  # a refused mapping does not advance the rotation


@settings(max_examples=200, deadline=None)
@given(numel=st.integers(0, 3000), tiles=st.integers(1, 64), grain=st.integers(1, 8),
       minimum=st.integers(0, 200), data=st.data())
def test_start_tile_rotates_the_linear_mapping(numel, tiles, grain, minimum, data):
    start = data.draw(st.integers(0, tiles - 1))
    params = byte_model(tiles, grain, minimum).tile_params("int8")
    base, base_used = hooks.linear_tiles(params, numel, 0)
    rotated, used = hooks.linear_tiles(params, numel, start)
    checked_layout(rotated, numel, tiles)
    np.testing.assert_array_equal(rotated, (base.astype(np.int64) + start) % tiles)
    assert used == base_used


def test_rotation_wraps_past_the_last_tile():
    tiles, used = hooks.linear_tiles(byte_model(4).tile_params("int8"), 10, 3)
    # Unrotated: [0, 2) on tile 0, [2, 5) on 1, [5, 7) on 2, [7, 10) on 3.
    assert tiles.tolist() == [3, 3, 0, 0, 0, 1, 1, 2, 2, 2]
    assert used == 4


def test_rotating_mapper_starts_each_tensor_where_the_last_ended():
    target = TileTarget(IpuModel(tiles_per_ipu=8, min_bytes_per_tile=0))
    assert target.next_start_tile == 0
    first = target.linear_tiles([3], "float32")  # grain 2: tiles 0 and 1
    assert first.tolist() == [0, 0, 1]
    assert target.next_start_tile == 2
    second = target.linear_tiles([2], "float32")  # one grain on tile 2
    assert second.tolist() == [2, 2]
    assert target.next_start_tile == 3
    target.linear_tiles([0], "float32")  # nothing mapped, nothing advanced
    assert target.next_start_tile == 3
    third = target.linear_tiles([12], "float32")  # six tiles from tile 3: 3..7, then 0 (wraps)
    assert third.tolist() == [3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 0, 0]
    assert target.next_start_tile == 1
    target.reset()
    assert target.next_start_tile == 0
    assert target.linear_tiles([3], "float32").tolist() == [0, 0, 1]


@settings(max_examples=50, deadline=None)
@given(shapes=st.lists(st.integers(0, 300), min_size=1, max_size=12), tiles=st.integers(1, 20))
def test_rotating_mapper_is_deterministic_and_counts_tiles_used(shapes, tiles):
    model = IpuModel(tiles_per_ipu=tiles)
    target, again = TileTarget(model), TileTarget(model)
    expected_start = 0
    for numel in shapes:
        tiles_of = target.linear_tiles([numel], "float16")
        np.testing.assert_array_equal(tiles_of, again.linear_tiles([numel], "float16"))
        owner = checked_layout(tiles_of, numel, tiles)
        used = len(np.unique(owner))
        if numel:
            assert owner[0] == expected_start  # each tensor starts where the last ended
        expected_start = (expected_start + used) % tiles
        assert target.next_start_tile == expected_start


def test_a_target_defaults_to_the_gc200():
    target = TileTarget()
    assert target.model == IpuModel()
    assert (target.num_tiles, target.bytes_per_tile) == (1472, 624 * 1024)
    assert target.tile_dtype == np.int16
