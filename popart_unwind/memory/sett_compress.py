"""Compression of a bounded index set into a few Setts (behind ``DisjointSetts.from_indices``).

The input is cut into maximal runs of consecutive indices. A *progression* is a list of runs
that are the runs ``[t0 + i*S, t0 + i*S + L)`` of one stripe, except that the first run may
be only the tail of its pattern run and the last run only the head (so a slice of a strided
pattern is still one progression; any two runs form one). Forms produced, within
``[0, size)``:

* no runs: no Setts; every index: one Sett with no stripe;
* one run ``[a, b)``: one stripe ``(b - a, size - (b - a), a)``;
* one progression: the single stripe ``(L, S - L, t0)`` when the pattern has no other run in
  ``[0, size)``, else an outer stripe bounding the window ``[first start, last end)`` around
  the inner stripe ``(L, S - L, t0 - first start)``;
* otherwise either the runs dealt round-robin into q classes (the smallest q <= ``Q_MAX``
  for which every class is a progression: periodic run sequences such as the intersection
  of two strides) or greedy maximal consecutive progressions, whichever gives fewer Setts.
  The worst case is one Sett per two runs.

With several Setts, every member repeats with period ``size`` (a single-level stripe is used
only when its period divides ``size``), so the members are disjoint on the whole integer line
and not only within ``[0, size)``. The output is a deterministic function of the input.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Q_MAX", "compress"]

#: Largest number of round-robin classes tried for periodic run sequences.
Q_MAX = 16

StripeTuple = tuple[int, int, int]
Fit = tuple[int, int, int]  # (L, S, t0)


def runs_of(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and (exclusive) ends of the maximal runs of a sorted unique index array."""
    if idx.size == 0:
        return idx, idx
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = idx[np.concatenate(([0], breaks))]
    ends = idx[np.concatenate((breaks - 1, [idx.size - 1]))] + 1
    return starts, ends


def fit_progression(s: np.ndarray, e: np.ndarray) -> Fit | None:
    """``(L, S, t0)`` if the runs (at least two) form a progression, else None."""
    lens = e - s
    if len(s) == 2:
        if lens[0] >= lens[1]:
            return int(lens[0]), int(s[1] - s[0]), int(s[0])
        length = int(lens[1])
        t0 = int(e[0]) - length
        return length, int(s[1]) - t0, t0
    length, step = int(lens[1]), int(s[2] - s[1])
    t0 = int(s[1]) - step
    if e[0] != t0 + length or s[0] < t0 or lens[-1] > length:
        return None
    if not (lens[1:-1] == length).all() or not (np.diff(s[1:]) == step).all():
        return None
    return length, step, t0


def _interval(a: int, b: int, size: int) -> tuple[StripeTuple, ...]:
    if a == 0 and b == size:
        return ()
    return ((b - a, size - (b - a), a),)


def _progression(fit: Fit, n_runs: int, first: int, end: int, size: int, multi: bool):
    """The Sett (stripe tuples) of one progression spanning ``[first, end)``."""
    length, step, t0 = fit
    t_last = t0 + (n_runs - 1) * step
    alone = (
        t0 - step + length <= 0
        and first == max(t0, 0)
        and t_last + step >= size
        and end == min(t_last + length, size)
    )
    inner_period_ok = not multi or size % step == 0
    if alone and inner_period_ok:
        return ((length, step - length, t0 % step),)
    width = end - first
    return ((width, size - width, first), (length, step - length, (t0 - first) % step))


def _group_sett(s: np.ndarray, e: np.ndarray, fit: Fit | None, size: int, multi: bool):
    if len(s) == 1:
        return _interval(int(s[0]), int(e[0]), size)
    assert fit is not None
    return _progression(fit, len(s), int(s[0]), int(e[-1]), size, multi)


def _round_robin(s: np.ndarray, e: np.ndarray, q: int) -> list[Fit | None] | None:
    """Fits of the q classes ``runs[r::q]``, or None if one class is no progression."""
    fits: list[Fit | None] = []
    for r in range(q):
        cs, ce = s[r::q], e[r::q]
        fit = fit_progression(cs, ce) if len(cs) >= 2 else None
        if len(cs) >= 2 and fit is None:
            return None
        fits.append(fit)
    return fits


def _greedy_cuts(s: np.ndarray, e: np.ndarray) -> list[tuple[int, int]]:
    """Cut the runs into maximal consecutive progressions, left to right."""
    starts, lens = s.tolist(), (e - s).tolist()
    m, i, cuts = len(starts), 0, []
    while i < m:
        j = min(i + 2, m)
        if i + 3 <= m and fit_progression(s[i : i + 3], e[i : i + 3]) is not None:
            length, step, j = lens[i + 1], starts[i + 2] - starts[i + 1], i + 3
            while (
                j < m
                and lens[j - 1] == length
                and starts[j] - starts[j - 1] == step
                and lens[j] <= length
            ):
                j += 1
        cuts.append((i, j))
        i = j
    return cuts


def compress(idx: np.ndarray, size: int) -> list[tuple[StripeTuple, ...]]:
    """Stripe tuples of each Sett of a DisjointSetts equal to ``idx`` within [0, size).

    ``idx`` must be sorted, unique and inside ``[0, size)``.
    """
    s, e = runs_of(idx)
    m = len(s)
    if m == 0:
        return []
    if m == 1:
        return [_interval(int(s[0]), int(e[0]), size)]
    whole = fit_progression(s, e)
    if whole is not None:
        return [_progression(whole, m, int(s[0]), int(e[-1]), size, multi=False)]
    cuts = _greedy_cuts(s, e)
    for q in range(2, min(Q_MAX, len(cuts) - 1) + 1):
        fits = _round_robin(s, e, q)
        if fits is not None:
            return [_group_sett(s[r::q], e[r::q], fits[r], size, True) for r in range(q)]
    return [
        _group_sett(
            s[i:j], e[i:j], fit_progression(s[i:j], e[i:j]) if j - i > 1 else None, size, True
        )
        for i, j in cuts
    ]
