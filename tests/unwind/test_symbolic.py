"""The symbolic score equals the elementwise objective."""

from __future__ import annotations

import pytest

from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.unwind import Graph, Path, examples
from popart_unwind.unwind.solution import compute_layouts, elementwise_score
from popart_unwind.unwind.symbolic import inward_paths, symbolic_score

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
    g = Graph()
    x = g.sink((3,))
    both = g.concat([x, g.reverse(x, (0,))], 0)
    g.valued_pair(both, g.reverse(both, (0,)), 1.0)
    inward = inward_paths(g, [])
    assert symbolic_score(g, inward) == 6.0


def test_symbolic_score_of_partial_user_paths():
    """Half a sink from a source, the other half its own: both scores see 2 of 4 agree."""
    g = Graph()
    sink, source = g.sink((4,)), g.source((4,))
    g.valued_pair(sink, source, 1.5)
    g.valued_pair(g.reverse(sink, (0,)), g.reverse(source, (0,)), 1.0)
    half = Region.from_bounds((4,), (0,), (2,))
    paths = [Path(source, sink, Chain((4,)).mask(half), DisjointRegions((4,), [half]))]
    exact = elementwise_score(g, compute_layouts(g, paths))
    assert exact == 1.5 * 2 + 1.0 * 2
    assert symbolic_score(g, inward_paths(g, paths)) == exact
