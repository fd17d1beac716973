"""Stripe, Sett, DisjointSetts, compression and the bounded 1-D algebra."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import PopartUnwindError, RegionError
from popart_unwind.memory import sett as sett_mod
from popart_unwind.memory import sett_bounded as sb
from popart_unwind.memory.sett import DisjointSetts, Sett, Stripe

SETTINGS = settings(max_examples=250, deadline=None)

stripe_tuples = st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(-20, 20)).filter(
    lambda t: t[0] + t[1] > 0
)
stripe_lists = st.lists(stripe_tuples, max_size=3)
setts = stripe_lists.map(Sett)


# ----- independent references ---------------------------------------------------------------
def scalar_on(stripes: list[tuple[int, int, int]], x: int) -> bool:
    """The nesting rule, one coordinate at a time."""
    coord = x
    for level, (on, off, phase) in enumerate(stripes):
        rel = (coord - phase) % (on + off)
        if rel >= on:
            return False
        coord = rel if level == 0 else min(rel, coord)
    return True


def interval_ons(stripes: list[tuple[int, int, int]], lo: int, hi: int) -> set[int]:
    """Build the runs explicitly: each level's runs restart at, and are clipped to, each
    parent run; the outermost level has one unbounded parent run."""
    runs = [(lo - 1000, hi + 1000)]
    for level, (on, off, phase) in enumerate(stripes):
        period = on + off
        children = []
        for a, b in runs:
            origin = 0 if level == 0 else a
            first = (a - origin - phase - on) // period
            last = (b - origin - phase) // period + 1
            for j in range(first, last + 1):
                start = origin + phase + j * period
                s, e = max(start, a), min(start + on, b)
                if s < e:
                    children.append((s, e))
        runs = children
    return {x for a, b in runs for x in range(max(a, lo), min(b, hi))}


# ----- Stripe ---------------------------------------------------------------------------------
def test_stripe_normalises_phase_and_compares_by_value() -> None:
    s = Stripe(2, 3, -1)
    assert (s.on, s.off, s.phase, s.period) == (2, 3, 4, 5)
    assert s == Stripe(2, 3, 9) and hash(s) == hash(Stripe(2, 3, 4))
    assert s != Stripe(2, 3, 0)
    with pytest.raises(AttributeError):
        s.on = 4  # type: ignore[misc]


@pytest.mark.parametrize("args", [(-1, 2, 0), (2, -1, 0), (0, 0, 0)])
def test_stripe_rejects_bad_values(args: tuple[int, int, int]) -> None:
    with pytest.raises(RegionError, match=rf"on={args[0]}, off={args[1]}"):
        Stripe(*args)


def test_stripe_rejects_non_integers_and_errors_are_value_errors() -> None:
    with pytest.raises(RegionError):
        Stripe(1.5, 1, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Sett([(1,)])
    assert issubclass(RegionError, PopartUnwindError)


# ----- Sett membership ------------------------------------------------------------------------
@SETTINGS
@given(stripe_lists, st.integers(-40, 0), st.integers(1, 60))
def test_membership_matches_scalar_rule(stripes, lo: int, length: int) -> None:
    got = Sett(stripes).mask_range(lo, lo + length)
    want = [scalar_on(stripes, x) for x in range(lo, lo + length)]
    assert got.tolist() == want


@SETTINGS
@given(stripe_lists, st.integers(-40, 0), st.integers(1, 60))
def test_membership_matches_explicit_runs(stripes, lo: int, length: int) -> None:
    ons = Sett(stripes).get_ons(lo, lo + length)
    assert ons == sorted(interval_ons(stripes, lo, lo + length))


def test_inner_levels_restart_at_clipped_parent_runs() -> None:
    # Level 1 runs start at 3 + 6j in the parent run [0, 10): the run starting at -3 is
    # clipped to [0, 1), so level 2 restarts at 0 there (min(rel, c), not rel).
    assert Sett([(10, 0, 0), (4, 2, 3), (1, 1, 0)]).get_ons(0, 20) == [0, 3, 5, 9, 10, 13, 15, 19]


def test_off_zero_is_always_on_but_restarts_children() -> None:
    assert Sett([(3, 0, 0)]).get_ons(0, 6) == list(range(6))
    assert Sett([(3, 0, 0), (2, 2, 0)]).get_ons(0, 9) == [0, 1, 3, 4, 6, 7]
    assert Sett([]).get_ons(-2, 2) == [-2, -1, 0, 1]


@SETTINGS
@given(setts, st.integers(-50, 50), st.integers(-5, 200))
def test_n_counts_over_long_ranges(sett: Sett, start: int, length: int) -> None:
    end = start + length
    assert sett.n(start, end) == len(sett.get_ons(start, end))
    assert sett.get_ons(start, end) == [x for x in range(start, end) if sett.is_on(x)]


def test_sett_api_basics() -> None:
    s = Sett([(2, 1, 0), (1, 1, 0)])
    assert repr(s) == "Sett((2,1,0),(1,1,0))" and repr(Sett([])) == "Sett()"
    assert s.stripes == (Stripe(2, 1, 0), Stripe(1, 1, 0)) and s.period == 3
    assert s == Sett([Stripe(2, 1, 3), (1, 1, 2)]) and hash(s) == hash(Sett([(2, 1, 0), (1, 1, 0)]))
    assert s.mask(6).tolist() == [True, False, False, True, False, False]
    assert s.n(0, 10**12) == 10**12 // 3 + 1
    with pytest.raises(AttributeError):
        s.x = 1  # type: ignore[attr-defined]


# ----- equivalence on the integer line -------------------------------------------------------
def brute_equal(a: Sett | DisjointSetts, b: Sett | DisjointSetts) -> bool:
    p = math.lcm(a.period, b.period)
    return bool(np.array_equal(a.mask(p), b.mask(p)))


@SETTINGS
@given(setts, setts)
def test_equivalent_matches_brute_force(a: Sett, b: Sett) -> None:
    assert a.equivalent(b) == brute_equal(a, b) == b.equivalent(DisjointSetts([a]))
    assert a.equivalent(a)


@SETTINGS
@given(setts, setts)
def test_equivalent_beyond_lcm_limit_uses_gcd_window(a: Sett, b: Sett) -> None:
    saved = sett_mod.LCM_LIMIT
    sett_mod.LCM_LIMIT = 0
    try:
        assert a.equivalent(b) == brute_equal(a, b)
    finally:
        sett_mod.LCM_LIMIT = saved


def test_equivalent_known_pairs() -> None:
    stride2 = Sett([(1, 1, 0)])
    halves = DisjointSetts([[(2, 2, 0), (1, 1, 0)], [(2, 2, 2), (1, 1, 0)]], checked=True)
    assert stride2.equivalent(halves) and halves.equivalent(stride2)
    assert not stride2.equivalent(DisjointSetts([[(2, 2, 0), (1, 1, 0)]]))
    assert Sett([(4, 0, 1)]).equivalent(Sett([]))
    # Always-on stripes of coprime periods: equal although no common structure.
    assert Sett([(1009, 0, 0)]).equivalent(Sett([(1013, 0, 5)]))


def test_equivalent_refuses_huge_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sett_mod, "LCM_LIMIT", 10)
    monkeypatch.setattr(sett_mod, "PERIOD_LIMIT", 10)
    with pytest.raises(RegionError, match="period"):
        Sett([(7, 5, 0)]).equivalent(Sett([(1, 4, 0)]))


# ----- DisjointSetts and from_indices ---------------------------------------------------------
def test_disjoint_setts_checked_rejects_overlap() -> None:
    with pytest.raises(RegionError, match="overlap"):
        DisjointSetts([[(1, 1, 0)], [(1, 2, 0)]], checked=True)
    ok = DisjointSetts([[(1, 1, 0)], [(1, 1, 1)]], checked=True)
    assert ok.n(0, 10) == 10 and ok.get_ons(0, 3) == [0, 1, 2] and len(ok) == 2
    assert repr(ok) == "DisjointSetts(Sett((1,1,0)), Sett((1,1,1)))"


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 64).flatmap(lambda n: st.lists(st.booleans(), min_size=n, max_size=n)))
def test_from_indices_round_trip(bits: list[bool]) -> None:
    mask = np.array(bits, dtype=bool)
    size = mask.size
    ds = DisjointSetts.from_indices(np.flatnonzero(mask), size)
    assert np.array_equal(ds.mask(size), mask)
    DisjointSetts(ds.setts, checked=True)  # members are disjoint on the whole line
    assert DisjointSetts.from_indices(np.flatnonzero(mask).tolist(), size) == ds
    n_runs = int(np.count_nonzero(np.diff(np.concatenate(([0], mask.astype(int)))) == 1))
    assert len(ds) <= max(1, (n_runs + 1) // 2)


@SETTINGS
@given(
    st.integers(1, 6),  # run length
    st.integers(1, 6),  # gap
    st.integers(0, 12),  # pattern phase
    st.integers(1, 80),  # size
    st.integers(0, 80),
    st.integers(0, 80),
)
def test_slice_of_stride_is_one_sett(on: int, off: int, phase: int, size: int, a: int, b: int):
    lo, hi = sorted((a % (size + 1), b % (size + 1)))
    idx = [x for x in range(lo, hi) if (x - phase) % (on + off) < on]
    ds = DisjointSetts.from_indices(idx, size)
    assert np.flatnonzero(ds.mask(size)).tolist() == idx
    assert len(ds) == (1 if idx else 0)
    assert all(len(s.stripes) <= 2 for s in ds.setts)


def test_compact_forms() -> None:
    assert DisjointSetts.from_indices([], 7).setts == ()
    assert DisjointSetts.from_indices(range(7), 7).setts == (Sett([]),)
    assert DisjointSetts.from_indices(range(2, 5), 7).setts == (Sett([(3, 4, 2)]),)
    assert DisjointSetts.from_indices(range(0, 12, 3), 12).setts == (Sett([(1, 2, 0)]),)
    strided = DisjointSetts.from_indices(range(5, 40, 4), 50)
    assert len(strided) == 1 and len(strided.setts[0].stripes) == 2


def test_intersection_of_strides_is_few_setts() -> None:
    both = Sett([(2, 2, 0)]).mask(120) & Sett([(3, 3, 0)]).mask(120)
    ds = DisjointSetts.from_indices(np.flatnonzero(both), 120)
    assert np.array_equal(ds.mask(120), both) and len(ds) == 2
    periodic = [x for x in range(97) if x % 7 in (0, 1, 4)]  # q = 2 runs per period
    ds = DisjointSetts.from_indices(periodic, 97)
    assert np.flatnonzero(ds.mask(97)).tolist() == periodic and len(ds) == 2


def test_from_indices_rejects_bad_input() -> None:
    with pytest.raises(RegionError, match=r"\[0, 4\)"):
        DisjointSetts.from_indices([1, 4], 4)
    with pytest.raises(RegionError, match="-1"):
        DisjointSetts.from_indices([], -1)


# ----- bounded 1-D algebra --------------------------------------------------------------------
masks = st.integers(0, 24).flatmap(
    lambda n: st.tuples(*[st.lists(st.booleans(), min_size=n, max_size=n)] * 2)
)


def as_dim(bits: list[bool]) -> DisjointSetts:
    return DisjointSetts.from_indices(np.flatnonzero(bits), len(bits))


def on_set(ds: DisjointSetts, size: int) -> set[int]:
    return set(np.flatnonzero(ds.mask(size)).tolist())


@SETTINGS
@given(masks)
def test_bounded_set_operations(pair) -> None:
    ba, bb = pair
    n = len(ba)
    a, b = as_dim(ba), as_dim(bb)
    sa, sb_ = set(np.flatnonzero(ba).tolist()), set(np.flatnonzero(bb).tolist())
    assert sb.ons(a, n).tolist() == sorted(sa) and sb.count(a, n) == len(sa)
    assert on_set(sb.intersect(a, b, n), n) == sa & sb_
    assert on_set(sb.union(a, b, n), n) == sa | sb_
    assert on_set(sb.subtract(a, b, n), n) == sa - sb_
    assert on_set(sb.complement(a, n), n) == set(range(n)) - sa
    assert sb.contains(a, b, n) == (sb_ <= sa)
    assert sb.equivalent_within(a, b, n) == (sa == sb_)
    assert on_set(sb.reverse(a, n), n) == {n - 1 - x for x in sa}
    assert sb.is_empty(a, n) == (not sa) and sb.is_full(a, n) == (len(sa) == n)


@SETTINGS
@given(masks)
def test_bounded_sample_and_fill(pair) -> None:
    ba, bw = pair
    n = len(ba)
    a, where = as_dim(ba), as_dim(bw)
    w = np.flatnonzero(bw)
    sampled = sb.sample(a, where, n)
    assert np.array_equal(sampled.mask(w.size), np.asarray(ba, dtype=bool)[w])
    filled = sb.fill_into(sampled, where, n)
    want = np.zeros(n, dtype=bool)
    want[w] = np.asarray(ba, dtype=bool)[w]
    assert np.array_equal(filled.mask(n), want)


def test_bounded_results_are_memoised_and_read_only() -> None:
    a = DisjointSetts([[(1, 2, 0)]])
    assert sb.intersect(a, sb.FULL, 30) is sb.intersect(a, sb.FULL, 30)
    with pytest.raises(ValueError):
        sb.ons(a, 30)[0] = 5
    assert sb.canonical(a, 30) == DisjointSetts.from_indices(range(0, 30, 3), 30)
    assert sb.interval(-3, 4, 6) == DisjointSetts([[(4, 2, 0)]])
    assert on_set(sb.strided(4, 10, 1), 10) == {1, 5, 9}
    with pytest.raises(RegionError):
        sb.strided(0, 10)
