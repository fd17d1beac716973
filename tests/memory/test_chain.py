"""Chains: building, applying to arrays and regions, mirroring, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ChainError, PopartUnwindError
from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.memory.random_chains import random_chain

SEEDS = st.integers(0, 2**32 - 1)


def arange(shape):
    return np.arange(1, int(np.prod(shape)) + 1).reshape(shape)


def test_builder_tracks_shapes_and_prints_in_seed_notation():
    chain = Chain((2, 3, 4)).dim_shuffle((1, 2, 0)).reverse((0,)).reshape((12, 2))
    assert chain.in_shape == (2, 3, 4)
    assert chain.out_shape == (12, 2)
    assert len(chain) == 3
    assert [op.type for op in chain.ops] == ["DimShuffle", "Reverse", "Reshape"]
    assert repr(chain) == "(2,3,4) -> DimShuffle(1 2 0) -> Reverse(0) -> Reshape(12,2)"


def test_apply_matches_numpy_for_every_op_type():
    x = arange((2, 3, 4))
    assert np.array_equal(Chain((2, 3, 4)).dim_shuffle((2, 0, 1)).apply(x), x.transpose(2, 0, 1))
    assert np.array_equal(Chain((2, 3, 4)).reverse((0, 2)).apply(x), x[::-1, :, ::-1])
    assert np.array_equal(Chain((2, 3, 4)).reshape((6, 4)).apply(x), x.reshape(6, 4))
    assert np.array_equal(Chain((2, 3, 4)).flatten().apply(x), x.reshape(24))
    assert np.array_equal(Chain((2, 3, 4)).slice((0, 1, 1), (2, 3, 3)).apply(x), x[:, 1:3, 1:3])
    assert np.array_equal(Chain((2, 3, 4)).sub_sample(2, 2).apply(x), x[:, :, ::2])
    assert np.array_equal(
        Chain((2, 3, 4)).reduce((3, 1)).apply(x), x.sum(axis=(0, 2)).reshape(3, 1)
    )
    y = arange((3, 1))
    assert np.array_equal(Chain((3, 1)).expand((2, 3, 5)).apply(y), np.broadcast_to(y, (2, 3, 5)))
    scaffold = Region.from_bounds((4, 5), (1, 1), (3, 4))
    filled = Chain((2, 3)).sett_fill_into(scaffold).apply(arange((2, 3)))
    expected = np.zeros((4, 5), dtype=int)
    expected[1:3, 1:4] = arange((2, 3))
    assert np.array_equal(filled, expected)


def test_expand_and_reduce_change_rank_through_a_reshape():
    chain = Chain((3,)).expand((2, 3))
    assert [op.type for op in chain.ops] == ["Reshape", "Expand"]
    assert chain.ops[0].out_shape == (1, 3)
    chain = Chain((2, 3)).reduce((3,))
    assert [op.type for op in chain.ops] == ["Reduce", "Reshape"]
    assert chain.ops[0].out_shape == (1, 3)


def test_mask_keeps_the_region_and_empties_the_rest():
    region = Region.from_stride((6,), 2, 0)
    out = Chain((6,)).mask(region).apply(np.arange(1, 7))
    assert out.tolist() == [1, 0, 3, 0, 5, 0]


def test_apply_regions_follows_elements():
    chain = Chain((4, 6)).slice((1, 0), (3, 6)).dim_shuffle((1, 0)).reverse((0,))
    image = chain.apply_regions(Region.from_bounds((4, 6), (0, 0), (2, 1)))
    expected = np.zeros((6, 2), dtype=bool)
    expected[5, 0] = True  # element (1, 0): row 0 of the slice, then transposed, then reversed
    assert np.array_equal(image.mask(), expected)


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: Chain((2, 3)).reshape((4, 2)), "changes the number of elements"),
        (lambda: Chain((2, 3)).dim_shuffle((0, 0)), "not a permutation"),
        (lambda: Chain((2, 3)).reverse((2,)), "outside shape"),
        (lambda: Chain((2, 3)).expand((4, 3)), "not a numpy broadcast"),
        (lambda: Chain((2, 3)).expand((3,)), "lower rank"),
        (lambda: Chain((2, 3)).append("Reduce", (2, 2)), "sum over axes"),
        (lambda: Chain((2, 3)).slice((0, 0), (3, 3)), "(2, 3)"),
        (lambda: Chain((2, 3)).sett_sample(Region.full((3, 2))), "does not match input shape"),
        (lambda: Chain((2, 3)).sett_fill_into(Region.full((3, 3))), "elements per axis"),
        (lambda: Chain((2, 3)).append("Transpose", (1, 0)), "unknown chain op type"),
        (lambda: Chain((2, 3)).apply(np.zeros((3, 2))), "expects an array of shape"),
    ],
)
def test_invalid_ops_raise_typed_errors_naming_the_shapes(build, fragment):
    with pytest.raises(PopartUnwindError, match=fragment) as info:
        build()
    assert isinstance(info.value, ValueError)


def test_chain_errors_are_chain_errors():
    with pytest.raises(ChainError):
        Chain((2, 3)).reshape((5,))


def test_mirror_inverts_each_op_in_reverse_order():
    chain = Chain((2, 3)).dim_shuffle((1, 0)).reshape((6,)).slice((1,), (4,)).expand((2, 3))
    mirror = chain.mirror()
    assert mirror.in_shape == chain.out_shape and mirror.out_shape == chain.in_shape
    assert [op.type for op in mirror.ops] == [
        "Reduce",
        "Reshape",
        "SettFillInto",
        "Reshape",
        "DimShuffle",
    ]
    assert mirror.mirror() == chain


def index_map_chain(seed, length):
    """A random chain cut before its first Expand or Reduce: each output element is at most
    one input element, so the mirror can bring it back."""
    source = random_chain(np.random.default_rng(seed), length)
    kept = itertools.takewhile(lambda op: op.type not in ("Expand", "Reduce"), source.ops)
    return Chain(source.in_shape, list(kept))


@settings(max_examples=200, deadline=None)
@given(seed=SEEDS, length=st.integers(1, 8))
def test_mirror_round_trips_on_the_covered_elements(seed, length):
    chain = index_map_chain(seed, length)
    x = arange(chain.in_shape)
    covered = chain.mirror().apply_regions(chain.apply_regions(Region.full(chain.in_shape)))
    back = chain.mirror().apply(chain.apply(x))
    assert np.array_equal(back, np.where(covered.mask(), x, 0))
    assert chain.mirror().mirror() == chain


@settings(max_examples=200, deadline=None)
@given(seed=SEEDS, length=st.integers(1, 8))
def test_apply_regions_is_the_support_of_apply(seed, length):
    """An output element is reached iff some input element lands on it (all inputs non-zero
    and positive, so sums cannot cancel)."""
    chain = random_chain(np.random.default_rng(seed), length)
    reached = chain.apply_regions(DisjointRegions(chain.in_shape, [Region.full(chain.in_shape)]))
    assert np.array_equal(reached.mask(), chain.apply(arange(chain.in_shape)) != 0)
