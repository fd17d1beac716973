"""One-run sets (a slab of a Concat or a Slice) are computed from their bounds: every answer
must be the very DisjointSetts the index-array path gives, canonical form included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.memory import sett_bounded as sb
from popart_unwind.memory.sett import DisjointSetts

SETTINGS = settings(max_examples=300, deadline=None)


def dense(ds: DisjointSetts, size: int) -> np.ndarray:
    """Membership by the reference rule (``Sett.is_on``), never by the bounds."""
    return np.asarray(ds.mask(size), dtype=bool)


def canonical_of(bits: np.ndarray) -> DisjointSetts:
    """What the index-array path returns for this membership."""
    return sb.from_sorted(np.flatnonzero(bits).astype(np.int64), int(bits.size))


def run_set(lo: int, hi: int, size: int) -> DisjointSetts:
    """``[lo, hi)`` compressed from its indices, as every producer of sets makes it."""
    return DisjointSetts.from_indices(np.arange(lo, hi), size)


@st.composite
def runs(draw, size: int | None = None):
    size = draw(st.integers(0, 40)) if size is None else size
    lo = draw(st.integers(0, size))
    hi = draw(st.integers(lo, size))
    return run_set(lo, hi, size), size


@st.composite
def run_pairs(draw):
    a, size = draw(runs())
    b, _ = draw(runs(size))
    return a, b, size


@SETTINGS
@given(run_pairs())
def test_runs_intersect_count_and_contain_as_index_arrays_do(pair) -> None:
    a, b, size = pair
    ma, mb = dense(a, size), dense(b, size)
    assert sb._run(a, size) is not None and sb._run(b, size) is not None
    assert sb.intersect(a, b, size) == canonical_of(ma & mb)
    assert sb.count(a, size) == int(ma.sum())
    assert sb.ons(a, size).tolist() == np.flatnonzero(ma).tolist()
    assert sb.contains(a, b, size) == bool(not (mb & ~ma).any())
    assert sb.canonical(a, size) == canonical_of(ma)
    assert sb.is_empty(a, size) == (not ma.any())
    assert sb.is_full(a, size) == bool(ma.all())


@SETTINGS
@given(run_pairs(), st.data())
def test_runs_sample_and_fill_as_index_arrays_do(pair, data) -> None:
    a, where, size = pair
    ma, mw = dense(a, size), dense(where, size)
    slots = np.flatnonzero(mw)
    assert sb.sample(a, where, size) == canonical_of(ma[slots])
    part, inner = data.draw(runs(int(slots.size)))
    want = np.zeros(size, dtype=bool)
    want[slots[np.flatnonzero(dense(part, inner))]] = True
    assert sb.fill_into(part, where, size) == canonical_of(want)


@given(st.integers(-5, 45), st.integers(-5, 45), st.integers(0, 40))
@settings(max_examples=300, deadline=None)
def test_interval_is_the_compressed_clipped_range(lo: int, hi: int, size: int) -> None:
    bits = np.zeros(size, dtype=bool)
    bits[max(lo, 0):max(min(hi, size), 0)] = True
    assert sb.interval(lo, hi, size) == canonical_of(bits)


def test_only_the_canonical_one_run_form_is_read_from_its_bounds() -> None:
    size = 12
    assert sb._run(run_set(3, 7, size), size) == (3, 7)
    assert sb._run(sb.FULL, size) == (0, size)
    assert sb._run(sb.EMPTY, size) == (0, 0)
    strided = DisjointSetts.from_indices(range(0, size, 3), size)
    assert sb._run(strided, size) is None
    two_runs = DisjointSetts.from_indices([0, 1, 5, 6, 9], size)
    assert sb._run(two_runs, size) is None
    assert sb._run(run_set(3, 7, size), size + 1) is None  # a period other than the size


@pytest.mark.parametrize("size", [10_000, 1_000_000])
def test_a_slab_of_a_long_axis_is_not_expanded(size: int) -> None:
    """Counting and intersecting slabs of a long axis answers from the bounds alone."""
    a, b = sb.interval(size // 3, size // 2, size), sb.interval(size // 4, size // 3 + 5, size)
    assert sb.count(a, size) == size // 2 - size // 3
    assert sb.intersect(a, b, size) == sb.interval(size // 3, size // 3 + 5, size)
    assert sb.fill_into(sb.interval(1, 3, size // 2 - size // 3), a, size) == sb.interval(
        size // 3 + 1, size // 3 + 3, size)
