"""Region and DisjointRegions: every operation against brute-force numpy bitmaps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import RegionError
from popart_unwind.memory.region import DisjointRegions, Region
from popart_unwind.memory.sett import DisjointSetts, Sett

SETTINGS = settings(max_examples=200, deadline=None)


# ----- strategies -----------------------------------------------------------------------------
def shapes(max_rank: int = 3, max_dim: int = 7):
    """Shapes of rank <= max_rank; a dim is 0 now and then, mostly 1..max_dim."""
    dims = st.sampled_from((0, *range(1, max_dim + 1), *range(1, max_dim + 1)))
    return st.lists(dims, max_size=max_rank).map(tuple)


@st.composite
def dim_sets(draw, n: int):
    """One dimension's set in any accepted spelling, canonical or not."""
    kind = draw(st.sampled_from(["bits", "bits", "full", "interval", "stripes", "union"]))
    if kind == "full":
        return DisjointSetts([Sett([])])
    if kind == "interval":
        a, b = sorted(draw(st.tuples(st.integers(0, n), st.integers(0, n))))
        return Sett([(b - a, n - (b - a), a)]) if n else DisjointSetts([])
    stripe = st.tuples(st.integers(1, 4), st.integers(0, 4), st.integers(-5, 5))
    if kind == "stripes":
        return draw(st.lists(stripe, max_size=2))
    if kind == "union":
        odd = 2 * draw(st.integers(0, 1)) + 1
        return DisjointSetts([[(1, 1, 0)], [(2, 2, odd), (1, 1, 0)]], checked=True)
    bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return DisjointSetts.from_indices(np.flatnonzero(bits), n)


def entry_bits(entry, n: int) -> np.ndarray:
    """Brute-force bitmap of one dimension entry."""
    return (entry if isinstance(entry, (DisjointSetts, Sett)) else Sett(entry)).mask(n)


@st.composite
def regions(draw, shape=None):
    shape = draw(shapes()) if shape is None else shape
    if not shape and draw(st.booleans()):
        return Region.empty(())
    return Region(shape, [draw(dim_sets(n)) for n in shape])


@st.composite
def disjoint_regions(draw, shape=None):
    shape = draw(shapes()) if shape is None else shape
    acc = DisjointRegions(shape)
    for _ in range(draw(st.integers(1, 3))):
        r = draw(regions(shape))
        acc = DisjointRegions(shape, [*acc.regions, r.subtract(acc)])
    return acc


@st.composite
def region_pairs(draw):
    shape = draw(shapes())
    a = draw(st.one_of(regions(shape), disjoint_regions(shape)))
    b = draw(st.one_of(regions(shape), disjoint_regions(shape)))
    return a, b


def either(shape=None):
    return st.one_of(regions(shape), disjoint_regions(shape))


def checked_mask(x: Region | DisjointRegions) -> np.ndarray:
    """The bitmap of x, after checking that DisjointRegions members are pairwise disjoint."""
    if isinstance(x, Region):
        return x.mask()
    cover = np.zeros(x.shape, dtype=int)
    for r in x.regions:
        assert r.shape == x.shape and not r.is_empty()
        cover = cover + r.mask()
    assert cover.max(initial=0) <= 1
    assert np.array_equal(cover.astype(bool), x.mask())
    assert x.total_elms() == int(cover.sum())
    return cover.astype(bool)


# ----- construction and queries ---------------------------------------------------------------
@SETTINGS
@given(st.data())
def test_constructor_matches_outer_product(data) -> None:
    shape = data.draw(shapes())
    entries = [data.draw(dim_sets(n)) for n in shape]
    region = Region(shape, entries)
    bits = [entry_bits(e, n) for e, n in zip(entries, shape, strict=True)]
    want = np.ones((), dtype=bool)
    for b in bits:
        want = np.multiply.outer(want, b)
    assert np.array_equal(region.mask(), want)
    assert region.total_elms() == int(want.sum())
    assert region.is_empty() == (not want.any())
    assert region.is_full() == bool(want.all() and want.size)
    assert region.get_ons() == [np.flatnonzero(b).tolist() for b in bits]
    assert region.nelms() == tuple(int(b.sum()) for b in bits)
    assert all(isinstance(d, DisjointSetts) for d in region.setts) and region.rank == len(shape)


