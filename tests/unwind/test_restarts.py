"""Deferral restarted from perturbed starts: never below deferral, never above the optimum,
the same on every run."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.unwind import UnwindGraph
from popart_unwind.unwind.random_graphs import random_graph


def graph_for(seed: int, size: int) -> UnwindGraph:
    return random_graph(np.random.default_rng(seed), size)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 6))
def test_restarts_never_lose_to_deferral_nor_pass_the_bound(seed, size):
    graph = graph_for(seed, size)
    restarted = graph.solve("restarts", restarts=6)
    assert restarted.score() >= graph.solve("deferral").score() - 1e-9
    assert restarted.score() <= restarted.upper_bound() + 1e-9
    assert restarted.symbolic_score() == restarted.score()


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_restarts_rerun_to_the_same_paths(seed):
    graph = graph_for(seed, 4)
    first, second = graph.solve("restarts", restarts=6), graph.solve("restarts", restarts=6)
    assert repr(first.sink_paths()) == repr(second.sink_paths())


def test_restarts_find_what_one_deferral_trajectory_misses():
    """A random graph of size 16 (64 steps) on which deferral keeps about 0.90 of the optimum
    (benchmarks/unwind_quality.py's generator, seed 54)."""
    graph = graph_for(54, 16)
    optimum = graph.solve("exact", time_limit=60)
    assert optimum.proven_optimal
    deferral = graph.solve("deferral").score()
    restarted = graph.solve("restarts")
    assert deferral < 0.95 * optimum.score()
    assert deferral < restarted.score() <= optimum.score() + 1e-9
    assert restarted.stats["restart_improved"]
