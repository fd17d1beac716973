"""The matmul partition model and its operand/output layouts against numpy oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import all_partitions, checked_layout, cost_models, cycles_oracle, part_of

from popart_unwind.errors import TargetError
from popart_unwind.machine import IpuModel, MatmulPartition, TileTarget, hooks

sizes = st.integers(1, 9)
OPERAND_SHAPES = {"lhs": lambda G, M, K, N: (G, M, K), "rhs": lambda G, M, K, N: (G, K, N),
                  "output": lambda G, M, K, N: (G, M, N)}


def tile_of(p: MatmulPartition, g: int, m: int, k: int, n: int) -> int:
    """The documented tile of part (g, m, k, n)."""
    return ((g * p.inner + k) * p.cols + n) * p.rows + m


@st.composite
def partitioned(draw):
    G, M, K, N = (draw(sizes) for _ in range(4))
    splits = [draw(st.integers(1, size)) for size in (G, M, K, N)]
    tiles = draw(st.integers(int(np.prod(splits)), int(np.prod(splits)) + 5))
    return G, M, K, N, MatmulPartition(*splits), tiles


@settings(max_examples=150, deadline=None)
@given(G=sizes, M=sizes, K=sizes, N=sizes, tiles=st.integers(1, 40), data=st.data())
def test_plan_is_the_cheapest_admissible_partition(G, M, K, N, tiles, data):
    model = data.draw(cost_models(tiles))
    plan = TileTarget(model).matmul_plan(G, M, K, N, "t")
    assert plan.tiles_used <= tiles
    assert all(s <= size for s, size in zip(plan.as_tuple(), (G, M, K, N), strict=True))
    best = min(
        all_partitions(G, M, K, N, tiles),
        key=lambda p: (cycles_oracle(G, M, K, N, p, model), p.tiles_used, p.as_tuple()),
    )
    assert plan == best
    assert hooks.plan_matmul(model.tile_params("t"), (G, M, K, N)) == best


def reader_parts(shape, splits, owner_tiles, partition, axes):
    """Check each element's tile computes a part whose block holds the element.

    `axes` names, for the three tensor axes, which partition coordinate they cut.
    """
    index = np.indices(shape).reshape(3, -1)
    coordinate_of_tile = {}
    for g, m, k, n in itertools.product(*(range(s) for s in partition.as_tuple())):
        coordinate_of_tile[tile_of(partition, g, m, k, n)] = {"g": g, "m": m, "k": k, "n": n}
    assert len(coordinate_of_tile) == partition.tiles_used
    for axis, name in enumerate(axes):
        block = part_of(shape[axis], splits[axis], index[axis])
        tile_block = np.array([coordinate_of_tile[t][name] for t in owner_tiles])
        np.testing.assert_array_equal(block, tile_block)


def spread_is_even(owner, shape, splits):
    """Within each block the elements per holding tile differ by at most one."""
    index = np.indices(shape).reshape(3, -1)
    blocks = [part_of(shape[a], splits[a], index[a]) for a in range(3)]
    keys = (blocks[0] * splits[1] + blocks[1]) * splits[2] + blocks[2]
    for key in np.unique(keys):
        _, counts = np.unique(owner[keys == key], return_counts=True)
        assert counts.max() - counts.min() <= 1


def partition_tiles(G, M, K, N, p, tiles, operand):
    """The hook's layout of ``operand`` under the explicit partition ``p`` (checked)."""
    params = IpuModel(tiles_per_ipu=tiles).tile_params("float16")
    found = hooks.matmul_tiles(params, (G, M, K, N), p, operand)
    return checked_layout(found, int(np.prod(OPERAND_SHAPES[operand](G, M, K, N))), tiles)


@settings(max_examples=150, deadline=None)
@given(case=partitioned())
def test_operands_and_output_lie_on_tiles_that_use_them(case):
    G, M, K, N, p, tiles = case
    lhs_owner, rhs_owner, out_owner = (partition_tiles(G, M, K, N, p, tiles, operand)
                                       for operand in ("lhs", "rhs", "output"))
    for owner in (lhs_owner, rhs_owner, out_owner):
        assert owner.max() < p.tiles_used
    reader_parts((G, M, K), (p.groups, p.rows, p.inner), lhs_owner, p, "gmk")
    reader_parts((G, K, N), (p.groups, p.inner, p.cols), rhs_owner, p, "gkn")
    reader_parts((G, M, N), (p.groups, p.rows, p.cols), out_owner, p, "gmn")
    # Spread, not duplicated: a block is shared evenly by the tiles that read it.
    spread_is_even(lhs_owner, (G, M, K), (p.groups, p.rows, p.inner))
    spread_is_even(rhs_owner, (G, K, N), (p.groups, p.inner, p.cols))
    spread_is_even(out_owner, (G, M, N), (p.groups, p.rows, p.cols))


@settings(max_examples=50, deadline=None)
@given(G=sizes, M=sizes, K=sizes, N=sizes, tiles=st.integers(1, 40),
       operand=st.sampled_from(["lhs", "rhs", "output"]))
def test_target_layouts_follow_its_plan(G, M, K, N, tiles, operand):
    target = TileTarget(IpuModel(tiles_per_ipu=tiles))
    plan = target.matmul_plan(G, M, K, N, "float16")
    found = target.matmul_tiles(G, M, K, N, "float16", operand)
    np.testing.assert_array_equal(found, partition_tiles(G, M, K, N, plan, tiles, operand))