def test_named_constructors() -> None:
    box = Region.from_bounds((4, 6), (1, 2), (3, 6))
    want = np.zeros((4, 6), dtype=bool)
    want[1:3, 2:6] = True
    assert np.array_equal(box.mask(), want)
    strided = Region.from_stride((5, 7), 3, 1)
    want = np.zeros((5, 7), dtype=bool)
    want[:, ::3] = True
    assert np.array_equal(strided.mask(), want)
    assert Region.full((2, 3)).is_full() and Region.empty((2, 3)).is_empty()
    assert Region.full(()).total_elms() == 1 and Region.empty(()).total_elms() == 0
    assert Region.full((3, 0)).is_empty() and not Region.full((3, 0)).is_full()
    assert repr(box) == "Region((4, 6), [1:3, 2:6])"
    assert repr(strided) == "Region((5, 7), [:, Sett((1,2,0))])"
    assert repr(Region.empty((2,))) == "Region.empty((2,))"


def test_empty_regions_keep_per_dimension_counts() -> None:
    # Like numpy: a[1:1, 0:4] has shape (0, 4); the element set is still empty.
    sliced = Region.from_bounds((3, 4), (1, 0), (1, 4))
    assert sliced.is_empty() and sliced.nelms() == (0, 4) and sliced.total_elms() == 0
    assert sliced == Region.empty((3, 4)) and hash(sliced) == hash(Region.empty((3, 4)))
    assert repr(sliced) == "Region((3, 4), [{}, :])"
    data = np.arange(12).reshape(3, 4)
    assert data[np.ix_(*sliced.get_ons())].shape == sliced.nelms()
    assert Region.full((3, 4)).sett_sample(sliced).shape == (0, 4)
    assert Region.full((0, 4)).nelms() == (0, 4)
    assert Region.empty((0, 4)).sett_fill_into(sliced).shape == (3, 4)
    squeezed = Region((1, 3), [[], [(1, 1, 0)]]).reduce((1, 1))
    assert squeezed.is_full() and Region.empty((1, 3)).expand((4, 3)).nelms() == (0, 0)


# ----- set operations -------------------------------------------------------------------------
@SETTINGS
@given(region_pairs())
def test_intersect_subtract_complement(pair) -> None:
    a, b = pair
    ma, mb = checked_mask(a), checked_mask(b)
    assert np.array_equal(checked_mask(a.intersect(b)), ma & mb)
    assert np.array_equal(checked_mask(a.subtract(b)), ma & ~mb)
    assert np.array_equal(checked_mask(a.complement()), ~ma)


@SETTINGS
@given(region_pairs())
def test_contains_and_equivalent(pair) -> None:
    a, b = pair
    ma, mb = a.mask(), b.mask()
    assert a.contains(b) == (not (mb & ~ma).any())
    assert a.equivalent(b) == bool(np.array_equal(ma, mb))
    assert (a == b) == bool(np.array_equal(ma, mb))
    if a == b:
        assert hash(a) == hash(b)
    union = DisjointRegions(a.shape, [a.subtract(b), b], checked=True)
    assert np.array_equal(checked_mask(union), ma | mb)
    assert union.contains(a) and union.contains(b)
    assert a.equivalent(a.complement().complement())


def test_equality_is_set_equality_across_spellings() -> None:
    a = Region((6, 4), [[(1, 1, 0)], []])
    b = Region((6, 4), [DisjointSetts.from_indices([0, 2, 4], 6), DisjointSetts([Sett([])])])
    split = DisjointRegions(
        (6, 4),
        [
            Region.from_bounds((6, 4), (0, 0), (6, 1)).intersect(a),
            a.subtract(Region((6, 4), [[], [(1, 3, 0)]])),
        ],
        checked=True,
    )
    assert a == b and hash(a) == hash(b) and a.setts == b.setts
    assert a == split and split == a and hash(split) == hash(a) and len(split) == 2
    assert Region((2, 3), [[], [(1, 2, 5), (0, 1, 0)]]) == Region.empty((2, 3))
    assert Region.empty((2, 3)) != Region.empty((3, 2))
    assert {a, b, split} == {a}


