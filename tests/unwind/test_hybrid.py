"""The default solver: the deferral heuristic, finished by the exact solver on small graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import SolverError
from popart_unwind.unwind import UnwindGraph
from popart_unwind.unwind.exact import solve_exact
from popart_unwind.unwind.random_graphs import random_graph
from popart_unwind.unwind.solvers import DEFAULT


def graph_for(seed: int, size: int) -> UnwindGraph:
    return random_graph(np.random.default_rng(seed), size)


def test_hybrid_is_the_default():
    assert DEFAULT == "hybrid"
    graph = graph_for(4, 2)
    assert graph.solve().algo == "hybrid"


@pytest.mark.parametrize("seed", [4, 77, 221, 225])
def test_hybrid_reaches_the_optimum_where_the_heuristic_falls_short(seed):
    """Graphs (size 2) on which deferral keeps less than 0.9 of the proven optimum."""
    graph = graph_for(seed, 2)
    heuristic = graph.solve("deferral").score()
    optimum = graph.solve("exact")
    assert optimum.proven_optimal
    assert heuristic < 0.9 * optimum.score()
    hybrid = graph.solve("hybrid")
    assert hybrid.proven_optimal
    assert hybrid.score() == pytest.approx(optimum.score())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 4))
def test_hybrid_is_never_below_the_heuristic_and_never_above_the_optimum(seed, size):
    graph = graph_for(seed, size)
    hybrid = graph.solve("hybrid")
    assert hybrid.score() >= graph.solve("deferral").score() - 1e-9
    optimum = graph.solve("exact")
    assert hybrid.score() <= optimum.score() + 1e-9
    if hybrid.proven_optimal and optimum.proven_optimal:
        assert hybrid.score() == pytest.approx(optimum.score())


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_hybrid_reruns_give_the_same_paths(seed):
    graph = graph_for(seed, 4)
    first, second = graph.solve("hybrid"), graph.solve("hybrid")
    assert repr(first.sink_paths()) == repr(second.sink_paths())


def test_above_its_limit_hybrid_returns_the_heuristics_solution():
    graph = graph_for(225, 2)
    elements = sum(graph.numel(t) for t in graph.sinks())
    big = graph.solve("hybrid", exact_up_to=elements - 1)
    assert big.stats["finish"] == "none"
    assert not big.proven_optimal
    assert repr(big.sink_paths()) == repr(graph.solve("deferral").sink_paths())


def test_a_search_stopped_by_the_clock_restarts_the_heuristic():
    """What a time limit leaves depends on the machine's speed; the restarts do not."""
    graph = graph_for(225, 2)
    stopped = graph.solve("hybrid", exact_seconds=0.0)
    assert stopped.stats["exact_status"] == "Time limit reached"
    assert stopped.stats["finish"] == "time limit: restarts"
    assert not stopped.proven_optimal
    assert repr(stopped.sink_paths()) == repr(graph.solve("restarts").sink_paths())


def test_a_stopped_exact_search_keeps_its_start():
    """With no branch-and-bound node allowed, the exact solver returns at least its start."""
    graph = graph_for(225, 2)
    start = graph.solve("deferral")
    stopped = solve_exact(graph, start=start, max_nodes=0)
    assert stopped.score() >= start.score() - 1e-9


def test_the_start_must_belong_to_the_graph():
    other = graph_for(4, 2).solve("deferral")
    with pytest.raises(SolverError, match="start solution belongs to another graph"):
        solve_exact(graph_for(225, 2), start=other)
