"""Laws of the unwinding problem on random graphs (every op type; see random_graphs.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.unwind.random_graphs import random_graph
from popart_unwind.unwind.solution import origin_blocks

SEEDS = st.integers(0, 2**32 - 1)
SOLVERS = ("greedy0", "deferral", "hybrid")


def graph_for(seed: int, size: int):
    return random_graph(np.random.default_rng(seed), size)


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, size=st.integers(1, 4))
def test_scores_lie_between_zero_and_the_upper_bound(seed, size):
    graph = graph_for(seed, size)
    for algo in SOLVERS:
        solution = graph.solve(algo)
        assert 0.0 <= solution.score() <= solution.upper_bound() + 1e-9


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, size=st.integers(1, 4))
def test_the_default_solver_is_never_below_greedy0(seed, size):
    graph = graph_for(seed, size)
    assert graph.solve().score() >= graph.solve("greedy0").score() - 1e-9


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, size=st.integers(1, 4))
def test_symbolic_score_equals_the_elementwise_score(seed, size):
    graph = graph_for(seed, size)
    for algo in SOLVERS:
        solution = graph.solve(algo)
        assert solution.symbolic_score() == pytest.approx(solution.score())


@settings(max_examples=60, deadline=None)
@given(seed=SEEDS, size=st.integers(1, 4))
def test_layouts_are_consistent_through_every_op(seed, size):
    """Checked with numpy directly, not with the rules that computed the layouts."""
    graph = graph_for(seed, size)
    solution = graph.solve()
    layout = solution.layout
    blocks = origin_blocks(graph)
    for tensor in graph.tensors():
        node = graph.node(tensor)
        if node.kind == "view":
            (source,) = node.inputs
            moved = node.chain.apply(layout(source) + 1) - 1
            assert np.array_equal(layout(tensor), moved), f"{tensor!r}: {node.chain!r}"
        elif node.kind == "concat":
            joined = np.concatenate([layout(t) for t in node.inputs], axis=node.axis)
            assert np.array_equal(layout(tensor), joined)
        elif node.kind == "sum_like":
            assert np.array_equal(layout(tensor), layout(node.inputs[node.unwind_indices[0]]))
        elif node.kind in ("source", "barrier", "fixed_point", "sum_like_reduce"):
            start = blocks[tensor]
            own = np.arange(start, start + graph.numel(tensor)).reshape(graph.shape(tensor))
            assert np.array_equal(layout(tensor), own)


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, size=st.integers(1, 4))
def test_reruns_are_identical(seed, size):
    for algo in SOLVERS:
        first = graph_for(seed, size).solve(algo)
        second = graph_for(seed, size).solve(algo)
        assert repr(first.sink_paths()) == repr(second.sink_paths())
        assert first.score() == second.score()


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, size=st.integers(1, 3))
def test_greedy0_and_the_default_never_beat_the_proven_optimum(seed, size):
    graph = graph_for(seed, size)
    exact = graph.solve("exact")
    assert exact.proven_optimal
    assert graph.solve("greedy0").score() <= graph.solve().score() + 1e-9
    assert graph.solve().score() <= exact.score() + 1e-9 <= exact.upper_bound() + 2e-9


def test_polish_stops_at_its_budget_of_candidates_and_reruns_identically():
    """With room for a few candidate moves only, polish stops early, keeping what it found
    (never worse than its input), and a rerun gives the same layouts."""
    from popart_unwind.unwind import UnwindGraph
    from popart_unwind.unwind.polish import polish

    g = UnwindGraph()
    sink = g.sink((5, 6), "sink")
    g.source((1,), "spare")
    g.valued_pair(g.reverse(sink, (0,)), sink, 1.0)
    start = g.solve("deferral", polish_up_to=0)
    full = polish(start)
    short = polish(start, max_candidates=40)
    assert full.score() > start.score()
    assert start.score() <= short.score() <= full.score()
    assert short.stats.get("polish_moves", 0) < full.stats["polish_moves"]
    again = polish(start, max_candidates=40)
    assert {t: again.layouts()[t].tolist() for t in again.layouts()} == \
        {t: short.layouts()[t].tolist() for t in short.layouts()}


def test_polish_leaves_graphs_above_its_limit_alone():
    """A sink tied to its own reverse gains from polish (the middle row agrees anyway; a
    palindrome of shared origins would agree everywhere) only below the size limit."""
    from popart_unwind.unwind import UnwindGraph

    g = UnwindGraph()
    sink = g.sink((3, 4), "sink")
    g.source((1,), "spare")
    g.valued_pair(g.reverse(sink, (0,)), sink, 1.0)
    small = g.solve("deferral")
    assert small.stats.get("polish_moves", 0) > 0
    assert small.score() == 12.0
    skipped = g.solve("deferral", polish_up_to=11)
    assert "polish_moves" not in skipped.stats
    assert skipped.score() == 4.0
