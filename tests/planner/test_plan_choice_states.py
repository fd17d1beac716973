"""The step-wide tile bound of ``layers.plan_choice``: where the layers' chosen plans would
put more weights' optimizer states on some tile than Poplibs' plans of the same layers put
on their fullest, layers take their bounded options, the one adding most to that tile
first, until they do not; a step within the bound keeps every choice.

Oracle: the totals themselves."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.layers.plan_choice import _Choice, _no_fuller_than_poplibs


class _Layer:
    """What the bound reads of a layer: its forward op's IPU."""

    class fwd:  # a stand-in for the op
        class settings:
            vgraph_id = 0


def choices(draw_bytes: list[tuple[list[int], list[int], list[int]]]) -> list[_Choice]:
    return [_Choice(_Layer(), f"taken{n}", f"bounded{n}", np.array(taken), np.array(bounded),
                    np.array(own))
            for n, (taken, bounded, own) in enumerate(draw_bytes)]


tiles = st.integers(1, 4)


@st.composite
def layer_bytes(draw, num_tiles: int):
    row = st.lists(st.integers(0, 50), min_size=num_tiles, max_size=num_tiles)
    own = draw(row)
    bounded = [min(a, b) for a, b in zip(draw(row), own, strict=True)]  # within Poplibs'
    return draw(row), bounded, own


@settings(max_examples=300, deadline=None)
@given(data=st.data(), num_tiles=tiles, count=st.integers(1, 5))
def test_switches_until_no_tile_is_fuller_than_poplibs(data, num_tiles, count):
    drawn = [data.draw(layer_bytes(num_tiles)) for _ in range(count)]
    found = choices(drawn)
    limit = sum(np.array(own) for _, _, own in drawn).max()
    before = sum(np.array(taken) for taken, _, _ in drawn)
    changed = _no_fuller_than_poplibs(found)
    after = sum(choice.taken_bytes for choice in found)
    # each bounded option fills no tile beyond Poplibs' plan of its layer, so switching
    # every layer reaches the bound: the greedy stops there or sooner
    assert after.max() <= limit
    if before.max() <= limit:
        assert changed == []
    assert all(choice.taken == f"bounded{found.index(choice)}" for choice in changed)


def test_within_the_bound_nothing_changes():
    found = choices([([4, 0], [1, 1], [5, 5]), ([3, 3], [1, 1], [4, 4])])
    assert _no_fuller_than_poplibs(found) == []
    assert [c.taken for c in found] == ["taken0", "taken1"]


def test_the_layer_adding_most_to_the_fullest_tile_switches_first():
    # tile 0 holds 12 against Poplibs' 8: layer 1 adds 6 there and its bounded option 1
    found = choices([([6, 0], [4, 0], [4, 4]), ([6, 0], [1, 1], [4, 4])])
    changed = _no_fuller_than_poplibs(found)
    assert [c.taken for c in changed] == ["bounded1"]
