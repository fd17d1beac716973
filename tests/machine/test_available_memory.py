"""Poplibs' availableMemoryProportion: a matmul plan is the quickest partition whose temporary
bytes on a tile stay within the bound, or the one of least temporary bytes when none does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import all_partitions

from popart_unwind.errors import OptionError, TargetError
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.options import SessionOptions


def oracle(target: TileTarget, dims, dtype: str):
    limit = int(target.model.available_memory_proportion * target.model.bytes_per_tile)

    def key(partition):
        cost = target.matmul_cost(*dims, dtype, partition)
        over = cost.temp_bytes > limit
        return (over, cost.temp_bytes if over else 0, cost.cycles, partition.tiles_used,
                partition.as_tuple())

    return min(all_partitions(*dims, target.num_tiles), key=key)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2), st.integers(1, 30), st.integers(1, 30), st.integers(1, 30),
       st.integers(1, 16), st.sampled_from([0.0, 0.05, 0.2, 0.6, 1.0]),
       st.sampled_from(["float16", "float32"]))
def test_the_plan_is_the_quickest_within_the_bound(groups, rows, inner, cols, tiles, share,
                                                    dtype):
    """Brute force on tiles of 4 KiB, where the bound often binds."""
    target = TileTarget(IpuModel(tiles_per_ipu=tiles, bytes_per_tile=4096,
                                 available_memory_proportion=share))
    dims = (groups, rows, inner, cols)
    assert target.matmul_plan(*dims, dtype) == oracle(target, dims, dtype)


def test_a_tighter_bound_trades_cycles_for_memory():
    dims = (1, 64, 1024, 64)
    costs = []
    for share in (1.0, 0.3, 0.1, 0.03):
        target = TileTarget(IpuModel(tiles_per_ipu=64, bytes_per_tile=64 * 1024,
                                     available_memory_proportion=share))
        costs.append(target.matmul_cost(*dims, "float16", target.matmul_plan(*dims, "float16")))
    temps = [c.temp_bytes for c in costs]
    cycles = [c.cycles for c in costs]
    assert temps == sorted(temps, reverse=True) and temps[0] > temps[-1]
    assert cycles == sorted(cycles) and cycles[0] < cycles[-1]


@pytest.mark.parametrize("share", [-0.1, 1.5, "0.6", True, float("nan")])
def test_a_proportion_outside_zero_to_one_is_refused(share):
    with pytest.raises(TargetError, match="available_memory_proportion"):
        IpuModel(available_memory_proportion=share)
    with pytest.raises(OptionError, match="available_memory_proportion"):
        SessionOptions(available_memory_proportion=share)
