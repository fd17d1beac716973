"""The C++ core's chains against popart_unwind.memory: same canonical ops, same regions.

The C++ canonicalizer is a port of popart_unwind.memory.canonical and must give the very
same canonical form, op by op (type, shapes, attribute; regions by their per-dimension on
indices and empty flag), on random chains of every op type. Applying a chain to regions and
unwinding a chain must likewise match the Python reference piece by piece.
"""

from __future__ import annotations

import numpy as np
import pytest
from core_convert import (
    chain_to_core,
    core_ops_value,
    core_value,
    disjoint,
    python_ops_value,
    python_value,
    to_core_all,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from popart_unwind._hooks import unwind_core as core

from popart_unwind.errors import CanonicalizationError
from popart_unwind.memory import Chain, Region
from popart_unwind.memory.canonical import canonicalize
from popart_unwind.memory.random_chains import random_chain, region_from_axis_sets
from popart_unwind.unwind.ops import unwind_chain

seeds = st.integers(0, 2**32 - 1)
lengths = st.integers(1, 8)


def python_canonical(chain: Chain) -> list[tuple] | None:
    """Python's memoised canonical ops, or None when canonicalization raises."""
    try:
        return python_ops_value(chain.canonicalized().ops)
    except CanonicalizationError:
        return None


def core_canonical(chain: core.Chain) -> list[tuple] | None:
    try:
        return core_ops_value(chain.canonicalized().ops())
    except core.CanonicalizationError:
        return None


@settings(max_examples=500, deadline=None)
@given(seeds, lengths)
def test_canonical_ops_match_python_op_by_op(seed: int, length: int) -> None:
    """Law: the C++ canonical form (memoised and not) is Python's, op by op."""
    chain = random_chain(np.random.default_rng(seed), length)
    cpp = chain_to_core(chain)
    assert core_ops_value(cpp.ops()) == python_ops_value(chain.ops)
    expected = python_canonical(chain)
    assert core_canonical(cpp) == expected
    fresh = python_ops_value(canonicalize(chain.in_shape, chain.ops))
    assert core_ops_value(core.canonicalize(cpp).ops()) == fresh


@settings(max_examples=200, deadline=None)
@given(seeds, st.integers(9, 16))
def test_long_wide_chains_canonicalize_as_in_python(seed: int, length: int) -> None:
    """Law: on longer chains of rank up to 5 (more rewrites, more reshape groups) the C++
    canonical form is still Python's, op by op."""
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, length, max_rank=5, max_dim=5, max_elements=1024)
    try:
        expected = python_ops_value(canonicalize(chain.in_shape, chain.ops))
    except CanonicalizationError:
        expected = None
    try:
        got = core_ops_value(core.canonicalize(chain_to_core(chain)).ops())
    except core.CanonicalizationError:
        got = None
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(seeds, lengths)
def test_apply_to_regions_matches_python_piece_by_piece(seed: int, length: int) -> None:
    """Law: the C++ chain maps regions to the same pieces, in the same order, as Python."""
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, length)
    regions = disjoint(rng, chain.in_shape)
    got = chain_to_core(chain).apply(to_core_all(regions)).value()
    assert core_value(got) == python_value(chain.apply_regions(regions))


@settings(max_examples=300, deadline=None)
@given(seeds, lengths)
def test_unwound_chain_matches_python_op_by_op(seed: int, length: int) -> None:
    """Law: unwinding a chain in C++ gives Python's unwind_chain, op by op."""
    chain = random_chain(np.random.default_rng(seed), length)
    got = core_ops_value(chain_to_core(chain).unwound().ops())
    assert got == python_ops_value(unwind_chain(chain).ops)


def test_the_rewrite_cap_raises_in_both() -> None:
    """Law: rewriting past the cap is an error in C++ as in Python."""
    chain = Chain((2, 3, 4)).dim_shuffle((1, 2, 0)).reverse((0,)).dim_shuffle((2, 0, 1))
    with pytest.raises(CanonicalizationError):
        canonicalize(chain.in_shape, chain.ops, max_rewrites=1)
    with pytest.raises(core.CanonicalizationError):
        core.canonicalize(chain_to_core(chain), max_rewrites=1)
    assert core_ops_value(core.canonicalize(chain_to_core(chain)).ops()) == python_ops_value(
        canonicalize(chain.in_shape, chain.ops)
    )


EDGE_CHAINS = [
    # reaching nothing, ending at rank 0: the fixed form ends with a Reshape to ()
    Chain((2,))
    .sett_fill_into(Region.from_bounds((3,), (1,), (3,)))
    .slice((0,), (1,))
    .reshape(()),
    # starting at rank 0
    Chain(()).reshape((1, 1)).expand((2, 3)).reverse((1,)).slice((0, 1), (2, 3)),
    # no elements at all
    Chain((0, 3)).reshape((3, 0)).dim_shuffle((1, 0)),
    # a mask cancels when everything reaching it lies inside (the diagonal {0, 4} of 3x3
    # lies in rows and columns {0, 1}) and stays when not (the diagonal {0, 8})
    Chain((2,))
    .sett_fill_into(region_from_axis_sets((9,), [np.array([0, 4])]))
    .reshape((3, 3))
    .mask(Region.from_bounds((3, 3), (0, 0), (2, 2))),
    Chain((2,))
    .sett_fill_into(region_from_axis_sets((9,), [np.array([0, 8])]))
    .reshape((3, 3))
    .mask(Region.from_bounds((3, 3), (0, 0), (2, 2))),
]


@pytest.mark.parametrize("chain", EDGE_CHAINS, ids=repr)
def test_edge_chains_match_python(chain: Chain) -> None:
    """Law: rank-0 ends, element-free shapes and masks canonicalize as in Python."""
    expected = python_ops_value(canonicalize(chain.in_shape, chain.ops))
    assert core_ops_value(core.canonicalize(chain_to_core(chain)).ops()) == expected
