"""Poplibs' reduce vertices (``machine/reduce_vertices.py``): each estimate worked by hand
from the terms of lib/popops/reduction/CycleEstimationFunctions.cpp, the split over the
workers, and ``ops.reduce.reduction_cycles`` against a per-tile count by brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.cost import evaluate
from popart_unwind.ir import Builder
from popart_unwind.machine.reduce_vertices import (
    WORKERS,
    ReduceWidths,
    continuous_cycles,
    gathered_partials_cycles,
    single_input_cycles,
    strided_cycles,
    tile_reduce_cycles,
    worker_splits,
)
from popart_unwind.ops.reduce import reduction_cycles, statistic_tiles
from popart_unwind.target import IpuModel, TileTarget

HALF = ReduceWidths.of(2, True)
FLOAT = ReduceWidths.of(4, True)


def test_the_widths_poplibs_reads():
    # a 64-bit load: 4 halves or 2 floats; accumulators: 8 halves or 4 floats
    assert (HALF.data_path, HALF.vector, HALF.accumulator) == (4, 4, 8)
    assert (FLOAT.data_path, FLOAT.vector, FLOAT.accumulator) == (2, 2, 4)
    assert ReduceWidths.of(4, False).accumulator == 1  # int32: no accumulators


def test_continuous_by_hand():
    # 3 outputs of 64 halves: 3 · 64/4 loop cycles, no odd partial, 12 a output, 10, and
    # the call's 7
    assert continuous_cycles(3, 64, HALF) == 3 * 16 + 0 + 36 + 10 + 7
    # 5 partials of floats: 2 a loop, the odd one 2 more
    assert continuous_cycles(1, 5, FLOAT) == 1 * 2 + 2 + 12 + 10 + 7


def test_single_input_by_hand():
    # 100 halves added: 8 a loop of 2 cycles (4 a 64-bit load, two loads), the remainder
    # a cycle each, 5 more to store half
    assert single_input_cycles(100, HALF, "ADD") == 3 + 6 + 2 * 100 // 8 + 5 + 4 + 3 + 5
    # 100 floats added: 4 a loop of two loads, no store conversion
    assert single_input_cycles(100, FLOAT, "ADD") == 3 + 6 + 2 * 100 // 4 + 5 + 0 + 3
    # the maximum takes the vector's width, 4 halves, one load a loop
    assert single_input_cycles(10, HALF, "MAX") == 3 + 6 + 10 // 4 + 5 + 2 + 3 + 5


def test_strided_by_hand():
    # 16 half outputs of 10 rows: after the loop 1 + 7 cycles; each outer loop 3 + 8 and
    # one stride of 3 + 9 rows; 4 outputs a loop
    assert strided_cycles(16, 10, HALF, "ADD") == 5 + 11 + 4 * (3 + 8 + 3 + 9)
    # 8 float outputs of 3 rows, the maximum: 2 + 2 after the loop, 2 outputs a loop
    assert strided_cycles(8, 3, FLOAT, "MAX") == 5 + 11 + 4 * (3 + 4 + 3 + 2)


def test_gathered_partials_are_strided_rows_by_hand():
    # 12 half outputs from 5 tiles each: a block of 5 rows of 12. Poplibs' rough estimate,
    # 60 inputs at 4 a cycle (12 outputs: a multiple of 4), 15 + 30, allows at most
    # min(5 // 2, 45 // 4) = 2 pieces, and a second piece must stay below that: no split.
    # One strided vertex: 3 loops of 4 outputs, each 3 + 8 after the loop and 3 + 4 rows.
    assert gathered_partials_cycles(12, 5, HALF, "ADD") == \
        WORKERS * (5 + 11 + 3 * (3 + 8 + 3 + 4))


def test_one_long_row_is_shared_by_the_workers():
    # 1,000 halves to one output: Poplibs' rough estimate is 125 cycles + 30; each further
    # piece is worth it while 60 + 125 / pieces is less, so all six workers take a piece
    assert worker_splits(1, 1, 1000, HALF, "ADD") == [6]
    split = tile_reduce_cycles(1, 1000, False, HALF, "ADD")
    assert split == WORKERS * (single_input_cycles(167, HALF, "ADD")
                               + single_input_cycles(6, HALF, "ADD"))
    assert split < WORKERS * single_input_cycles(1000, HALF, "ADD")
    # a short row is not worth a second stage
    assert worker_splits(1, 1, 40, HALF, "ADD") == [1]


@given(st.integers(1, WORKERS), st.integers(1, 64), st.integers(1, 5000),
       st.sampled_from([HALF, FLOAT]), st.sampled_from(["ADD", "MAX", "SQUARE_ADD"]))
def test_worker_splits_use_idle_workers_only(count, outputs, rows, widths, operation):
    splits = worker_splits(count, outputs, rows, widths, operation)
    assert len(splits) == count and min(splits) >= 1
    assert sum(splits) <= max(WORKERS, count)
    # a piece keeps at least two rows
    assert all(s == 1 or rows // s >= 2 for s in splits)


@given(st.integers(1, 300), st.integers(1, 300), st.booleans(),
       st.sampled_from(["float16", "float32"]))
def test_without_vertex_costs_a_reduction_adds_nothing(outputs, partials, strided, dtype):
    assert IpuModel(vertex_costs=False).reduce_cycles(outputs, partials, dtype, "ADD",
                                                      strided) == 0
    assert IpuModel().reduce_cycles(outputs, partials, dtype, "ADD", strided) > 0


def _oracle(shape, axes, tiles, dtype, operations, target):
    """Each tile's outputs and inputs counted with Python sets; then each output's tiles."""
    kept = [1 if a in axes else d for a, d in enumerate(shape)]
    coords = np.indices(shape).reshape(len(shape), -1)
    kept_coords = [np.zeros_like(c) if a in axes else c for a, c in enumerate(coords)]
    group = np.ravel_multi_index(kept_coords, kept) if shape else np.zeros(1, np.int64)
    held: dict[int, set] = {}
    count: dict[int, int] = {}
    holders: dict[int, set] = {}
    for element, tile in enumerate(tiles.tolist()):
        held.setdefault(tile, set()).add(int(group[element]))
        count[tile] = count.get(tile, 0) + 1
        holders.setdefault(int(group[element]), set()).add(tile)
    strided = len(shape) - 1 not in axes
    cycles = 0
    num_groups = math.prod(kept)
    results = None
    if max(len(h) for h in holders.values()) > 1:
        results = statistic_tiles(group, tiles, num_groups, dtype, target)
    for operation in operations:
        cycles += max(target.reduce_cycles(len(held[t]), -(-count[t] // len(held[t])), dtype,
                                           operation, strided) for t in held)
        if results is not None:
            outputs: dict[int, int] = {}
            partials: dict[int, int] = {}
            for g in range(num_groups):
                r = int(results[g])
                outputs[r] = outputs.get(r, 0) + 1
                partials[r] = partials.get(r, 0) + len(holders[g])
            cycles += max(target.gathered_partials_cycles(outputs[r], -(-partials[r] // outputs[r]),
                                                          dtype, operation) for r in outputs)
    return cycles


@st.composite
def _reductions(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    axes = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1))))
    size = math.prod(shape)
    tiles = np.array(draw(st.lists(st.integers(0, 5), min_size=size, max_size=size)),
                     np.int16)
    return shape, axes, tiles


@settings(max_examples=60, deadline=None)
@given(_reductions(), st.sampled_from(["float16", "float32"]),
       st.sampled_from([("ADD",), ("MAX", "ADD"), ("ADD", "SQUARE_ADD")]))
def test_reduction_cycles_count_each_tiles_outputs_as_brute_force_does(case, dtype,
                                                                      operations):
    shape, axes, tiles = case
    target = TileTarget(IpuModel(tiles_per_ipu=6))
    assert reduction_cycles(shape, axes, tiles, dtype, operations, target) == \
        _oracle(shape, axes, tiles, dtype, operations, target)


@pytest.mark.parametrize(("op_type", "axes", "passes", "operations"), [
    ("ReduceSum", [0], (), ("ADD",)),
    ("ReduceMax", [1], (), ("MAX",)),
    ("ReduceL1", [1], ("ABSOLUTE",), ("ADD",)),
    ("ReduceLogSumExp", [0], (None, "EXPONENT"), ("MAX", "ADD")),
])
def test_the_walk_charges_a_reduce_op_its_vertices(op_type, axes, passes, operations):
    b = Builder(opset=11)  # axes an attribute of every Reduce op
    x = b.add_input_tensor("float32", [16, 64], "x")
    b.add_output_tensor(b.op(op_type, [x], {"axes": axes, "keepdims": 0}))
    ir = b.ir()
    target = TileTarget(IpuModel(tiles_per_ipu=4))
    # rows 0-7 on tile 0, rows 8-15 on tile 1: a sum over rows leaves partials on both
    tiles = np.repeat(np.array([0, 1], np.int16), 8 * 64)
    [row] = [r for r in evaluate(ir, target, {("", "x"): tiles}).ops if r.type == op_type]
    expected = target.compound_cycles(8 * 64, "float32", passes) if passes else 0
    expected += reduction_cycles((16, 64), tuple(axes), tiles, "float32", operations, target)
    assert row.compute_cycles == expected
    assert reduction_cycles((16, 64), tuple(axes), tiles, "float32", operations, target) > 0
