"""The exact solver: proven optima, checked against brute force and against Greedy0."""

from __future__ import annotations

import math

import numpy as np
import pytest

from popart_unwind.errors import SolverError
from popart_unwind.unwind import UnwindGraph
from popart_unwind.unwind.exact import LabelProgram, paths_for_labels, solve_exact
from popart_unwind.unwind.exact_problem import (
    Origins,
    candidate_labels,
    objective_terms,
    stand_in,
)
from popart_unwind.unwind.random_graphs import random_graph
from popart_unwind.unwind.solution import (
    Solution,
    compute_layouts,
    dependency_order,
    origin_blocks,
    score,
)


def bias_graph(vb: float, vt: float) -> UnwindGraph:
    """A scalar bias and a (10, 10) tensor, each wanting its own source, added together."""
    g = UnwindGraph()
    bias = g.sink(())
    g.valued_pair(bias, g.source(()), vb)
    t0 = g.sink((10, 10))
    g.valued_pair(t0, g.source((10, 10)), vt)
    g.sum_like([t0, bias], 0, 100 + vb + vt)
    return g


@pytest.mark.parametrize("vb,vt,best,greedy", [(0.7, 0.5, 151.2, 50.7), (0.5, 0.7, 171.2, 171.2)])
def test_bias_takes_the_reduction_where_greedy0_does_not(vb, vt, best, greedy):
    g = bias_graph(vb, vt)
    solution = solve_exact(g)
    assert solution.algo == "exact"
    assert solution.proven_optimal
    assert solution.score() == pytest.approx(best, abs=1e-9)
    assert solution.stats["objective"] == pytest.approx(best, abs=1e-9)
    assert g.solve("greedy0").score() == pytest.approx(greedy, abs=1e-9)


# ----- brute force ------------------------------------------------------------------------
def brute_force(graph: UnwindGraph) -> tuple[float, dict[int, int]]:
    """The best score over every valid assignment of origins to sink elements.

    Every sink element may take any origin of the graph. An assignment is realisable when
    each element taking another sink element's own origin finds that element keeping it,
    and valid when its paths have no dependency cycle (the library decides).
    """
    starts = origin_blocks(graph)
    total = sum(graph.numel(t) for t in starts)
    owner = np.empty(total, dtype=np.int64)
    for tensor, start in starts.items():
        owner[start : start + graph.numel(tensor)] = tensor.index
    sinks = np.array(
        [o for t in graph.sinks() for o in range(starts[t], starts[t] + graph.numel(t))],
        dtype=np.int64,
    )
    column = {int(o): j for j, o in enumerate(sinks)}
    grid = np.meshgrid(*([np.arange(total)] * len(sinks)), indexing="ij")
    table = np.stack([axis.ravel() for axis in grid], axis=1)

    def final(origins: np.ndarray) -> np.ndarray:
        out = np.broadcast_to(origins, (len(table), len(origins))).copy()
        for i, origin in enumerate(origins.tolist()):
            if origin in column:
                out[:, i] = table[:, column[origin]]
        return out

    base = compute_layouts(graph, [])
    values = np.zeros(len(table))
    for pair in graph.valued_pairs():
        agree = final(base[pair.a].ravel()) == final(base[pair.b].ravel())
        values += pair.value * agree.sum(axis=1)
    realisable = np.ones(len(table), dtype=bool)
    for j, own in enumerate(sinks.tolist()):
        for origin, k in column.items():
            if origin != own:
                realisable &= (table[:, j] != origin) | (table[:, k] == origin)
    moved = table != sinks
    keys = np.concatenate([moved, np.where(moved, owner[table], -1)], axis=1)
    valid: dict[tuple, bool] = {}
    for row in np.argsort(-values, kind="stable"):
        if not realisable[row]:
            continue
        key = tuple(keys[row].tolist())
        labels = dict(zip(sinks.tolist(), table[row].tolist(), strict=True))
        if key not in valid:
            try:
                dependency_order(graph, paths_for_labels(graph, labels))
                valid[key] = True
            except SolverError:
                valid[key] = False
        if valid[key]:
            return float(values[row]), labels
    raise AssertionError("keeping every sink's own origins is always valid")


def assignments(graph: UnwindGraph) -> int:
    origins = sum(graph.numel(t) for t in origin_blocks(graph))
    return origins ** sum(graph.numel(t) for t in graph.sinks())


