"""The hooks' tile-array forms equal their Poplar-format answers, and back again."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import TargetError
from popart_unwind.ir.tile_mapping import tile_array, tile_mapping
from popart_unwind.ops import layout
from popart_unwind.ops.layout import read_need
from popart_unwind.target import IpuModel, TileTarget
from popart_unwind.target.hooks import (
    MatmulPartition,
    linear_tile_mapping,
    linear_tiles,
    matmul_lhs_mapping,
    matmul_operand_tiles,
    matmul_output_mapping,
    matmul_rhs_mapping,
    poplar_mapping,
    sliceable_table_mapping,
    sliceable_table_tiles,
    tile_counts,
)

MAPPINGS = {"lhs": matmul_lhs_mapping, "rhs": matmul_rhs_mapping,
            "output": matmul_output_mapping}
SIZES = {"lhs": lambda g, m, k, n: g * m * k, "rhs": lambda g, m, k, n: g * k * n,
         "output": lambda g, m, k, n: g * m * n}


@st.composite
def matmuls(draw):
    dims = [draw(st.integers(1, 9)) for _ in range(4)]
    parts = [draw(st.integers(1, d)) for d in dims]
    tiles = draw(st.integers(1, 40)) * np.prod(parts)
    return dims, MatmulPartition(*parts), int(tiles)


@settings(max_examples=150, deadline=None)
@given(matmuls(), st.sampled_from(["lhs", "rhs", "output"]))
def test_matmul_tiles_equal_the_mapping(matmul, operand):
    (g, m, k, n), partition, tiles = matmul
    mapping = MAPPINGS[operand](g, m, k, n, partition, tiles)
    expected = tile_array(mapping, SIZES[operand](g, m, k, n), tiles)
    found = matmul_operand_tiles(g, m, k, n, partition, tiles, operand)
    assert found.dtype == expected.dtype
    np.testing.assert_array_equal(found, expected)


@settings(max_examples=150, deadline=None)
@given(rows=st.integers(0, 40), cols=st.integers(0, 40), tiles=st.integers(1, 50),
       grain=st.integers(1, 4))
def test_sliceable_tiles_equal_the_mapping(rows, cols, tiles, grain):
    expected = tile_array(sliceable_table_mapping(rows, cols, tiles, grain), rows * cols, tiles)
    np.testing.assert_array_equal(sliceable_table_tiles(rows, cols, tiles, grain), expected)


@settings(max_examples=150, deadline=None)
@given(elements=st.integers(0, 3000), tiles=st.integers(1, 64), grain=st.integers(1, 4),
       minimum=st.integers(0, 40), data=st.data())
def test_linear_tiles_equal_the_mapping_and_count_used_tiles(elements, tiles, grain, minimum,
                                                             data):
    start = data.draw(st.integers(0, tiles - 1))
    mapping = linear_tile_mapping(elements, tiles, grain, minimum, start)
    found, used = linear_tiles(elements, tiles, grain, minimum, start)
    np.testing.assert_array_equal(found, tile_array(mapping, elements, tiles))
    assert used == sum(1 for intervals in mapping if intervals)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 5)), max_size=40),
       st.sampled_from([np.int16, np.int32, np.int64, np.uint8]))
def test_poplar_mapping_equals_the_numpy_conversion(runs, dtype):
    tiles = np.repeat([t for t, _ in runs], [n for _, n in runs]).astype(dtype)
    found = poplar_mapping(tiles, 7)
    assert found == tile_mapping(tiles, 7)
    assert all(type(b) is int and type(e) is int for tile in found for b, e in tile)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=50),
       st.sampled_from([np.int16, np.int32, np.int64, np.uint8]))
def test_tile_counts_equal_bincount(ids, dtype):
    tiles = np.array(ids, dtype=dtype)
    found = tile_counts(tiles, 7)
    assert found.dtype == np.int64
    np.testing.assert_array_equal(found, np.bincount(tiles, minlength=7))


@pytest.mark.parametrize("convert", [poplar_mapping, tile_counts])
def test_conversions_refuse_ids_out_of_range(convert):
    for bad in (np.array([0, 3], np.int16), np.array([-1], np.int32), np.array([9], np.int64)):
        with pytest.raises(TargetError):
            convert(bad, 3)
    with pytest.raises(TargetError):
        convert(np.array([0.5]), 3)


def test_target_answers_are_remembered_and_read_only():
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    first = target.matmul_tiles(1, 8, 16, 32, "float32", "rhs")
    assert target.matmul_tiles(1, 8, 16, 32, "float32", "rhs") is first
    with pytest.raises(ValueError):
        first[0] = 1
    table = target.sliceable_tiles(10, 6, "float16")
    assert target.sliceable_tiles(10, 6, "float16") is table
    assert not table.flags.writeable


def oracle_need(readers, index, held, size, tiles):
    """read_need element by element: distinct (tile, element) pairs, runs per tile."""
    pairs = sorted({(int(t), int(e)) for t, e in zip(readers, index, strict=True)
                    if held[e] != t})
    received = np.zeros(tiles, np.int64)
    regions = np.zeros(tiles, np.int64)
    previous = None
    for tile, element in pairs:
        received[tile] += size
        if previous is None or previous != (tile, element - 1, held[element]):
            regions[tile] += 1
        previous = (tile, element, held[element])
    return received, regions


@settings(max_examples=200, deadline=None)
@given(tiles=st.integers(1, 9), sources=st.integers(1, 30), data=st.data())
def test_read_need_equals_the_element_oracle(tiles, sources, data):
    count = data.draw(st.integers(0, 60))
    readers = np.array(data.draw(st.lists(st.integers(0, tiles - 1), min_size=count,
                                          max_size=count)), dtype=np.int16)
    index = np.array(data.draw(st.lists(st.integers(0, sources - 1), min_size=count,
                                        max_size=count)), dtype=np.int64)
    held = np.array(data.draw(st.lists(st.integers(0, tiles - 1), min_size=sources,
                                       max_size=sources)), dtype=np.int16)
    received, regions = oracle_need(readers, index, held, 2, tiles)
    for dense_limit in (layout.DENSE_PAIRS_MAX, 0):  # marking a table, then sorting
        saved, layout.DENSE_PAIRS_MAX = layout.DENSE_PAIRS_MAX, dense_limit
        try:
            need = read_need(readers, index, held, 2, tiles)
        finally:
            layout.DENSE_PAIRS_MAX = saved
        np.testing.assert_array_equal(need.received_bytes, received)
        np.testing.assert_array_equal(need.regions, regions)
    # a same-shape operand: element k reads element k
    same = read_need(readers, None, held[:count] if count <= sources else readers, 2, tiles)
    source = held[:count] if count <= sources else readers
    received, regions = oracle_need(readers, np.arange(count), source, 2, tiles)
    np.testing.assert_array_equal(same.received_bytes, received)
    np.testing.assert_array_equal(same.regions, regions)


def oracle_broadcast(full_tiles, full_shape, small_shape):
    """Each small element on the tile holding most full elements reading it, lowest first."""
    padded = (1,) * (len(full_shape) - len(small_shape)) + tuple(small_shape)
    readers = np.broadcast_to(np.arange(int(np.prod(small_shape))).reshape(padded),
                              full_shape).reshape(-1)
    result = np.zeros(int(np.prod(small_shape)), np.int64)
    for element in range(result.size):
        counts = np.bincount(full_tiles[readers == element], minlength=1)
        result[element] = int(np.argmax(counts)) if counts.any() else 0
    return result


@pytest.mark.parametrize("full_shape, small_shape", [
    ((6, 5), (5,)), ((3, 4, 5), (4, 1)), ((2, 0, 3), (3,)),  # counted per (element, tile)
    ((2, 2500), (2500,)),  # too many (element, tile) pairs to count: sorted instead
])
def test_broadcast_operand_tiles_follow_the_most_readers(full_shape, small_shape):
    target = TileTarget()
    rng = np.random.default_rng(len(full_shape) + int(np.prod(full_shape)))
    full = rng.integers(0, 5, int(np.prod(full_shape))).astype(np.int16)
    found = target.broadcast_operand_tiles(full, full_shape, small_shape)
    np.testing.assert_array_equal(found, oracle_broadcast(full, full_shape, small_shape))