def test_real_size_matmul_on_a_whole_ipu():
    target = TileTarget()
    model = target.model
    G, M, K, N = 1, 512, 768, 3072
    plan = target.matmul_plan(G, M, K, N, "float16")
    assert 1 < plan.tiles_used <= model.tiles_per_ipu
    layouts = {operand: target.matmul_tiles(G, M, K, N, "float16", operand)
               for operand in ("lhs", "rhs", "output")}
    for operand, numel in (("lhs", G * M * K), ("rhs", G * K * N), ("output", G * M * N)):
        owner = checked_layout(layouts[operand], numel, model.tiles_per_ipu)
        assert len(np.unique(owner)) == min(numel, plan.tiles_used)
    # Deterministic: the same question to a new target gives the same plan and layouts.
    assert hooks.plan_matmul(model.tile_params("float16"), (G, M, K, N)) == plan
    again = TileTarget()
    assert again.matmul_plan(G, M, K, N, "float16") == plan
    np.testing.assert_array_equal(again.matmul_tiles(G, M, K, N, "float16", "lhs"),
                                  layouts["lhs"])


def test_a_single_tile_holds_everything():
    target = TileTarget(IpuModel(tiles_per_ipu=1))
    p = target.matmul_plan(2, 3, 4, 5, "float16")
    assert p.as_tuple() == (1, 1, 1, 1)
    assert target.matmul_tiles(2, 3, 4, 5, "float16", "lhs").tolist() == [0] * 24
    assert partition_tiles(2, 3, 4, 5, p, 3, "output").tolist() == [0] * 30


def test_hand_checked_partition_layouts():
    # [1, 2, 2] x [1, 2, 2] cut (1, 2, 1, 2): tile = n * 2 + m (the row split innermost).
    p = MatmulPartition(1, 2, 1, 2)
    assert p.tiles_used == 4
    assert (p.broadcast_destinations("lhs"), p.broadcast_destinations("rhs")) == (2, 2)
    # LHS row m is read by tiles (m, n=0) = m and (m, n=1) = 2 + m: one element each.
    assert partition_tiles(1, 2, 2, 2, p, 4, "lhs").tolist() == [0, 2, 1, 3]
    # RHS column n (elements n and 2 + n) is read by tiles (0, n) = 2n and (1, n) = 2n + 1,
    # a pair of neighbours.
    assert partition_tiles(1, 2, 2, 2, p, 4, "rhs").tolist() == [0, 2, 1, 3]
    assert partition_tiles(1, 2, 2, 2, p, 4, "output").tolist() == [0, 2, 1, 3]
    # [1, 1, 4] x [1, 4, 1] cut (1, 1, 2, 1): the inner halves go to tiles 0 and 1. The one
    # output element is cut into two chunks at floor(j / 2): chunk 0 is empty, chunk 1 (k = 1)
    # holds it.
    p = MatmulPartition(1, 1, 2, 1)
    assert partition_tiles(1, 1, 4, 1, p, 2, "lhs").tolist() == [0, 0, 1, 1]
    assert partition_tiles(1, 1, 4, 1, p, 2, "rhs").tolist() == [0, 0, 1, 1]
    assert partition_tiles(1, 1, 4, 1, p, 2, "output").tolist() == [1]


def params(tiles: int = 8):
    return IpuModel(tiles_per_ipu=tiles).tile_params("float16")


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: TileTarget().matmul_plan(0, 2, 2, 2, "float16"), "groups"),
        (lambda: IpuModel(tiles_per_ipu=0), "tiles_per_ipu"),
        (lambda: TileTarget().matmul_plan(1, 2, 2, 2.0, "float16"), "cols must be"),
        (lambda: TileTarget().matmul_plan(1, 2, True, 2, "float16"), "inner must be"),
        (lambda: TileTarget().matmul_plan(2**40, 2**40, 2, 2, "float16"), "too large"),
        (lambda: IpuModel(exchange_bytes_per_cycle=0), "exchange_bytes_per_cycle"),
        (lambda: hooks.matmul_tiles(params(), (1, 2, 2, 2), MatmulPartition(1, 3, 1, 1), "lhs"),
         "split 3"),
        (lambda: hooks.matmul_tiles(params(), (1, 2, 2, 2), MatmulPartition(1, 0, 1, 1), "rhs"),
         "split 0"),
        (lambda: hooks.matmul_tiles(params(7), (1, 2, 2, 2), MatmulPartition(1, 2, 2, 2), "rhs"),
         "8 tiles"),
        (lambda: hooks.matmul_tiles(params(), (1, 2, 2, 2), MatmulPartition(1, 1, 1, 1), "bias"),
         "operand"),
        (lambda: TileTarget().matmul_tiles(1, 0, 2, 2, "float16", "lhs"), "rows"),
        (lambda: TileTarget().matmul_tiles(1, 2, 2, 2, "complex64", "lhs"), "unknown dtype"),
        (lambda: TileTarget().matmul_plan(1, 2, 2, 2, "complex64"), "unknown dtype"),
        (lambda: TileTarget().matmul_tiles(1, 2, 2, 2, "float16", "bias"), "operand"),
        (lambda: TileTarget().matmul_readers(1, 2, 2, 2, "float16", "bias",
                                             np.zeros(4, np.int16)), "operand"),
        (lambda: TileTarget().matmul_readers(1, 2, 3, 2, "float16", "lhs",
                                             np.zeros(4, np.int16)),
         "4 tiles given for a lhs of 6"),
        (lambda: TileTarget().matmul_plan(1, 2, 2, 2, ["float16"]), "dtype"),
        (lambda: TileTarget().matmul_tiles(1, 2, 2, 2, ["float16"], "lhs"), "dtype"),
        (lambda: TileTarget().sliceable_tiles(4, 2, ["float16"]), "dtype"),
    ],
)
def test_bad_matmul_arguments_raise_target_error(call, fragment):
    with pytest.raises(TargetError, match=fragment):
        call()