def tiny_graphs() -> list:
    """Random graphs with at most 200,000 assignments, plus seeds where the exact
    solver's spare labels are needed (an idle sink element, a fully tied sink)."""
    found = []
    for seed in range(150):
        graph = random_graph(np.random.default_rng(seed), size=2, max_elements=3)
        if 0 < assignments(graph) <= 200_000:
            found.append(pytest.param(graph, id=f"size2-max3-seed{seed}"))
    for seed in (134, 2174, 2943, 2990):
        graph = random_graph(np.random.default_rng(seed), size=3, max_elements=2)
        found.append(pytest.param(graph, id=f"size3-max2-seed{seed}"))
    return found


@pytest.mark.parametrize("graph", tiny_graphs())
def test_exact_matches_brute_force(graph):
    best, labels = brute_force(graph)
    assert score(graph, paths_for_labels(graph, labels)) == pytest.approx(best, abs=1e-9)
    solution = solve_exact(graph)
    assert solution.proven_optimal
    assert solution.score() == pytest.approx(best, abs=1e-9)


def spare_label_graph(spare: str) -> UnwindGraph:
    """Sink a = (a0, a1) and sink c = (c0, c1): a0 and a1 both want c0's label (1 each), c1
    wants a barrier over a (10). So c depends on a, a cannot read c0's own origin, and a1
    cannot read a0's: the three agree only on a label from elsewhere, which ``spare``
    provides (a source, a barrier of nothing, or an idle sink element)."""
    g = UnwindGraph()
    a, c = g.sink((2,), name="a"), g.sink((2,), name="c")
    c0 = g.slice(c, [0], [1])
    g.valued_pair(g.slice(a, [0], [1]), c0, 1.0)
    g.valued_pair(g.slice(a, [1], [2]), c0, 1.0)
    over_a = g.barrier([a], [(1,)])[0]
    g.valued_pair(g.slice(c, [1], [2]), over_a, 10.0)
    if spare == "source":
        g.source((1,))
    elif spare == "barrier":
        g.barrier([], [(1,)])
    elif spare == "idle sink":
        g.sink((1,))
    return g


@pytest.mark.parametrize("spare,best", [("source", 12.0), ("barrier", 12.0),
                                        ("idle sink", 12.0), ("none", 11.0)])
def test_groups_can_agree_on_an_unrelated_label(spare, best):
    g = spare_label_graph(spare)
    assert brute_force(g)[0] == pytest.approx(best)
    solution = solve_exact(g)
    assert solution.proven_optimal
    assert solution.score() == pytest.approx(best)


def test_a_sink_cannot_pass_a_barrier_origin_back_to_the_barriers_input():
    """a0 and a1 (one sink) can agree only on s's own origin; s wants a barrier over a.
    Both cannot hold: a would depend on s, which depends on the barrier over a."""
    g = UnwindGraph()
    a, s = g.sink((2,), name="a"), g.sink((), name="s")
    g.valued_pair(g.slice(a, [0], [1]), g.slice(a, [1], [2]), 1.0)
    g.valued_pair(s, g.barrier([a], [()])[0], 1.0)
    assert brute_force(g)[0] == pytest.approx(1.0)
    solution = solve_exact(g)
    assert solution.proven_optimal
    assert solution.score() == pytest.approx(1.0)


# ----- properties on random graphs -----------------------------------------------------
@pytest.mark.parametrize("seed", range(60))
def test_exact_lies_between_greedy0_and_the_upper_bound(seed):
    graph = random_graph(np.random.default_rng(seed))
    solution = solve_exact(graph)
    assert solution.proven_optimal
    exact = solution.score()
    greedy = graph.solve("greedy0").score()
    assert greedy <= solution.stats["start_objective"] + 1e-9  # the start loses nothing
    assert greedy <= exact + 1e-9
    assert exact <= solution.upper_bound() + 1e-9
    assert exact == pytest.approx(solution.stats["objective"], abs=1e-6)
    assert exact == pytest.approx(score(graph, solution.sink_paths()), abs=1e-9)
    dependency_order(graph, solution.sink_paths())
    rerun = solve_exact(graph)
    assert repr(rerun.sink_paths()) == repr(solution.sink_paths())


def test_exact_solves_a_graph_greedy0_fails_on():
    graph = random_graph(np.random.default_rng(239))
    solution = solve_exact(graph)
    assert solution.proven_optimal
    assert solution.score() == pytest.approx(solution.stats["objective"])
    dependency_order(graph, solution.sink_paths())


