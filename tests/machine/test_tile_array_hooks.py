"""The hooks' tile arrays and the counting on them: every element written, ``tile_counts``
against ``np.bincount``, remembered answers read-only, ``read_need`` and
``broadcast_operand_tiles`` against element-by-element oracles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from machine_oracles import byte_model

from popart_unwind import _hooks
from popart_unwind.errors import TargetError
from popart_unwind.machine import IpuModel, TileTarget, exchange, hooks
from popart_unwind.machine.exchange import read_need


@st.composite
def matmuls(draw):
    dims = [draw(st.integers(1, 9)) for _ in range(4)]
    parts = [draw(st.integers(1, d)) for d in dims]
    tiles = draw(st.integers(1, 40)) * int(np.prod(parts))
    return dims, parts, tiles


@settings(max_examples=150, deadline=None)
@given(matmuls(), st.integers(0, 40), st.integers(0, 40), st.integers(0, 3000),
       st.sampled_from([np.int16, np.int32]))
def test_hooks_write_every_element(matmul, rows, cols, elements, dtype):
    """The C++ fills write a tile into every element of the array they are given (the hooks
    hand them uninitialised arrays): none is left at a sentinel outside the tile range."""
    (g, m, k, n), parts, tiles = matmul
    assume(tiles - 1 <= np.iinfo(dtype).max)  # the product picks int32 above 32,767 tiles
    params = byte_model(tiles, 3, 5).tile_params("int8")
    sizes = {"lhs": g * m * k, "rhs": g * k * n, "output": g * m * n}
    for operand, size in sizes.items():
        out = np.full(size, -1, dtype)
        _hooks.fill_matmul_tiles(out, params, (g, m, k, n), tuple(parts), operand)
        assert out.min() >= 0 and out.max() < tiles
    out = np.full(rows * cols, -1, dtype)
    _hooks.fill_sliceable_tiles(out, params, rows, cols)
    assert out.size == 0 or (out.min() >= 0 and out.max() < tiles)
    out = np.full(elements, -1, dtype)
    used = _hooks.fill_linear_tiles(out, params, tiles - 1)
    assert out.size == 0 or (out.min() >= 0 and out.max() < tiles)
    assert used == len(np.unique(out))


def test_hooks_refuse_an_array_too_narrow_for_the_tile_ids():
    params = byte_model(40_000, 1, 0).tile_params("int8")
    with pytest.raises(ValueError, match="cannot hold the ids of 40000 tiles"):
        _hooks.fill_linear_tiles(np.empty(10, np.int16), params, 0)
    _hooks.fill_linear_tiles(np.empty(10, np.int32), params, 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=50),
       st.sampled_from([np.int16, np.int32, np.int64, np.uint8]))
def test_tile_counts_equal_bincount(ids, dtype):
    tiles = np.array(ids, dtype=dtype)
    found = hooks.tile_counts(tiles, 7)
    assert found.dtype == np.int64
    np.testing.assert_array_equal(found, np.bincount(tiles, minlength=7))


def test_tile_counts_of_large_arrays_are_the_hooks_and_equal(monkeypatch):
    monkeypatch.setattr(hooks, "BINCOUNT_IDS_MAX", 3)  # beyond it: counted by the hook
    for size in (0, 3, 4, 1000):
        tiles = (np.arange(size) * 5 % 7).astype(np.int16)
        np.testing.assert_array_equal(hooks.tile_counts(tiles, 7),
                                      np.bincount(tiles, minlength=7))
    test_tile_counts_refuse_ids_out_of_range()
    with pytest.raises(TargetError, match="tile id"):
        hooks.tile_counts(np.array([0, 1, 2, 5], np.int16), 3)


def test_tile_counts_refuse_ids_out_of_range():
    for bad in (np.array([0, 3], np.int16), np.array([-1], np.int32), np.array([9], np.int64),
                np.array([3], np.uint8)):
        with pytest.raises(TargetError, match="tile id"):
            hooks.tile_counts(bad, 3)
    with pytest.raises(TargetError, match="integers"):
        hooks.tile_counts(np.array([0.5]), 3)


@settings(max_examples=100, deadline=None)
@given(st.tuples(*[st.integers(1, 4)] * 3), st.data())
def test_grid_reader_counts_equal_the_counts_of_each_elements_block(shape, data):
    """The grid kernel, which derives each element's block from its indices, counts what
    the per-element kernel counts given every element's block and where blocks start."""
    splits = tuple(data.draw(st.integers(1, size)) for size in shape)
    parts = [exchange.axis_parts(size, count) for size, count in zip(shape, splits, strict=True)]
    a, b, c = np.meshgrid(*parts, indexing="ij")
    blocks = ((a * splits[1] + b) * splits[2] + c).reshape(-1).astype(np.int32)
    starts = np.ones(blocks.size, dtype=bool)
    starts[1:] = blocks[1:] != blocks[:-1]
    num_tiles, num_blocks = 5, splits[0] * splits[1] * splits[2]
    tiles = np.array(data.draw(st.lists(st.integers(0, num_tiles - 1), min_size=blocks.size,
                                        max_size=blocks.size)), np.int16)
    tile_block = np.array(data.draw(st.lists(st.integers(-1, num_blocks - 1),
                                             min_size=num_tiles, max_size=num_tiles)), np.int64)
    expected = hooks.block_reader_counts(tiles, blocks, starts, tile_block, num_blocks)
    found = hooks.grid_reader_counts(tiles, parts, splits, tile_block, num_blocks)
    for one, other in zip(found, expected, strict=True):
        np.testing.assert_array_equal(one, other)


