"""Chain canonicalization: the examples of poprithms' chain notes, each rule, the upstream
mistakes, and the law canonical(c) applied to distinct values == c applied to them, on
random chains."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import CanonicalizationError
from popart_unwind.memory import Chain, Region
from popart_unwind.memory import canonical_swaps as swaps
from popart_unwind.memory.canonical import canonicalize
from popart_unwind.memory.random_chains import random_chain


def canonical_repr(chain: Chain) -> str:
    result = chain.canonicalized()
    assert result.truly_equivalent(chain), f"{chain} => {result} changed the meaning"
    return repr(result)


# ----- the examples of poprithms' chain notes ---------------------------------------------
def test_seed_dimshuffle_reverse_dimshuffle_is_one_reverse():
    chain = Chain((2, 3, 4)).dim_shuffle((1, 2, 0)).reverse((0,)).dim_shuffle((2, 0, 1))
    assert canonical_repr(chain) == "(2,3,4) -> Reverse(1)"


def test_seed_four_op_chain_is_the_null_chain():
    chain = (
        Chain((2, 3, 4)).dim_shuffle((2, 0, 1)).reverse((0,)).dim_shuffle((1, 2, 0)).reverse((2,))
    )
    assert len(chain.canonicalized()) == 0
    assert canonical_repr(chain) == "(2,3,4)"


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        (Chain((2, 3, 4)).dim_shuffle((1, 2, 0)).dim_shuffle((1, 2, 0)), "DimShuffle(2 0 1)"),
        (Chain((2, 3, 4)).reverse((1, 2)).reverse((0, 2)), "Reverse(0 1)"),
        (Chain((60,)).reshape((2, 3, 5, 2)).reshape((6, 10)), "Reshape(6,10)"),
        (Chain((10,)).slice((2,), (6,)).slice((1,), (4,)), "SettSample(Region((10,), [3:6]))"),
    ],
)
def test_seed_contiguous_ops_of_one_type_merge(chain, expected):
    assert canonical_repr(chain) == f"{Chain(chain.in_shape)!r} -> {expected}"


def test_seed_strided_samples_merge_into_one_stride():
    """Slice(Dim=1, 0:12:3) then Slice(Dim=1, 0:12:2) (of what is left) is stride 6."""
    chain = Chain((4, 12)).sub_sample(3, 1).sub_sample(2, 1)
    assert chain.canonicalized() == Chain((4, 12)).sub_sample(6, 1)


def test_seed_slice_moves_after_dimshuffle():
    chain = Chain((4, 5, 6)).slice((1, 0, 0), (3, 5, 6)).dim_shuffle((1, 2, 0))
    expected = Chain((4, 5, 6)).dim_shuffle((1, 2, 0)).slice((0, 0, 1), (5, 6, 3))
    assert chain.canonicalized() == expected


def test_seed_slice_moves_after_reverse():
    chain = Chain((10,)).slice((1,), (3,)).reverse((0,))
    assert chain.canonicalized() == Chain((10,)).reverse((0,)).slice((7,), (9,))


def test_seed_valid_reshape_swaps_take_the_given_forms():
    first = Chain((25, 3, 2)).reshape((5, 5, 6)).dim_shuffle((2, 0, 1))
    assert first.canonicalized() == Chain((25, 3, 2)).dim_shuffle((1, 2, 0)).reshape((6, 5, 5))
    second = Chain((2, 2, 9, 5, 5, 49)).reshape((4, 3, 3, 25, 7, 7)).dim_shuffle((3, 4, 5, 1, 2, 0))
    expected = (
        Chain((2, 2, 9, 5, 5, 49)).dim_shuffle((3, 4, 5, 2, 0, 1)).reshape((25, 7, 7, 3, 3, 4))
    )
    assert second.canonicalized() == expected
    assert second.truly_equivalent(expected)


def test_seed_impossible_reshape_swaps_stay_unswapped():
    first = Chain((3, 2)).reshape((2, 3)).dim_shuffle((1, 0))
    assert first.canonicalized() == first
    assert swaps.SWAPS[("Reshape", "DimShuffle")](*first.ops) is None
    second = Chain((25, 2, 3)).dim_shuffle((0, 2, 1)).reshape((5, 5, 6))
    assert second.canonicalized() == second


def test_seed_dimshuffle_reshape_example_is_not_an_identity_and_is_not_merged():
    """poprithms' chain notes list DimShuffle(2 0 1) -> Reshape(5,7,6) as equal to Reshape(6,5,7) ->
    DimShuffle(1 2 0); no input shape makes that true, and canonicalization must not say so."""
    left = Chain((7, 6, 5)).dim_shuffle((2, 0, 1)).reshape((5, 7, 6))
    right = Chain((7, 6, 5)).reshape((6, 5, 7)).dim_shuffle((1, 2, 0))
    assert not left.truly_equivalent(right)
    assert not left.equivalent(right)


# ----- the three mistakes of the original implementation ------------------------------------
def test_dimshuffle_merge_composes_in_numpy_order():
    p0, p1 = (1, 2, 0), (0, 2, 1)
    chain = Chain((2, 3, 4)).dim_shuffle(p0).dim_shuffle(p1)
    (merged,) = chain.canonicalized().ops
    assert merged.attr == tuple(p0[i] for i in p1) == (1, 0, 2)
    assert merged.attr != tuple(p1[i] for i in p0)  # the other order would be wrong here
    assert chain.canonicalized().truly_equivalent(chain)


@pytest.mark.parametrize(
    "chain",
    [
        Chain((4, 6)).slice((0, 0), (2, 6)).reshape((12,)),
        Chain((6, 4)).slice((1, 0), (3, 4)).reshape((2, 2, 2)),
        Chain((2, 6)).slice((0, 0), (2, 3)).reshape((6,)),
        Chain((3, 8)).sub_sample(2, 0).reshape((2, 2, 4)),
    ],
)
def test_moving_a_slice_past_a_reshape_keeps_the_final_shape(chain):
    result = chain.canonicalized()
    assert result.out_shape == chain.out_shape
    assert result.truly_equivalent(chain)
    for op in result.ops:
        if op.type == "Reshape":
            assert op.out_shape[1:] == chain.out_shape[1:]


def test_moving_a_slice_past_a_reshape_gives_the_reshape_the_full_shape():
    chain = Chain((4, 6)).slice((0, 0), (2, 6)).reshape((12,))
    assert (
        repr(chain.canonicalized()) == "(4,6) -> Reshape(24) -> SettSample(Region((24,), [0:12]))"
    )


@pytest.mark.parametrize(
    "chain",
    [
        Chain((3, 4)).slice((1, 0), (1, 4)),
        Chain((3, 4)).slice((1, 0), (1, 4)).sett_fill_into(Region.full((0, 4))).reshape((2, 0)),
        Chain((5,)).mask(Region.empty((5,))).reshape((1, 5)).dim_shuffle((1, 0)),
        Chain((2, 3))
        .sett_fill_into(Region.from_bounds((4, 3), (0, 0), (2, 3)))
        .slice((2, 0), (4, 3))
        .reshape((6,)),
        Chain((4,)).mask(Region.empty((4,))).reshape((1, 1, 4)).reduce((1, 1, 1)).reshape(()),
    ],
)
def test_a_chain_reaching_nothing_keeps_its_shapes(chain):
    result = chain.canonicalized()
    assert result.in_shape == chain.in_shape
    assert result.out_shape == chain.out_shape
    assert not np.any(
        result.apply(np.arange(1, np.prod(chain.in_shape) + 1).reshape(chain.in_shape))
    )
    assert result.truly_equivalent(chain)
    assert result.canonicalized() == result


# ----- individual rules ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        (
            Chain((2, 4, 1)).expand((2, 4, 3)).dim_shuffle((1, 0, 2)),
            "DimShuffle(1 0 2) -> Expand(4,2,3)",
        ),
        (
            Chain((2, 4, 3)).append("Reduce", (2, 1, 3)).dim_shuffle((2, 0, 1)),
            "DimShuffle(2 0 1) -> Reduce(3,2,1)",
        ),
        (  # after the Reduce the transpose only moves a size-1 axis: a Reshape
            Chain((2, 3)).append("Reduce", (1, 3)).dim_shuffle((1, 0)),
            "Reduce(1,3) -> Reshape(3,1)",
        ),
        (Chain((2, 3)).reverse((0,)).dim_shuffle((1, 0)), "DimShuffle(1 0) -> Reverse(1)"),
        (
            Chain((2, 3, 1)).append("Reduce", (2, 1, 1)).expand((2, 1, 4)),
            "Expand(2,3,4) -> Reduce(2,1,4)",
        ),
        (Chain((6,)).reshape((2, 1, 3)).expand((2, 5, 3)), None),
        (Chain((6, 1)).reshape((1, 6)).expand((4, 6)), None),  # no size-1 input axis to grow
        (Chain((2, 3)).reshape((6,)).reduce((1,)), "Reduce(1,1) -> Reshape(1)"),
        (Chain((6,)).reshape((2, 3)).append("Reduce", (1, 3)), None),  # half a split: stays
        (Chain((2, 3)).reverse((0, 1)).reshape((6,)), "Reshape(6) -> Reverse(0)"),
        (Chain((2, 3)).reverse((0,)).reshape((6,)), None),  # part of a merge: stays
        (
            Chain((2, 1, 3)).reverse((0, 2)).append("Reduce", (2, 1, 1)),
            "Reduce(2,1,1) -> Reverse(0)",
        ),
        (Chain((12,)).reverse((0,)).reshape((3, 4)), "Reshape(3,4) -> Reverse(0 1)"),
    ],
)
def test_swap_rules_reach_the_canonical_order_exactly(chain, expected):
    result = chain.canonicalized()
    assert result.truly_equivalent(chain)
    shown = repr(result).split(" -> ", 1)[1] if len(result) else ""
    if expected is None:
        first, second = chain.ops[-2:]
        assert swaps.SWAPS[(first.type, second.type)](first, second) is None
        assert result == chain
    else:
        assert shown == expected


def test_fill_then_sample_of_the_same_region_cancels():
    region = Region.from_bounds((5, 4), (1, 0), (3, 4))
    chain = Chain((2, 4)).sett_fill_into(region).sett_sample(region)
    assert len(chain.canonicalized()) == 0


def test_sample_then_fill_of_the_same_region_cancels_only_when_nothing_outside_reaches_it():
    region = Region.from_bounds((6,), (1,), (4,))
    inside = Chain((3,)).sett_fill_into(region).sett_sample(region).sett_fill_into(region)
    assert inside.canonicalized() == Chain((3,)).sett_fill_into(region)
    masking = Chain((6,)).mask(region)
    result = masking.canonicalized()
    assert len(result) > 0
    assert result.truly_equivalent(masking)


def test_expand_then_sample_of_one_copy_is_nothing():
    chain = Chain((1, 3)).expand((4, 3)).slice((2, 0), (3, 3))
    assert len(chain.canonicalized()) == 0


def test_expand_then_sample_of_some_copies_broadcasts_fewer():
    chain = Chain((1, 3)).expand((5, 3)).slice((1, 0), (4, 3))
    assert repr(chain.canonicalized()) == "(1,3) -> Expand(3,3)"


@pytest.mark.parametrize("dims, expected", [
    ((1, 1), "(3,4)"), ((1, 1, 1), "(3,4) -> Reverse(1)"), ((0, 1, 0), "(3,4) -> Reverse(1)"),
    ((0, 1, 1, 0), "(3,4)")])
def test_an_axis_reversed_twice_is_given_back(dims, expected):
    chain = Chain((3, 4)).reverse(dims)
    assert canonical_repr(chain) == expected
    x = np.arange(12).reshape(3, 4)
    flipped = x
    for axis in dims:
        flipped = np.flip(flipped, axis)
    assert np.array_equal(chain.apply(x), flipped)


@pytest.mark.parametrize("chain, expected", [
    (Chain((3, 1)).expand((3, 4)).reverse((1,)), "(3,1) -> Expand(3,4)"),
    (Chain((3, 1)).expand((3, 4)).reverse((0, 1)), "(3,1) -> Expand(3,4) -> Reverse(0)"),
    (Chain((1, 4)).reverse((1,)).expand((3, 4)).reverse((0, 1)), "(1,4) -> Expand(3,4)"),
    (Chain((3, 4)).expand((3, 4)).reverse((1,)), "(3,4) -> Reverse(1)"),  # copies nothing
])
def test_reversing_copies_an_expand_made_is_nothing(chain, expected):
    assert canonical_repr(chain) == expected


def test_sample_then_fill_becomes_fill_then_sample():
    chain = Chain((6,)).slice((1,), (5,)).sett_fill_into(Region.from_stride((8,), 2, 0))
    result = chain.canonicalized()
    assert [op.type for op in result.ops] == ["SettFillInto", "SettSample"]
    assert result.truly_equivalent(chain)


def test_dimshuffle_of_size_one_axes_is_a_reshape():
    chain = Chain((1, 6)).dim_shuffle((1, 0))
    assert repr(chain.canonicalized()) == "(1,6) -> Reshape(6,1)"


# ----- the driver -------------------------------------------------------------------------------
def test_the_rewrite_cap_is_raised_as_an_error():
    chain = Chain((2, 3)).reverse((0,)).dim_shuffle((1, 0))
    with pytest.raises(CanonicalizationError, match="fixpoint"):
        canonicalize(chain.in_shape, chain.ops, max_rewrites=0)


def test_a_rule_that_changes_nothing_is_detected(monkeypatch):
    monkeypatch.setitem(swaps.SWAPS, ("Reverse", "DimShuffle"), lambda a, b: [a, b])
    chain = Chain((2, 3)).reverse((0,)).dim_shuffle((1, 0))
    with pytest.raises(CanonicalizationError, match="changed nothing"):
        canonicalize(chain.in_shape, chain.ops)


def test_canonicalized_leaves_the_chain_unchanged():
    chain = Chain((2, 3)).reverse((0,)).dim_shuffle((1, 0))
    before = repr(chain)
    chain.canonicalized()
    assert repr(chain) == before


# ----- the law, on random chains ------------------------------------------------------------------
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 8))
def test_canonical_form_preserves_meaning_and_is_idempotent(seed, length):
    chain = random_chain(np.random.default_rng(seed), length)
    result = chain.canonicalized()
    assert result.in_shape == chain.in_shape
    assert result.out_shape == chain.out_shape
    assert result.truly_equivalent(chain), f"{chain}\n=> {result}"
    assert result.canonicalized() == result


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 6))
def test_a_chain_and_its_mirror_of_mirror_canonicalize_alike(seed, length):
    chain = random_chain(np.random.default_rng(seed), length)
    assert chain.mirror().mirror().equivalent(chain)
