"""Exact set algebra on one bounded dimension: a DisjointSetts restricted to ``[0, size)``.

Every function computes index arrays with numpy and compresses the answer back with
:meth:`DisjointSetts.from_indices`, so results are exact, compact and in canonical form (a
deterministic function of the index set and the size). Functions are memoised on the
hashable ``(DisjointSetts, size)`` arguments because regions reuse the same few patterns;
cached arrays are returned read-only.

Sets that are one run ``[lo, hi)`` in canonical form (EMPTY, FULL, or the single stripe
``(hi - lo, size - (hi - lo), lo)`` that compression gives one run) are common: every slab of
a Concat or a Slice is one. For them counting, intersecting, sampling and filling are
computed from the two bounds, with the very result the index arrays would give, so their
cost does not grow with the dimension (a Concat of k inputs would otherwise pay k times its
axis length).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from popart_unwind.errors import RegionError
from popart_unwind.memory.sett import DisjointSetts, Sett, Stripe

__all__ = [
    "EMPTY",
    "FULL",
    "canonical",
    "complement",
    "contains",
    "count",
    "equivalent_within",
    "fill_into",
    "from_sorted",
    "intersect",
    "interval",
    "is_empty",
    "is_full",
    "mask",
    "ons",
    "reverse",
    "sample",
    "strided",
    "subtract",
    "union",
]

#: The empty set and the whole dimension in canonical form (FULL for every size >= 1).
EMPTY = DisjointSetts([])
FULL = DisjointSetts([Sett([])])

_CACHE = 8192
#: Bitmaps and index arrays are cached only for dimensions up to this size, and only this
#: many of them, so the caches stay small; results (DisjointSetts) are always cached.
_ARRAY_CACHE = 1024
_ARRAY_CACHE_SIZE = 1 << 16


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def from_sorted(indices: np.ndarray, size: int) -> DisjointSetts:
    """Canonical form of an index array that is already sorted, unique and in range."""
    if indices.size == 0:
        return EMPTY
    if indices.size == size:
        return FULL
    return DisjointSetts.from_indices(indices, size)


def _run(ds: DisjointSetts, size: int) -> tuple[int, int] | None:
    """``(lo, hi)`` if ``ds`` is, in canonical form, the one run ``[lo, hi)`` of
    ``[0, size)`` (empty and full included); None for every other form."""
    if ds == FULL:
        return 0, size
    setts = ds.setts
    if not setts:
        return 0, 0
    if len(setts) != 1 or len(setts[0].stripes) != 1:
        return None
    stripe = setts[0].stripes[0]
    if stripe.period != size or stripe.phase + stripe.on > size:
        return None
    return stripe.phase, stripe.phase + stripe.on


def _run_form(lo: int, hi: int, size: int) -> DisjointSetts:
    """The canonical form of ``[lo, hi)`` clipped to ``[0, size)``, as from_sorted gives it."""
    lo, hi = max(lo, 0), min(hi, size)
    if hi <= lo:
        return EMPTY
    if hi - lo == size:
        return FULL
    return DisjointSetts([Sett([Stripe(hi - lo, size - (hi - lo), lo)])])


def _mask(ds: DisjointSetts, size: int) -> np.ndarray:
    return _readonly(np.ones(size, dtype=bool) if ds == FULL else ds.mask(size))


def _ons(ds: DisjointSetts, size: int) -> np.ndarray:
    run = _run(ds, size)
    if run is not None:
        return _readonly(np.arange(*run, dtype=np.int64))
    return _readonly(np.flatnonzero(mask(ds, size)).astype(np.int64))


_mask_cached = lru_cache(maxsize=_ARRAY_CACHE)(_mask)
_ons_cached = lru_cache(maxsize=_ARRAY_CACHE)(_ons)


def mask(ds: DisjointSetts, size: int) -> np.ndarray:
    """Read-only bitmap of ``ds`` over ``[0, size)``."""
    return (_mask_cached if size <= _ARRAY_CACHE_SIZE else _mask)(ds, size)


def ons(ds: DisjointSetts, size: int) -> np.ndarray:
    """Read-only sorted int64 on indices of ``ds`` within ``[0, size)``."""
    return (_ons_cached if size <= _ARRAY_CACHE_SIZE else _ons)(ds, size)


def count(ds: DisjointSetts, size: int) -> int:
    run = _run(ds, size)
    if run is not None:
        return run[1] - run[0]
    return int(ons(ds, size).size)


def is_empty(ds: DisjointSetts, size: int) -> bool:
    return count(ds, size) == 0


def is_full(ds: DisjointSetts, size: int) -> bool:
    return count(ds, size) == size


@lru_cache(maxsize=_CACHE)
def canonical(ds: DisjointSetts, size: int) -> DisjointSetts:
    """The canonical (compressed) form of ``ds`` within ``[0, size)``."""
    run = _run(ds, size)
    if run is not None:
        return _run_form(*run, size)
    return from_sorted(ons(ds, size), size)


def interval(lo: int, hi: int, size: int) -> DisjointSetts:
    """``[lo, hi)`` within ``[0, size)``."""
    return _run_form(lo, hi, size)


def strided(stride: int, size: int, start: int = 0) -> DisjointSetts:
    """``start, start + stride, ...`` within ``[0, size)``."""
    if stride < 1:
        raise RegionError(f"stride must be >= 1, got {stride}")
    return from_sorted(np.arange(start, size, stride, dtype=np.int64), size)


@lru_cache(maxsize=_CACHE)
def intersect(a: DisjointSetts, b: DisjointSetts, size: int) -> DisjointSetts:
    run_a, run_b = _run(a, size), _run(b, size)
    if run_a is not None and run_b is not None:
        return _run_form(max(run_a[0], run_b[0]), min(run_a[1], run_b[1]), size)
    return from_sorted(np.flatnonzero(mask(a, size) & mask(b, size)), size)


@lru_cache(maxsize=_CACHE)
def union(a: DisjointSetts, b: DisjointSetts, size: int) -> DisjointSetts:
    return from_sorted(np.flatnonzero(mask(a, size) | mask(b, size)), size)


@lru_cache(maxsize=_CACHE)
def subtract(a: DisjointSetts, b: DisjointSetts, size: int) -> DisjointSetts:
    """``a \\ b``."""
    return from_sorted(np.flatnonzero(mask(a, size) & ~mask(b, size)), size)


@lru_cache(maxsize=_CACHE)
def complement(a: DisjointSetts, size: int) -> DisjointSetts:
    return from_sorted(np.flatnonzero(~mask(a, size)), size)


@lru_cache(maxsize=_CACHE)
def contains(a: DisjointSetts, b: DisjointSetts, size: int) -> bool:
    """Whether ``b`` is a subset of ``a``."""
    run_a, run_b = _run(a, size), _run(b, size)
    if run_a is not None and run_b is not None:
        return run_b[0] >= run_b[1] or (run_a[0] <= run_b[0] and run_b[1] <= run_a[1])
    return not bool((mask(b, size) & ~mask(a, size)).any())


@lru_cache(maxsize=_CACHE)
def equivalent_within(a: DisjointSetts, b: DisjointSetts, size: int) -> bool:
    """Whether ``a`` and ``b`` agree on ``[0, size)``."""
    return bool(np.array_equal(mask(a, size), mask(b, size)))


@lru_cache(maxsize=_CACHE)
def reverse(a: DisjointSetts, size: int) -> DisjointSetts:
    """Image under ``x -> size - 1 - x``."""
    return from_sorted(np.flatnonzero(mask(a, size)[::-1]), size)


@lru_cache(maxsize=_CACHE)
def sample(a: DisjointSetts, where: DisjointSetts, size: int) -> DisjointSetts:
    """Elements of ``a`` inside ``where``, renumbered by rank in ``where``.

    The result lives in ``[0, count(where, size))``.
    """
    run_a, run_where = _run(a, size), _run(where, size)
    if run_a is not None and run_where is not None:
        lo, hi = run_where
        return _run_form(run_a[0] - lo, run_a[1] - lo, hi - lo)
    kept = mask(a, size)[ons(where, size)]
    return from_sorted(np.flatnonzero(kept), int(kept.size))


@lru_cache(maxsize=_CACHE)
def fill_into(a: DisjointSetts, scaffold: DisjointSetts, size: int) -> DisjointSetts:
    """Inverse of :func:`sample`: element j of ``a`` goes to the j-th on index of scaffold.

    ``a`` lives in ``[0, count(scaffold, size))``; the result lives in ``[0, size)``.
    """
    run_scaffold = _run(scaffold, size)
    if run_scaffold is not None:
        lo, hi = run_scaffold
        run_a = _run(a, hi - lo)
        if run_a is not None:
            return _run_form(lo + run_a[0], lo + run_a[1], size)
    slots = ons(scaffold, size)
    return from_sorted(slots[ons(a, int(slots.size))], size)
