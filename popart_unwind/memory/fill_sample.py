"""The canonical form of a neighbouring SettFillInto and SettSample, in either order.

Both ``SettSample(R) -> SettFillInto(Q)`` and ``SettFillInto(Q) -> SettSample(R)`` act on
each axis independently: every output index either copies one input index (in increasing
order) or is empty. That per-axis *source* list is the pair's whole meaning, so building the
ops back from it gives one form for all pairs of the same meaning:

* no empty outputs on any axis: a single SettSample of the copied inputs;
* every input copied: a single SettFillInto onto the non-empty outputs;
* otherwise a SettFillInto into a scaffold that lines up, axis by axis, the empty slots and
  the inputs (each empty slot placed before the inputs skipped to reach the next copied
  one), followed by a SettSample of the slots the output reads.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.memory.chain_ops import ChainOp, Shape, make_op
from popart_unwind.memory.region import Region
from popart_unwind.memory.sett import DisjointSetts

#: Per axis, for each output index, the input index it copies or -1 when it is empty.
Sources = list[np.ndarray]

EMPTY = -1


def region_from_ons(shape: Shape, ons: list[np.ndarray]) -> Region:
    """The product region whose axis ``d`` holds exactly the indices ``ons[d]``."""
    return Region(
        shape, [DisjointSetts.from_indices(idx, size) for idx, size in zip(ons, shape, strict=True)]
    )


def sample_fill_sources(sample: Region, fill: Region) -> Sources:
    """Per-axis sources of ``SettSample(sample) -> SettFillInto(fill)``."""
    sources = []
    for kept, placed, size in zip(sample.ons_arrays(), fill.ons_arrays(), fill.shape,
                                  strict=True):
        axis = np.full(size, EMPTY, dtype=np.int64)
        axis[placed] = kept
        sources.append(axis)
    return sources


def fill_sample_sources(fill: Region, sample: Region) -> Sources:
    """Per-axis sources of ``SettFillInto(fill) -> SettSample(sample)``."""
    sources = []
    for placed, read, size in zip(fill.ons_arrays(), sample.ons_arrays(), fill.shape,
                                  strict=True):
        input_at = np.full(size, EMPTY, dtype=np.int64)
        input_at[placed] = np.arange(len(placed))
        sources.append(input_at[read])
    return sources


def _scaffold(axis_sources: np.ndarray, in_size: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Lay out one axis: returns (scaffold size, input slots, slots the output reads).

    Walking the outputs in order, an empty one takes the next slot, and one copying input
    ``s`` takes a slot for each input up to ``s`` not placed yet, reading the last of them;
    the inputs never copied follow. Computed with array operations (an axis as long as a
    Concat of thousands of inputs is laid out once per input)."""
    sources = np.asarray(axis_sources, dtype=np.int64).reshape(-1)
    copies = sources != EMPTY
    reached = np.maximum.accumulate(np.where(copies, sources, -1)) if sources.size else sources
    before = np.concatenate(([-1], reached[:-1])) if sources.size else sources
    taken = np.where(copies, np.maximum(sources - before, 0), 1)
    read_slots = np.cumsum(taken) - 1
    placed = int(reached[-1]) + 1 if sources.size else 0
    size = int(read_slots[-1]) + 1 + in_size - placed if sources.size else in_size
    is_input = np.ones(size, dtype=bool)
    is_input[read_slots[~copies]] = False
    return size, np.flatnonzero(is_input).astype(np.int64), read_slots.astype(np.int64)


def fill_sample_ops(in_shape: Shape, sources: Sources) -> list[ChainOp]:
    """The canonical ops (at most a fill then a sample) with the meaning ``sources``."""
    layouts = [_scaffold(axis, size) for axis, size in zip(sources, in_shape, strict=True)]
    scaffold_shape = tuple(size for size, _, _ in layouts)
    ops: list[ChainOp] = []
    if scaffold_shape != tuple(in_shape):
        placed = region_from_ons(scaffold_shape, [slots for _, slots, _ in layouts])
        ops.append(make_op("SettFillInto", in_shape, placed))
    out_shape = tuple(len(axis) for axis in sources)
    if out_shape != scaffold_shape:
        read = region_from_ons(scaffold_shape, [slots for _, _, slots in layouts])
        ops.append(make_op("SettSample", scaffold_shape, read))
    return ops
