"""Poplibs' reduce vertices: what one tile spends reducing what it holds, as Poplibs
estimates it (lib/popops/reduction/CycleEstimationFunctions.cpp) and splits it over its
workers (lib/popops/reduction/ReductionConnection.cpp).

A reduction reaches a tile in one of two shapes, which decide the vertex:

- *continuous*: each output's inputs on the tile lie side by side (the reduced axes are the
  innermost: a softmax's row, a layer norm's features) — ``ReduceAllRegionsContinuous``,
  or, for an output a worker reduces alone, the single-input vertex;
- *strided*: each input row on the tile holds one element of many outputs (an outer axis
  reduced: a bias gradient's sum over tokens) — the strided vertex.

Partials arriving from other tiles are gathered into rows, one per source tile, and
reduced as strided rows. Counts in, cycles out: which tile holds what is the caller's.

Approximate, and said so where each figure is used: a tile's pieces are taken as equal
(the busiest tile's outputs, each with the mean of its partials), the partials' type is the
input's (Poplibs may reduce half inputs into float partials), and the second stage on a
tile runs as its own compute set without the sync between them.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Worker contexts of a tile; each runs at a sixth of the tile's issue rate.
WORKERS = 6
#: ``approximateOverheadCyclesForReduction``: the fixed cycles Poplibs' worker split
#: charges a reduction done in one stage (twice that when split over workers).
SPLIT_OVERHEAD_CYCLES = 30
#: ``getMaxSplit``: no piece of a split reduction takes fewer cycles than this.
SPLIT_MIN_CYCLES = 4
#: The popops operations whose vertices accumulate (a wider vector per instruction).
ACCUMULATING = frozenset({"ADD", "SQUARE_ADD"})
#: The strided vertex's cycles after its inner loop (``cyclesLoopPost``) for half
#: partials: the loop's end, 1, and storing the result in half, 7 — ADD's, MAX's and
#: MIN's alike in Poplibs' table, which has no entry for SQUARE_ADD or MUL (taken as the
#: same).
STRIDED_POST_HALF_CYCLES = 1 + 7


@dataclass(frozen=True)
class ReduceWidths:
    """The vector widths Poplibs' estimates read, in elements of the partials' type:
    ``data_path`` (64 bits a load), ``vector`` (``Target::getVectorWidth``) and
    ``accumulator`` (``getAccVectorWidth``: 8 half, 4 float, 1 for other types)."""

    data_path: int
    accumulator: int
    is_half: bool
    is_float32: bool

    @staticmethod
    def of(element_bytes: int, is_float_type: bool) -> ReduceWidths:
        data_path = max(1, 8 // element_bytes)
        half = is_float_type and element_bytes == 2
        single = is_float_type and element_bytes == 4
        return ReduceWidths(data_path, 8 if half else 4 if single else 1, half, single)

    @property
    def vector(self) -> int:
        """``Target::getVectorWidth``: on the IPU, one 64-bit vector, the data path's."""
        return self.data_path

    def op_width(self, operation: str) -> int:
        """Elements one instruction of ``operation`` takes: the accumulators' for ADD and
        SQUARE_ADD, the vector's otherwise."""
        return self.accumulator if operation in ACCUMULATING else self.vector


