"""IpuModel numbers, validation and hook calls; linear rotation and PopART's rotating mapper."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mapping_oracles import owner_of

from popart_unwind.errors import TargetError
from popart_unwind.target import IpuModel, RotatingLinearMapper, linear_tile_mapping


def test_defaults_are_the_documented_gc200_figures():
    model = IpuModel()
    assert model.tiles_per_ipu == 1472
    assert model.bytes_per_tile == 624 * 1024
    assert model.exchange_bytes_per_cycle == 4
    assert model.sync_cycles == 90
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
    costs = model.matmul_costs("float16")
    assert (costs.bytes_per_element, costs.exchange_bytes_per_cycle, costs.sync_cycles) == (
        2, 4, 90)


def test_linear_uses_the_dtype_grain_and_minimum():
    model = IpuModel()
    assert model.linear([3, 100], "float32") == linear_tile_mapping(300, 1472, 2, 32)
    assert model.linear([3, 100], "float16", start_tile=1470) == linear_tile_mapping(
        300, 1472, 4, 64, 1470)


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
        (lambda m: m.dtype_size("complex64"), "unknown dtype"),
        (lambda m: m.dtype_size(["float32"]), "unknown dtype"),
        (lambda m: m.linear([2, -1], "float32"), r"shape\[1\]"),
        (lambda m: m.linear(4, "float32"), "sequence of ints"),
        (lambda m: m.linear([4], "float32", start_tile=1472), "start_tile"),
        (lambda m: m.sliceable_table(4, 4, "complex64"), "unknown dtype"),
    ],
)
def test_bad_model_calls_raise_target_error(call, fragment):
    with pytest.raises(TargetError, match=fragment):
        call(IpuModel())


@settings(max_examples=200, deadline=None)
@given(numel=st.integers(0, 3000), tiles=st.integers(1, 64), grain=st.integers(1, 8),
       minimum=st.integers(0, 200), data=st.data())
def test_start_tile_rotates_the_linear_mapping(numel, tiles, grain, minimum, data):
    start = data.draw(st.integers(0, tiles - 1))
    base = owner_of(linear_tile_mapping(numel, tiles, grain, minimum), numel)
    rotated = linear_tile_mapping(numel, tiles, grain, minimum, start)
    assert len(rotated) == tiles
    np.testing.assert_array_equal(owner_of(rotated, numel), (base + start) % tiles)


def test_rotation_wraps_past_the_last_tile():
    assert linear_tile_mapping(10, 4, 1, 0, 3) == [[(2, 5)], [(5, 7)], [(7, 10)], [(0, 2)]]


def test_rotating_mapper_starts_each_tensor_where_the_last_ended():
    model = IpuModel(tiles_per_ipu=8, min_bytes_per_tile=0)
    mapper = RotatingLinearMapper(model)
    assert mapper.next_start_tile == 0
    first = mapper.map([3], "float32")  # grain 2: tiles 0 and 1
    assert first[:3] == [[(0, 2)], [(2, 3)], []]
    assert mapper.next_start_tile == 2
    second = mapper.map([2], "float32")  # one grain on tile 2
    assert second[2] == [(0, 2)]
    assert mapper.next_start_tile == 3
    mapper.map([0], "float32")  # nothing mapped, nothing advanced
    assert mapper.next_start_tile == 3
    third = mapper.map([12], "float32")  # six tiles from tile 3: 3..7, then 0 (wraps)
    assert [tile for tile, intervals in enumerate(third) if intervals] == [0, 3, 4, 5, 6, 7]
    assert third[0] == [(10, 12)]
    assert mapper.next_start_tile == 1


@settings(max_examples=50, deadline=None)
@given(shapes=st.lists(st.integers(0, 300), min_size=1, max_size=12), tiles=st.integers(1, 20))
def test_rotating_mapper_is_deterministic_and_counts_tiles_used(shapes, tiles):
    model = IpuModel(tiles_per_ipu=tiles)
    mapper, again = RotatingLinearMapper(model), RotatingLinearMapper(model)
    expected_start = 0
    for numel in shapes:
        mapping = mapper.map([numel], "float16")
        assert mapping == again.map([numel], "float16")
        owner_of(mapping, numel)
        used = sum(1 for intervals in mapping if intervals)
        expected_start = (expected_start + used) % tiles
        assert mapper.next_start_tile == expected_start


def test_rotating_mapper_rejects_a_bad_start():
    with pytest.raises(TargetError, match="start_tile"):
        RotatingLinearMapper(IpuModel(tiles_per_ipu=4), start_tile=4)
    assert RotatingLinearMapper(start_tile=5).model == IpuModel()