def test_the_size_limit_names_the_sizes():
    g = UnwindGraph()
    g.valued_pair(g.sink((50, 100)), g.source((50, 100)), 1.0)
    with pytest.raises(SolverError, match=r"5000 sink elements.*max_sink_elements=4000"):
        solve_exact(g, max_sink_elements=4000)
    assert solve_exact(g, max_sink_elements=5000).score() == 5000


def test_no_time_returns_greedy0s_valid_solution_unproven():
    """HiGHS checks its time limit before presolving, so a zero limit stops it at once
    with the start solution (Greedy0's) as its incumbent."""
    g = bias_graph(0.7, 0.5)
    solution = solve_exact(g, time_limit=0.0)
    assert not solution.proven_optimal
    assert solution.score() == pytest.approx(50.7)
    assert isinstance(solution, Solution)
    dependency_order(g, solution.sink_paths())


def test_a_graph_without_pairs_keeps_every_sink_own():
    g = UnwindGraph()
    g.barrier([g.sink((2, 2))], [(3,)])
    solution = solve_exact(g)
    assert solution.proven_optimal
    assert solution.sink_paths() == []
    assert solution.score() == 0


def test_a_start_must_keep_the_own_origins_it_reads():
    """Only starts that satisfy every row reach HiGHS (else it would drop them silently)."""
    g = UnwindGraph()
    a, b, c = g.sink(()), g.sink(()), g.sink(())
    g.valued_pair(a, b, 1.0)
    g.valued_pair(b, g.barrier([c], [()])[0], 2.0)  # no free root: a is offered b's own
    origins = Origins(g)
    terms = objective_terms(g, origins)
    candidates = candidate_labels(g, origins, terms)
    program = LabelProgram(g, origins, terms, candidates)
    s_a, s_b, r = 0, 1, 3
    assert candidates.labels[s_a] == [stand_in(c), s_a, s_b, r]
    assert program.start_values({s_a: s_b, s_b: s_b}) is not None
    assert program.start_values({s_a: s_b, s_b: r}) is None  # b does not keep its own
    assert program.start_values({s_a: 99, s_b: s_b}) is None  # not a candidate
    assert program.start_values({s_a: stand_in(c), s_b: stand_in(c)}) is not None  # c idle
    assert solve_exact(g).score() == pytest.approx(3.0)


# ----- labels to paths ---------------------------------------------------------------------
def test_falling_labels_split_into_rising_runs():
    g = UnwindGraph()
    sink, source = g.sink((2, 2)), g.source((4,))
    start = origin_blocks(g)
    s0, r0 = start[sink], start[source]
    wanted = {s0: r0 + 3, s0 + 1: r0 + 1, s0 + 2: r0 + 2, s0 + 3: r0}
    paths = paths_for_labels(g, wanted)
    assert len(paths) == 3  # (3), (1, 2), (0): the longest falling run has length 3
    layout = compute_layouts(g, paths)[sink]
    assert layout.ravel().tolist() == [wanted[s0 + i] for i in range(4)]


def test_labels_may_repeat_and_come_from_another_sinks_own():
    g = UnwindGraph()
    a, b, r = g.sink((3,)), g.sink((2,)), g.source(())
    start = origin_blocks(g)
    wanted = {start[a]: start[r], start[a] + 1: start[b] + 1, start[a] + 2: start[r]}
    layout = compute_layouts(g, paths_for_labels(g, wanted))[a]
    assert layout.tolist() == [start[r], start[b] + 1, start[r]]


def test_labels_must_be_sink_origins_and_origins():
    g = UnwindGraph()
    g.sink((2,))
    source = g.source((2,))
    with pytest.raises(SolverError, match="sink element's origin"):
        paths_for_labels(g, {origin_blocks(g)[source]: 0})
    with pytest.raises(SolverError, match="origins run from 0 to 3"):
        paths_for_labels(g, {0: 99})


def test_exact_counts_each_agreement_once_through_expand():
    """A scalar sink expanded to (3,) and tied to a (3,) source: one label serves all."""
    g = UnwindGraph()
    s = g.sink(())
    g.valued_pair(g.expand(s, (3,)), g.source((3,)), 2.0)
    solution = solve_exact(g)
    assert solution.score() == pytest.approx(2.0)
    assert math.isclose(solution.upper_bound(), 6.0)