def continuous_cycles(outputs: int, partials: int, widths: ReduceWidths) -> int:
    """``getCycleEstimateReduceAllRegionsContinuous``: ``outputs`` outputs, each of
    ``partials`` inputs side by side. (Poplibs passes the vertex's outputs minus one as the
    count; the count itself is used here.)"""
    per_loop = min(widths.accumulator, widths.data_path)
    cycles = outputs * (partials // per_loop) + (2 if partials & 1 else 0)
    return cycles + 12 * outputs + 10 + 7


def single_input_cycles(partials: int, widths: ReduceWidths, operation: str) -> int:
    """``getCyclesEstimateForSingleInput``: one output of ``partials`` inputs side by side,
    its result stored in the partials' type."""
    op_width = widths.op_width(operation)
    per_cycle = min(op_width, widths.data_path)
    loads = max(1, op_width // per_cycle)
    per_loop = per_cycle * loads
    cycles = 3 + 6 + max(loads, 1) * partials // per_loop + 5 + partials % per_loop + 3
    return cycles + (0 if widths.is_float32 else 5)


def strided_cycles(outputs: int, partials: int, widths: ReduceWidths, operation: str) -> int:
    """``getCyclesEstimateForStridedReduce``: ``outputs`` consecutive outputs, each the
    reduction of ``partials`` rows, one outer stride, the row stride taken as a whole
    number of 64-bit words (so a loop takes the narrower of the operation's vector and the
    data path, both powers of two)."""
    # after the loop: half partials as the table gives; others the loop's end (3 for ADD,
    # else 2) and a store of 2
    float_post = (3 if operation == "ADD" else 2) + 2
    post = STRIDED_POST_HALF_CYCLES if widths.is_half else float_post
    outer = 3 + post + 3 + max(partials - 1, 0)
    per_loop = min(widths.op_width(operation), widths.data_path)
    return 5 + 11 + outer * -(-outputs // per_loop)


def _ops_per_cycle(outputs: int, widths: ReduceWidths, operation: str) -> int:
    """``opsPerCycle``: the rough elements per cycle Poplibs' worker split assumes."""
    vector = widths.vector * (2 if operation in ACCUMULATING
                              and (widths.is_half or widths.is_float32) else 1)
    if outputs == 0:
        return 1
    width = vector
    while width:
        if outputs == width:
            return vector
        width //= 2
    width = vector
    while width:
        if outputs % width == 0:
            return width
        width //= 2
    return 1


def worker_splits(count: int, outputs: int, rows: int, widths: ReduceWidths,
                  operation: str) -> list[int]:
    """``splitTwoStageReductionsBetweenWorkers`` for ``count`` equal reductions of
    ``outputs`` outputs and ``rows`` rows each: how many pieces each is cut into so that
    idle workers share the slowest, while a cut still pays for its second stage."""
    rough = -(-(outputs * rows) // _ops_per_cycle(outputs, widths, operation))
    estimate = [SPLIT_OVERHEAD_CYCLES + rough] * count
    most = min(rows // 2, estimate[0] // SPLIT_MIN_CYCLES)
    splits = [1] * count
    one_stage = max(estimate)
    free = max(WORKERS - count, 0)
    while free:
        slowest = estimate.index(max(estimate))
        if splits[slowest] + 1 >= most:
            break
        after = 2 * SPLIT_OVERHEAD_CYCLES + rough // (splits[slowest] + 1)
        if after >= estimate[slowest]:
            break
        estimate[slowest] = after
        splits[slowest] += 1
        free -= 1
    return [1] * count if max(estimate) == one_stage else splits


def tile_reduce_cycles(outputs: int, partials: int, strided: bool, widths: ReduceWidths,
                       operation: str) -> int:
    """Tile cycles of reducing ``outputs`` outputs of ``partials`` inputs each, held on
    one tile: Poplibs' split over the six workers (each worker's vertex at a sixth of the
    tile's rate, the slowest one bounding the tile), and, where idle workers share a
    reduction, the second stage that adds their pieces."""
    if outputs <= 0 or partials <= 0:
        return 0
    if strided:
        # One reduction of ``outputs`` columns: rows shared by idle workers.
        pieces = worker_splits(1, outputs, partials, widths, operation)[0]
        first = strided_cycles(outputs, -(-partials // pieces), widths, operation)
        if pieces == 1:
            return WORKERS * first
        second = strided_cycles(-(-outputs // WORKERS), pieces, widths, operation)
        return WORKERS * (first + second)
    if outputs >= WORKERS:
        # Equal reductions: consecutive ones to each worker (``distributeReductions
        # BetweenWorkers``), each worker's run one continuous vertex.
        return WORKERS * continuous_cycles(-(-outputs // WORKERS), partials, widths)
    splits = worker_splits(outputs, 1, partials, widths, operation)
    most = max(splits)
    first = single_input_cycles(-(-partials // most), widths, operation)
    if most == 1:
        return WORKERS * first
    return WORKERS * (first + single_input_cycles(most, widths, operation))


def gathered_partials_cycles(outputs: int, partials: int, widths: ReduceWidths,
                             operation: str) -> int:
    """Tile cycles of reducing the partials other tiles sent: ``outputs`` outputs on this
    tile, each from ``partials`` partials. Poplibs gathers partials of equal count into
    one block of rows, a row per source tile (``intermediateToOutput``,
    lib/popops/reduction/ReductionStages.cpp), and reduces it as strided rows, shared by
    the workers as a tile's own strided reduction is. (Partials of unequal counts, or of
    widths that are no whole grain, take Poplibs' general vertex instead, with a pointer
    fetched per partial: slower, not modelled.)"""
    return tile_reduce_cycles(outputs, partials, True, widths, operation)
