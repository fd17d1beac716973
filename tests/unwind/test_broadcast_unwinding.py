"""Unwinding through Expand: a broadcast's copies all come from the lowest one (the rule
poprithms' ``Expand::bwd`` states), so a wanted layout reaches the broadcast's sink when
what it wants covers the lowest copy, and only a later pass can help when it does not."""

from __future__ import annotations

import pytest

from popart_unwind.unwind import UnwindGraph


def _tied_to_a_source(view, g: UnwindGraph) -> UnwindGraph:
    g.valued_pair(view, g.source((3, 4), "target"), 1.0)
    return g


def slice_then_expand() -> UnwindGraph:
    g = UnwindGraph()
    sink = g.sink((2, 4), "sink")
    return _tied_to_a_source(g.expand(g.slice(sink, (0, 0), (1, 4)), (3, 4)), g)


def flat_slice_then_expand() -> UnwindGraph:
    g = UnwindGraph()
    sink = g.sink((6,), "sink")
    return _tied_to_a_source(g.expand(g.slice(sink, (2,), (6,)), (3, 4)), g)


def expand_then_slice() -> UnwindGraph:
    g = UnwindGraph()
    sink = g.sink((1, 4), "sink")
    wide = g.slice(g.expand(sink, (4, 4)), (1, 0), (4, 4))
    return _tied_to_a_source(wide, g)


@pytest.mark.parametrize("build", [slice_then_expand, flat_slice_then_expand])
@pytest.mark.parametrize("algo", ["greedy0", "deferral", "hybrid", "exact"])
def test_the_lowest_copy_reaches_the_sink_behind_a_slice(build, algo):
    """Row 0 of the target lands in the sliced part of the sink: the 4 elements of row 0
    agree, the other rows repeat it (3 rows of 4 elements can agree at most 4 times)."""
    solution = build().solve(algo)
    assert solution.score() == 4.0


def test_greedy0_cannot_unwind_a_slice_that_misses_the_lowest_copy():
    """Rows 1:4 of the broadcast exclude its lowest copy (row 0): Greedy0 plants nothing, as
    poprithms' does; the default's later passes still find the optimum."""
    g = expand_then_slice()
    assert g.solve("greedy0").score() == 0.0
    assert g.solve("exact").score() == 4.0
    assert g.solve().score() == 4.0