def test_checked_disjoint_regions_rejects_overlap() -> None:
    box = Region.from_bounds((4, 4), (0, 0), (2, 2))
    with pytest.raises(RegionError, match="overlaps"):
        DisjointRegions((4, 4), [box, Region.from_bounds((4, 4), (1, 1), (3, 3))], checked=True)
    assert DisjointRegions((4, 4), [box, Region.empty((4, 4))]).regions == (box,)


# ----- re-indexing ----------------------------------------------------------------------------
@SETTINGS
@given(st.data())
def test_sett_sample_and_fill_into(data) -> None:
    shape = data.draw(shapes())
    a = data.draw(either(shape))
    where = data.draw(regions(shape))
    sampled = a.sett_sample(where)
    want = a.mask()[np.ix_(*where.get_ons())] if shape else a.mask() & where.mask()
    assert sampled.shape == where.nelms()
    assert np.array_equal(checked_mask(sampled), want)
    filled = sampled.sett_fill_into(where)
    scattered = np.zeros(shape, dtype=bool)
    if shape:
        scattered[np.ix_(*where.get_ons())] = want
    else:
        scattered = want & where.mask()
    assert filled.shape == shape
    assert np.array_equal(checked_mask(filled), scattered)


@st.composite
def reshapes(draw):
    """A region and a shape with the same number of elements (splits, merges, 1-dims)."""
    shape = draw(shapes(max_rank=3))
    total = math.prod(shape)
    target: list[int] = []
    if total == 0:
        target = [0, *draw(st.lists(st.integers(1, 4), max_size=2))]
        target = draw(st.permutations(target))
    else:
        left = total
        while left > 1 and len(target) < 4:
            divisors = [d for d in range(2, left + 1) if left % d == 0]
            d = draw(st.sampled_from(divisors))
            target.append(d)
            left //= d
        if left > 1:
            target.append(left)
        for _ in range(draw(st.integers(0, 2))):
            target.insert(draw(st.integers(0, len(target))), 1)
    return draw(either(shape)), tuple(target)


@settings(max_examples=300, deadline=None)
@given(reshapes())
def test_reshape(case) -> None:
    a, target = case
    out = a.reshape(target)
    assert out.shape == target
    assert np.array_equal(checked_mask(out), a.mask().reshape(target))
    assert out.reshape(a.shape) == a


@pytest.mark.parametrize(
    ("shape", "target"),
    [
        ((6, 4), (4, 6)),
        ((2, 3), (3, 2)),
        ((4, 6), (2, 12)),
        ((2, 1, 6), (3, 1, 4)),
        ((12,), (2, 2, 3)),
    ],
)
def test_reshape_many_to_many(shape, target) -> None:
    rng = np.random.default_rng(sum(shape))
    for _ in range(20):
        dims = [DisjointSetts.from_indices(np.flatnonzero(rng.random(n) < 0.6), n) for n in shape]
        a = Region(shape, dims)
        assert np.array_equal(checked_mask(a.reshape(target)), a.mask().reshape(target))


def test_reshape_stays_compact_for_structured_regions() -> None:
    strided = Region.from_stride((12,), 2, 0).reshape((3, 4))
    assert len(strided) == 1 and strided.regions[0] == Region.from_stride((3, 4), 2, 1)
    box = Region.from_bounds((4, 6), (0, 1), (4, 3)).reshape((24,))
    assert len(box) == 1 and len(box.regions[0].setts[0]) == 1
    split = Region.from_bounds((4, 6), (1, 0), (3, 6)).reshape((4, 2, 3))
    assert len(split) == 1 and split.regions[0] == Region.from_bounds(
        (4, 2, 3), (1, 0, 0), (3, 2, 3)
    )
    assert Region.full((0, 3)).reshape((3, 0)).is_empty()
    assert Region.full(()).reshape((1, 1)).is_full()


