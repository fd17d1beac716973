"""What a matmul's tiles receive (``TileTarget.matmul_readers``) against an element-by-element
oracle of docs/ipu-model.md: direct broadcast of a block to its readers, and, above seven
readers per element, Poplibs' copy into the plan's layout followed by the broadcast; for
the cheapest partition or a given one, and for the output read by a pass sharing it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.machine import IpuModel, MatmulPartition, TileTarget
from popart_unwind.machine.interface import (
    REARRANGE_ABOVE_DESTINATIONS,
    MatmulPlan,
    layout_free_operand,
)


def _part(index: int, size: int, parts: int) -> int:
    """The part of an axis of ``size`` cut at floor(p * size / parts) holding ``index``."""
    return max(p for p in range(parts) if p * size // parts <= index)


def block_of(shape, splits, flat: int) -> int:
    a, b, c = np.unravel_index(flat, shape)
    pa, pb, pc = (_part(int(i), s, n) for i, s, n in zip((a, b, c), shape, splits,
                                                          strict=True))
    return (pa * splits[1] + pb) * splits[2] + pc


def broadcast_oracle(shape, splits, plan, operand, tiles, num_tiles, size):
    """Each reading tile receives its block's elements held elsewhere; a region is a maximal
    flat-contiguous stretch of one block on one source tile, not held by the reader. The
    RHS of an even row split: tiles 2i and 2i + 1 read one block, and each is charged half
    the bytes of its elements neither holds (they arrive over the pair's shared bus)."""
    blocks = [block_of(shape, splits, e) for e in range(tiles.size)]
    received = np.zeros(num_tiles, np.int64)
    regions = np.zeros(num_tiles, np.int64)
    shared = operand == "rhs" and plan.rows % 2 == 0
    for tile in range(plan.tiles_used):
        m = tile % plan.rows
        n = (tile // plan.rows) % plan.cols
        k = (tile // (plan.rows * plan.cols)) % plan.inner
        g = tile // (plan.rows * plan.cols * plan.inner)
        block = {"lhs": (g * plan.rows + m) * plan.inner + k,
                 "rhs": (g * plan.inner + k) * plan.cols + n,
                 "output": (g * plan.rows + m) * plan.cols + n}[operand]
        neither = 0
        for e in range(tiles.size):
            if blocks[e] != block or tiles[e] == tile:
                continue
            received[tile] += size
            neither += tiles[e] != tile ^ 1
            if e == 0 or blocks[e - 1] != block or tiles[e - 1] != tiles[e]:
                regions[tile] += 1
        if shared:
            received[tile] -= neither * size // 2
    return received, regions


def copy_oracle(wanted, tiles, num_tiles, size):
    """Each element not where the plan wants it is sent there; a region is a maximal
    flat-contiguous stretch from one source tile to one destination tile."""
    received = np.zeros(num_tiles, np.int64)
    regions = np.zeros(num_tiles, np.int64)
    for e in range(tiles.size):
        if tiles[e] == wanted[e]:
            continue
        received[wanted[e]] += size
        if (e == 0 or tiles[e - 1] == wanted[e - 1] or tiles[e - 1] != tiles[e]
                or wanted[e - 1] != wanted[e]):
            regions[wanted[e]] += 1
    return received, regions


@st.composite
def cases(draw):
    num_tiles = draw(st.sampled_from([4, 16, 64]))
    dims = tuple(draw(st.integers(1, n)) for n in (2, 24, 6, 24))
    operand = draw(st.sampled_from(["lhs", "rhs", "output"]))
    target = TileTarget(IpuModel(tiles_per_ipu=num_tiles, min_bytes_per_tile=4, grain_bytes=4))
    g, m, k, n = dims
    count = g * {"lhs": m * k, "rhs": k * n, "output": m * n}[operand]
    # the cheapest partition, or any other (a pass of a layer planned with other passes)
    partition = None
    if draw(st.booleans()):
        splits = [draw(st.integers(1, size)) for size in dims]
        while np.prod(splits) > num_tiles:
            splits[int(np.argmax(splits))] -= 1
        partition = MatmulPartition(*splits)
    layout = draw(st.sampled_from(["random", "wanted", "linear", "mostly wanted"]))
    wanted = np.asarray(target.matmul_tiles(*dims, "float32", operand, partition))
    if layout == "wanted":
        tiles = wanted.copy()
    elif layout == "linear":
        tiles = np.asarray(target.linear_tiles((count,), "float32")).astype(np.int64)
    else:
        seed = draw(st.integers(0, 2**16))
        tiles = np.random.default_rng(seed).integers(0, num_tiles, count)
        if layout == "mostly wanted":
            tiles = np.where(np.arange(count) % 5 == 0, tiles, wanted)
    return target, dims, operand, tiles.astype(np.int64), partition


@settings(max_examples=80, deadline=None)
@given(cases())
def test_matmul_readers_match_the_element_oracle(case):
    target, (g, m, k, n), operand, tiles, partition = case
    plan = partition or target.matmul_plan(g, m, k, n, "float32")
    axes = {"lhs": "gmk", "rhs": "gkn", "output": "gmn"}[operand]
    shape = tuple({"g": g, "m": m, "k": k, "n": n}[a] for a in axes)
    splits = tuple(plan.split(a) for a in axes)
    need = target.matmul_readers(g, m, k, n, "float32", operand, tiles, partition)
    if plan.broadcast_destinations(operand) > REARRANGE_ABOVE_DESTINATIONS:
        wanted = np.asarray(target.matmul_tiles(g, m, k, n, "float32", operand, partition))
        copied = copy_oracle(wanted, tiles, target.num_tiles, 4)
        sent = broadcast_oracle(shape, splits, plan, operand, wanted, target.num_tiles, 4)
        expected = (copied[0] + sent[0], copied[1] + sent[1])
    else:
        expected = broadcast_oracle(shape, splits, plan, operand, tiles, target.num_tiles, 4)
    np.testing.assert_array_equal(need.received_bytes, expected[0])
    np.testing.assert_array_equal(need.regions, expected[1])


def _wide_matmul(target: TileTarget) -> tuple[tuple[int, int, int, int], str]:
    """A matmul and an operand the plan broadcasts to more than seven tiles."""
    for dims in ((1, 512, 64, 512), (1, 2048, 256, 64), (1, 64, 256, 2048)):
        plan = target.matmul_plan(*dims, "float16")
        for operand in ("lhs", "rhs"):
            if plan.broadcast_destinations(operand) > REARRANGE_ABOVE_DESTINATIONS:
                return dims, operand
    pytest.fail("no test matmul broadcasts an operand to more than seven tiles")


def test_a_rearranged_operand_in_the_wanted_layout_pays_only_the_broadcast():
    target = TileTarget()
    dims, operand = _wide_matmul(target)
    wanted = target.matmul_tiles(*dims, "float16", operand)
    good = target.matmul_readers(*dims, "float16", operand, wanted)
    moved = np.roll(np.asarray(wanted), 1)
    bad = target.matmul_readers(*dims, "float16", operand, moved)
    misplaced = int(np.count_nonzero(moved != wanted))
    # The copy into the plan's layout is the whole difference: one copy per misplaced element.
    assert bad.received_bytes.sum() - good.received_bytes.sum() == 2 * misplaced


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2), st.integers(2, 24), st.integers(1, 6), st.integers(1, 24),
       st.sampled_from([2, 4, 6]), st.integers(1, 3), st.integers(0, 2**16))
def test_a_layout_free_operand_costs_the_same_total_wherever_it_lies(g, m, k, n, rows, cols,
                                                                       seed):
    """``layout_free_operand``: the RHS of an even row split of at most seven tiles reaches
    each super-tile pair once, so any layout gives the plan's tiles the same bytes in total
    as the plan's own layout (per tile they may differ: a pair's two tiles share them)."""
    target = TileTarget(IpuModel(tiles_per_ipu=64, min_bytes_per_tile=4, grain_bytes=4))
    partition = MatmulPartition(g, min(rows, m), 1, min(cols, n))
    plan = MatmulPlan((g, m, k, n), partition)
    free = layout_free_operand(target, plan, "rhs")
    assert free == (partition.rows % 2 == 0)
    wanted = np.asarray(target.matmul_tiles(g, m, k, n, "float32", "rhs", partition))
    tiles = np.random.default_rng(seed).integers(0, 64, wanted.size)
    total = int(target.matmul_readers(g, m, k, n, "float32", "rhs", tiles,
                                      partition).received_bytes.sum())
    own = int(target.matmul_readers(g, m, k, n, "float32", "rhs", wanted,
                                    partition).received_bytes.sum())
    if free:
        assert total == own
    assert not layout_free_operand(target, plan, "lhs")
    assert not layout_free_operand(target, plan.starting_at(1), "rhs")
