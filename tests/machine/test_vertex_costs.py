"""A matmul partition's compute as Poplibs estimates its vertices (cpp_hooks/vertex_costs.hpp):
never quicker than the peak rate, never cheaper for more work, a worked example by hand, and
beside a per-tile formula fitted on a real IPU (the ELK artifact's)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from machine_oracles import all_partitions

from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.machine.interface import MatmulPartition

WHOLE = MatmulPartition(1, 1, 1, 1)
DTYPES = st.sampled_from(["float16", "float32"])


def compute(dims: tuple[int, int, int, int], dtype: str, partition: MatmulPartition = WHOLE,
            **figures: object) -> int:
    target = TileTarget(IpuModel(tiles_per_ipu=64, **figures))
    return target.matmul_cost(*dims, dtype, partition).compute_cycles


def test_worked_example_by_hand():
    """A [6, 16] x [16, 16] half matmul on one tile. AMP vertex with the operands swapped:
    the 16 columns are the field, the six rows output channels (one group of 16), the 16
    inner channels one input group. Four workers take three columns (37 - 7 = 30 worker
    cycles), two take two (40 + 1 - 7 = 34); six times the slowest, but at least 14 more
    than six times the quickest: 218. The supervisor adds 50 + 6 * 7 (retention) + 13 + 11
    + (18 + 7 + 32 weight loads) = 173: 391. The cast of 96 float partials to half: 16 per
    worker, max(8, 4) + 26 = 34 worker cycles, 204 tile cycles. In all 595."""
    assert compute((1, 6, 16, 16), "float16") == 595


def test_peak_rate_alone_is_the_former_model():
    assert compute((1, 6, 16, 16), "float16", vertex_costs=False) == math.ceil(6 * 16 * 16 / 64)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 300), st.integers(1, 300), st.integers(1, 300), DTYPES)
def test_never_quicker_than_the_peak_rate(groups, rows, inner, cols, dtype):
    peak = IpuModel().macs_per_cycle(dtype)
    assert compute((groups, rows, inner, cols), dtype) >= math.ceil(
        groups * rows * inner * cols / peak)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2), st.integers(1, 200), st.integers(1, 200), st.integers(1, 200),
       st.integers(0, 3), st.integers(1, 40))
def test_more_work_never_costs_less(groups, rows, inner, cols, axis, more):
    """Float operands on one tile (no cast, no reduction): the AMP estimate alone, which grows
    with every axis of the block. On a tile whose memory holds the whole block: one too
    large for it runs in serial steps (``MatmulCost.serial``), and a block a little larger
    may divide into its steps better and cost less, in Poplibs as here."""
    dims = [groups, rows, inner, cols]
    bigger = list(dims)
    bigger[axis] += more
    roomy = {"bytes_per_tile": 2**26}  # [2, 240, 240, 240] float operands and partials fit
    assert compute(tuple(bigger), "float32", **roomy) >= compute(tuple(dims), "float32",
                                                                 **roomy)


def test_a_block_over_the_tile_memory_runs_in_serial_steps():
    """The case that shows why the law above needs the room: [2, 193, K, 184] float on one
    624 KiB tile runs in 4 steps of 49 rows at K = 162 and in 5 steps of 39 at K = 168:
    28 output-channel groups of 8 against 25, so the larger block costs less."""
    steps = {inner: TileTarget(IpuModel(tiles_per_ipu=64)).matmul_cost(
        2, 193, inner, 184, "float32", WHOLE).serial for inner in (162, 168)}
    assert (steps[162], steps[168]) == (4, 5)
    assert compute((2, 193, 168, 184), "float32") < compute((2, 193, 162, 184), "float32")


def test_a_split_inner_axis_adds_the_reduce_vertex():
    """Four tiles each multiply a quarter of the inner axis and add a quarter of the partials:
    more than the AMP vertex of a quarter, less than the whole block on one tile."""
    quarter = compute((1, 64, 64, 64), "float32", MatmulPartition(1, 1, 4, 1))
    assert compute((1, 64, 16, 64), "float32") < quarter < compute((1, 64, 64, 64), "float32")


def elk_tile_cycles(m: int, k: int, n: int) -> int:
    """The ELK artifact's FP16 matmul on one Mk2 tile, fitted on a real IPU."""
    c = math.ceil
    return (2 * 12 * c(m / 6) * c(k / 16) * c(n / 16) + 514 * c(k / 16) * c(n / 16)
            + 113 * c(n / 16) + 173)


def test_within_a_factor_of_the_per_tile_formula_fitted_on_a_real_ipu():
    """From 16³ to 256³ the estimate lies within 0.6-1.2 of ELK's fitted cycles (it reads
    0.68-0.86; the peak rate alone reads 0.07-0.66)."""
    for size in (16, 32, 64, 128, 256):
        ratio = compute((1, size, size, size), "float16") / elk_tile_cycles(size, size, size)
        assert 0.6 <= ratio <= 1.2, (size, ratio)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 40), st.integers(1, 40),
       st.integers(1, 24), DTYPES)
def test_the_plan_is_the_cheapest_partition_under_vertex_costs(groups, rows, inner, cols,
                                                               tiles, dtype):
    """Brute force over every admissible partition, each costed by the same estimate."""
    target = TileTarget(IpuModel(tiles_per_ipu=tiles))
    dims = (groups, rows, inner, cols)
    best = min(all_partitions(*dims, tiles),
               key=lambda p: (target.matmul_cost(*dims, dtype, p).cycles, p.tiles_used,
                              p.as_tuple()))
    assert target.matmul_plan(*dims, dtype) == best