@SETTINGS
@given(st.data())
def test_dim_shuffle_and_reverse(data) -> None:
    a = data.draw(either())
    rank = len(a.shape)
    perm = data.draw(st.permutations(range(rank)))
    shuffled = a.dim_shuffle(perm)
    assert np.array_equal(checked_mask(shuffled), np.transpose(a.mask(), perm))
    axes = (
        data.draw(st.lists(st.integers(-rank, rank - 1), unique_by=lambda x: x % rank))
        if rank
        else []
    )
    flipped = a.reverse(axes)
    want = np.flip(a.mask(), axis=tuple(axes)) if axes else a.mask()
    assert np.array_equal(checked_mask(flipped), want)


@SETTINGS
@given(st.data())
def test_expand_and_reduce(data) -> None:
    shape = data.draw(shapes(max_dim=5))
    ones = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    small = tuple(1 if o else n for o, n in zip(ones, shape, strict=True))
    a = data.draw(either(small))
    big = tuple(data.draw(st.integers(0, 4)) if n == 1 else n for n in small)
    expanded = a.expand(big)
    assert np.array_equal(checked_mask(expanded), np.broadcast_to(a.mask(), big))
    b = data.draw(either(shape))
    axes = tuple(k for k, o in enumerate(ones) if o)
    reduced = b.reduce(small)
    assert np.array_equal(checked_mask(reduced), b.mask().any(axis=axes, keepdims=True))


# ----- errors ---------------------------------------------------------------------------------
def test_errors_name_the_shapes() -> None:
    r = Region.full((2, 3))
    cases = [
        (lambda: Region((2, 3), [[]]), r"\(2, 3\)"),
        (lambda: Region((2, -1), [[], []]), r"\(2, -1\)"),
        (lambda: Region.from_bounds((4, 5), (0, 0), (4, 6)), r"\(4, 5\)"),
        (lambda: Region.from_bounds((4, 5), (0,), (4,)), r"\(4, 5\)"),
        (lambda: Region.from_bounds((4, 5), (-1, 0), (4, 5)), r"\(4, 5\)"),
        (lambda: Region.from_bounds((4, 5), (3, 0), (2, 5)), r"\(4, 5\)"),
        (lambda: Region.from_stride((4, 5), 0, 1), r"\(4, 5\)"),
        (lambda: Region.from_stride((4, 5), 2, 2), r"\(4, 5\)"),
        (lambda: r.dim_shuffle((0, 0)), r"\(2, 3\)"),
        (lambda: r.dim_shuffle((1,)), r"\(2, 3\)"),
        (lambda: r.reverse([2]), r"\(2, 3\)"),
        (lambda: r.reverse([1, -1]), r"\(2, 3\)"),
        (lambda: r.expand((4, 3)), r"\(2, 3\).*\(4, 3\)"),
        (lambda: r.expand((2, 3, 1)), r"\(2, 3\)"),
        (lambda: r.reduce((2, 2)), r"\(2, 3\).*\(2, 2\)"),
        (lambda: r.intersect(Region.full((3, 2))), r"\(2, 3\).*\(3, 2\)"),
        (lambda: r.subtract(DisjointRegions((3, 2))), r"\(2, 3\).*\(3, 2\)"),
        (lambda: r.contains(Region.full((3,))), r"\(2, 3\)"),
        (lambda: r.equivalent(Region.full((3, 2))), r"\(2, 3\)"),
        (lambda: DisjointRegions((2, 3)).equivalent(Region.full((3, 2))), r"\(2, 3\)"),
        (lambda: r.reshape((5,)), r"\(2, 3\).*\(5,\)"),
        (lambda: r.sett_sample(Region.full((3, 2))), r"\(2, 3\)"),
        (lambda: r.sett_fill_into(Region.full((3, 3))), r"\(2, 3\)"),
        (lambda: DisjointRegions((2, 3), [Region.full((3, 2))]), r"\(2, 3\)"),
        (lambda: DisjointRegions((2, 3)).reduce((2, 2)), r"\(2, 3\)"),
    ]
    for call, pattern in cases:
        with pytest.raises(RegionError, match=pattern):
            call()
