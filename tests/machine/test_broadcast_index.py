"""``broadcast_index`` (which element of a broadcast operand each output element reads),
derived from the shape engine's projections, against numpy's own broadcasting."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.machine.exchange import broadcast_index


@st.composite
def broadcast_pairs(draw):
    """A full shape and an operand that broadcasts to it: a suffix, some axes set to 1."""
    full = tuple(draw(st.lists(st.integers(1, 5), max_size=4)))
    kept = draw(st.integers(0, len(full)))
    small = tuple(1 if draw(st.booleans()) else size for size in full[len(full) - kept:])
    return small, full


@given(broadcast_pairs())
def test_broadcast_index_matches_numpy(pair):
    small, full = pair
    numbered = np.arange(prod(small), dtype=np.int64).reshape(small)
    expected = np.broadcast_to(numbered, full).reshape(-1)
    assert np.array_equal(broadcast_index(small, full), expected)


def test_a_pair_that_does_not_broadcast_is_a_shape_error():
    with pytest.raises(ShapeError, match="does not broadcast"):
        broadcast_index((3,), (4, 2))
