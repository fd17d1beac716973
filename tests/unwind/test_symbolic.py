"""The symbolic score equals the elementwise objective."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.unwind import Path, UnwindGraph, examples, symbolic
from popart_unwind.unwind.ops import ROOT_KINDS
from popart_unwind.unwind.random_graphs import random_graph
from popart_unwind.unwind.solution import compute_layouts, elementwise_score
from popart_unwind.unwind.symbolic import InwardPaths, inward_paths, symbolic_score

BUILDERS = [
    examples.basic,
    examples.dim_shuffle,
    examples.matmul,
    examples.unbroadcast_add,
    examples.broadcast_add,
    examples.call_copies,
    lambda: examples.fixed_point_calls(5.0, 1.0, 0.5),
    lambda: examples.fixed_point_calls(1.0, 4.0, 2.0),
]


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("algo", ["greedy0", "deferral"])
def test_symbolic_score_equals_elementwise_on_the_seed_examples(build, algo):
    graph, _ = build()
    solution = graph.solve(algo)
    assert solution.symbolic_score() == pytest.approx(solution.score())


def test_symbolic_score_counts_agreement_through_different_chains():
    g = UnwindGraph()
    x = g.sink((3,))
    both = g.concat([x, g.reverse(x, (0,))], 0)
    g.valued_pair(both, g.reverse(both, (0,)), 1.0)
    inward = inward_paths(g, [])
    assert symbolic_score(g, inward) == 6.0


def test_symbolic_score_of_partial_user_paths():
    """Half a sink from a source, the other half its own: both scores see 2 of 4 agree."""
    g = UnwindGraph()
    sink, source = g.sink((4,)), g.source((4,))
    g.valued_pair(sink, source, 1.5)
    g.valued_pair(g.reverse(sink, (0,)), g.reverse(source, (0,)), 1.0)
    half = Region.from_bounds((4,), (0,), (2,))
    paths = [Path(source, sink, Chain((4,)).mask(half), DisjointRegions((4,), [half]))]
    exact = elementwise_score(g, compute_layouts(g, paths))
    assert exact == 1.5 * 2 + 1.0 * 2
    assert symbolic_score(g, inward_paths(g, paths)) == exact


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("algo", ["greedy0", "deferral"])
def test_inward_paths_on_demand_are_those_of_the_whole_graph(seed, algo):
    """Asked tensor by tensor in any order, the on-demand paths are the full pass's, and
    asking for one tensor visits only what its layout is made from."""
    graph = random_graph(np.random.default_rng(seed))
    solution = graph.solve(algo)
    full = inward_paths(graph, solution.sink_paths())
    order = list(full)
    np.random.default_rng(seed).shuffle(order)
    lazy = InwardPaths(graph, solution.sink_paths())
    for tensor in order:
        assert lazy[tensor] == full[tensor]
    first = InwardPaths(graph, solution.sink_paths())
    first[order[0]]
    assert set(first._found) <= set(full)
    if graph.kind(order[0]) in ROOT_KINDS:
        assert list(first._found) == [order[0]]


@pytest.mark.parametrize("widths", [[2, 3, 1], [1] * 7, [4, 1, 2, 5]])
@pytest.mark.parametrize("axis", [0, 1])
def test_slabs_unwound_and_concatenated_again_agree_without_comparing_arrays(
        widths, axis, monkeypatch):
    """A Source tied to a Concat of sinks lays each sink out as its slab; each sink's path
    into the Concat is a fill then a sample that keeps every element in place, so the score
    counts it without comparing arrays, in Python and in the core alike."""
    g = UnwindGraph()
    shapes = [(w, 3) if axis == 0 else (3, w) for w in widths]
    joined = g.concat([g.sink(shape) for shape in shapes], axis)
    total = (sum(widths), 3) if axis == 0 else (3, sum(widths))
    g.valued_pair(joined, g.source(total), 1.0)
    solution = g.solve("greedy0")
    exact = elementwise_score(g, compute_layouts(g, solution.sink_paths()))
    assert exact == sum(widths) * 3
    compared = []
    monkeypatch.setattr(symbolic, "_agreeing_elements",
                        lambda *args: compared.append(args) or 0)
    assert symbolic_score(g, inward_paths(g, solution.sink_paths())) == exact
    assert not compared
    assert solution.symbolic_score() == exact  # the core's