def test_grid_reader_counts_refuse_a_grid_of_another_size():
    parts = [np.zeros(2, np.int64)] * 3
    with pytest.raises(TargetError, match="grid"):
        hooks.grid_reader_counts(np.zeros(7, np.int16), parts, (1, 1, 1),
                                 np.zeros(3, np.int64), 1)


def test_target_answers_are_remembered_and_read_only():
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    first = target.matmul_tiles(1, 8, 16, 32, "float32", "rhs")
    assert target.matmul_tiles(1, 8, 16, 32, "float32", "rhs") is first
    with pytest.raises(ValueError):
        first[0] = 1
    table = target.sliceable_tiles(10, 6, "float16")
    assert target.sliceable_tiles(10, 6, "float16") is table
    assert not table.flags.writeable
    calls = []

    def compute():
        calls.append(1)
        return np.zeros(3), np.ones(2)

    pair = target.remembered(("test", 1), compute)
    assert target.remembered(("test", 1), compute) is pair
    assert len(calls) == 1
    assert not any(array.flags.writeable for array in pair)


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
    for dense_limit in (exchange.DENSE_PAIRS_MAX, 0):  # marking a table, then sorting
        saved, exchange.DENSE_PAIRS_MAX = exchange.DENSE_PAIRS_MAX, dense_limit
        try:
            need = read_need(readers, index, held, 2, tiles)
        finally:
            exchange.DENSE_PAIRS_MAX = saved
        np.testing.assert_array_equal(need.received_bytes, received)
        np.testing.assert_array_equal(need.regions, regions)
    # a same-shape operand: element k reads element k
    source = held[:count] if count <= sources else readers
    same = read_need(readers, None, source, 2, tiles)
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
    assert found.dtype == target.tile_dtype
    np.testing.assert_array_equal(found, oracle_broadcast(full, full_shape, small_shape))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60),
       st.sampled_from([np.int16, np.int32, np.int64, np.uint8]))
def test_run_count_counts_the_changes_plus_one(ids, dtype):
    """``hooks.run_count`` (C++ for 16- and 32-bit ids) against ``np.diff``'s nonzeros."""
    tiles = np.array(ids, dtype=dtype)
    expected = int(np.count_nonzero(np.diff(tiles))) + 1 if tiles.size else 0
    assert hooks.run_count(tiles) == expected
    assert hooks.run_count(tiles.reshape(1, -1)[:, ::-1]) == expected
