"""The matmul partition model and its operand/output mappings against numpy oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mapping_oracles import owner_of, part_of

from popart_unwind.errors import TargetError
from popart_unwind.target import (
    IpuModel,
    MatmulCosts,
    MatmulPartition,
    matmul_lhs_mapping,
    matmul_output_mapping,
    matmul_partition_cycles,
    matmul_rhs_mapping,
    plan_matmul,
)

COSTS = MatmulCosts(bytes_per_element=2, partial_bytes_per_element=4,
                    exchange_bytes_per_cycle=4, macs_per_cycle=64, sync_cycles=90)

sizes = st.integers(1, 9)
costs = st.builds(MatmulCosts, st.integers(1, 8), st.integers(1, 8), st.integers(1, 8),
                  st.integers(1, 128), st.integers(0, 200))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def cycles_oracle(G, M, K, N, p: MatmulPartition, c: MatmulCosts) -> int:
    """The documented cost, re-derived from docs/ipu-model.md."""
    gb, mb = ceil_div(G, p.groups), ceil_div(M, p.rows)
    kb, nb = ceil_div(K, p.inner), ceil_div(N, p.cols)
    lhs, rhs = gb * mb * kb, gb * kb * nb
    received = (lhs - lhs // p.cols) + (rhs - rhs // p.rows)
    cycles = ceil_div(gb * mb * kb * nb, c.macs_per_cycle)
    cycles += ceil_div(received * c.bytes_per_element, c.exchange_bytes_per_cycle) + c.sync_cycles
    if p.inner > 1:
        share = ceil_div(gb * mb * nb, p.inner)
        cycles += ceil_div(share * (p.inner - 1) * c.partial_bytes_per_element,
                           c.exchange_bytes_per_cycle) + c.sync_cycles
    return cycles


def all_partitions(G, M, K, N, tiles):
    for splits in itertools.product(range(1, G + 1), range(1, M + 1), range(1, K + 1),
                                    range(1, N + 1)):
        if np.prod(splits) <= tiles:
            yield MatmulPartition(*splits)


@st.composite
def partitioned(draw):
    G, M, K, N = (draw(sizes) for _ in range(4))
    splits = [draw(st.integers(1, size)) for size in (G, M, K, N)]
    tiles = draw(st.integers(int(np.prod(splits)), int(np.prod(splits)) + 5))
    return G, M, K, N, MatmulPartition(*splits), tiles


@settings(max_examples=150, deadline=None)
@given(G=sizes, M=sizes, K=sizes, N=sizes, tiles=st.integers(1, 40), c=costs)
def test_plan_is_the_cheapest_admissible_partition(G, M, K, N, tiles, c):
    plan = plan_matmul(G, M, K, N, tiles, c)
    assert plan.tiles_used <= tiles
    assert all(s <= size for s, size in zip(plan.as_tuple(), (G, M, K, N), strict=True))
    best = min(
        all_partitions(G, M, K, N, tiles),
        key=lambda p: (cycles_oracle(G, M, K, N, p, c), p.tiles_used, p.as_tuple()),
    )
    assert plan == best


@settings(max_examples=100, deadline=None)
@given(case=partitioned(), c=costs)
def test_cycles_match_the_documented_formula(case, c):
    G, M, K, N, partition, _ = case
    assert matmul_partition_cycles(G, M, K, N, partition, c) == cycles_oracle(
        G, M, K, N, partition, c)


def reader_parts(shape, splits, owner_tiles, partition, axes):
    """Check each element's tile computes a part whose block holds the element.

    `axes` names, for the three tensor axes, which partition coordinate they cut.
    """
    index = np.indices(shape).reshape(3, -1)
    coordinate_of_tile = {}
    for g, m, k, n in itertools.product(*(range(s) for s in partition.as_tuple())):
        coordinate_of_tile[partition.tile(g, m, k, n)] = {"g": g, "m": m, "k": k, "n": n}
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


@settings(max_examples=150, deadline=None)
@given(case=partitioned())
def test_operands_and_output_lie_on_tiles_that_use_them(case):
    G, M, K, N, p, tiles = case
    lhs = matmul_lhs_mapping(G, M, K, N, p, tiles)
    rhs = matmul_rhs_mapping(G, M, K, N, p, tiles)
    out = matmul_output_mapping(G, M, K, N, p, tiles)
    assert len(lhs) == len(rhs) == len(out) == tiles
    lhs_owner = owner_of(lhs, G * M * K)
    rhs_owner = owner_of(rhs, G * K * N)
    out_owner = owner_of(out, G * M * N)
    for owner in (lhs_owner, rhs_owner, out_owner):
        assert owner.max() < p.tiles_used
    reader_parts((G, M, K), (p.groups, p.rows, p.inner), lhs_owner, p, "gmk")
    reader_parts((G, K, N), (p.groups, p.inner, p.cols), rhs_owner, p, "gkn")
    reader_parts((G, M, N), (p.groups, p.rows, p.cols), out_owner, p, "gmn")
    # Spread, not duplicated: a block is shared evenly by the tiles that read it.
    spread_is_even(lhs_owner, (G, M, K), (p.groups, p.rows, p.inner))
    spread_is_even(rhs_owner, (G, K, N), (p.groups, p.inner, p.cols))
    spread_is_even(out_owner, (G, M, N), (p.groups, p.rows, p.cols))


def test_real_size_matmul_on_a_whole_ipu():
    model = IpuModel()
    G, M, K, N = 1, 512, 768, 3072
    plan = model.matmul_plan(G, M, K, N, "float16")
    assert 1 < plan.tiles_used <= model.tiles_per_ipu
    lhs = model.matmul_lhs(G, M, K, N, "float16")
    rhs = model.matmul_rhs(G, M, K, N, "float16")
    out = model.matmul_output(G, M, K, N, "float16")
    for mapping, numel in ((lhs, G * M * K), (rhs, G * K * N), (out, G * M * N)):
        assert len(mapping) == model.tiles_per_ipu
        owner = owner_of(mapping, numel)
        assert len(np.unique(owner)) == min(numel, plan.tiles_used)
    # Deterministic: the same call gives the same plan and mappings.
    assert plan_matmul(G, M, K, N, model.tiles_per_ipu, model.matmul_costs("float16")) == plan
    assert model.matmul_lhs(G, M, K, N, "float16") == lhs


def test_a_single_tile_holds_everything():
    p = plan_matmul(2, 3, 4, 5, 1, COSTS)
    assert p.as_tuple() == (1, 1, 1, 1)
    assert matmul_lhs_mapping(2, 3, 4, 5, p, 1) == [[(0, 24)]]
    assert matmul_output_mapping(2, 3, 4, 5, p, 3) == [[(0, 30)], [], []]


def test_hand_checked_partition_mappings():
    # [1, 2, 2] x [1, 2, 2] cut (1, 2, 1, 2): tile = m * 2 + n.
    p = MatmulPartition(1, 2, 1, 2)
    # LHS row m is read by tiles (m, n=0) and (m, n=1): one element each.
    assert matmul_lhs_mapping(1, 2, 2, 2, p, 4) == [[(0, 1)], [(1, 2)], [(2, 3)], [(3, 4)]]
    # RHS column n (elements n and 2 + n) is read by tiles (0, n) and (1, n).
    assert matmul_rhs_mapping(1, 2, 2, 2, p, 4) == [[(0, 1)], [(1, 2)], [(2, 3)], [(3, 4)]]
    assert matmul_output_mapping(1, 2, 2, 2, p, 4) == [[(0, 1)], [(1, 2)], [(2, 3)], [(3, 4)]]


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: plan_matmul(0, 2, 2, 2, 4, COSTS), "groups"),
        (lambda: plan_matmul(1, 2, 2, 2, 0, COSTS), "num_tiles"),
        (lambda: plan_matmul(1, 2, 2, 2.0, 4, COSTS), "must be an int"),
        (lambda: plan_matmul(1, 2, 2, 2, 4, None), "MatmulCosts"),
        (lambda: plan_matmul(2**40, 2**40, 2, 2, 4, COSTS), "too large"),
        (lambda: MatmulPartition(1, 0, 1, 1), "rows"),
        (lambda: MatmulCosts(2, 4, 0, 64, 90), "exchange_bytes_per_cycle"),
        (lambda: matmul_lhs_mapping(1, 2, 2, 2, MatmulPartition(1, 3, 1, 1), 8), "rows"),
        (lambda: matmul_rhs_mapping(1, 2, 2, 2, MatmulPartition(1, 2, 2, 2), 7), "8 tiles"),
        (lambda: matmul_output_mapping(1, 2, 2, 2, (1, 1, 1, 1), 4), "MatmulPartition"),
        (lambda: IpuModel().matmul_lhs(1, 0, 2, 2, "float16"), "rows"),
        (lambda: IpuModel().matmul_lhs(1, 2, 2, 2, "complex64"), "unknown dtype"),
    ],
)
def test_bad_matmul_arguments_raise_target_error(call, fragment):
    with pytest.raises(TargetError, match=fragment):
        call()
