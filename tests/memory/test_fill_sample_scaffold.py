"""The scaffold of a fill-then-sample pair, laid out with array operations, is the one the
slot-by-slot walk gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.memory.fill_sample import EMPTY, _scaffold


def walked(sources: list[int], in_size: int) -> tuple[int, list[int], list[int]]:
    """Slot by slot: an empty output takes the next slot; one copying input s takes a slot
    for each input not yet placed up to s and reads the last; unplaced inputs follow."""
    inputs, reads, placed, slot = [], [], 0, 0
    for source in sources:
        if source == EMPTY:
            reads.append(slot)
            slot += 1
            continue
        while placed <= source:
            inputs.append(slot)
            slot += 1
            placed += 1
        reads.append(slot - 1)
    while placed < in_size:
        inputs.append(slot)
        slot += 1
        placed += 1
    return slot, inputs, reads


@st.composite
def axes(draw):
    in_size = draw(st.integers(0, 12))
    copied = sorted(draw(st.sets(st.integers(0, max(in_size - 1, 0)), max_size=in_size))
                    if in_size else [])
    sources: list[int] = []
    for source in copied:
        sources += [EMPTY] * draw(st.integers(0, 2)) + [source]
    sources += [EMPTY] * draw(st.integers(0, 2))
    return sources, in_size


@settings(max_examples=400, deadline=None)
@given(axes())
def test_the_scaffold_is_the_slot_by_slot_walk(case):
    sources, in_size = case
    size, inputs, reads = _scaffold(np.asarray(sources, dtype=np.int64), in_size)
    want_size, want_inputs, want_reads = walked(sources, in_size)
    assert size == want_size
    assert inputs.tolist() == want_inputs and inputs.dtype == np.int64
    assert reads.tolist() == want_reads and reads.dtype == np.int64
