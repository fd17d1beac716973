"""The examples of poprithms' unwinding notes: scores, layouts and Greedy0's published
behaviours."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.unwind import UnwindGraph, examples


def test_basic_case_scores_thirty():
    g, t = examples.basic(5.0)
    solution = g.solve("greedy0")
    assert solution.score() == 30.0
    assert solution.upper_bound() == 30.0
    assert np.array_equal(solution.layout(t["sink"]), solution.layout(t["source"]))
    assert not np.array_equal(solution.layout(t["out"]), solution.layout(t["sink"]))


def test_layout_wanted_after_a_transpose_unwinds_to_the_sink():
    g, t = examples.dim_shuffle(7.5)
    solution = g.solve("greedy0")
    assert solution.score() == 30.0
    assert np.array_equal(solution.layout(t["sink"]), solution.layout(t["source"]).T)


def test_matmul_example_unwinds_through_dimshuffle_concat_and_reverse():
    g, t = examples.matmul()
    solution = g.solve("greedy0")
    assert solution.score() == solution.upper_bound() == 6 + 12
    lhs, rhs = solution.layout(t["lhs_target"]), solution.layout(t["rhs_target"])
    assert np.array_equal(solution.layout(t["X"]), lhs.T)
    assert np.array_equal(solution.layout(t["Y"]), rhs[:2])
    assert np.array_equal(solution.layout(t["Z"]), rhs[2:, ::-1])


def test_unbroadcast_add_meets_all_three_pairs():
    g, t = examples.unbroadcast_add()
    solution = g.solve("greedy0")
    assert len(g.valued_pairs()) == 3
    assert solution.score() == solution.upper_bound()
    assert np.array_equal(solution.layout(t["C"]), solution.layout(t["matmul"]))
    assert np.array_equal(solution.layout(t["out"]), solution.layout(t["matmul"]))


def test_broadcast_add_gives_the_bias_the_reduced_layout():
    g, t = examples.broadcast_add()
    solution = g.solve("greedy0")
    assert g.kind(t["reduced"]) == "sum_like_reduce"
    assert g.shape(t["reduced"]) == (3, 1)
    assert solution.score() == solution.upper_bound()
    assert np.array_equal(solution.layout(t["bias"]), solution.layout(t["reduced"]))


def test_call_copies_one_solution_meets_all_nine_pairs():
    g, t = examples.call_copies()
    assert len(g.valued_pairs()) == 9
    solution = g.solve("greedy0")
    assert solution.score() == solution.upper_bound()
    layout = solution.layout
    assert np.array_equal(layout(t["A"]), layout(t["a"]))
    assert np.array_equal(layout(t["C"]), layout(t["a"]))
    assert np.array_equal(layout(t["B"]), layout(t["b"]))
    assert np.array_equal(layout(t["D"]), layout(t["b"]))
    assert np.array_equal(layout(t["E"]), layout(t["out"]))
    assert np.array_equal(layout(t["F"]), layout(t["out"]))


def bias_and_table(v_bias: float, v_table: float) -> UnwindGraph:
    """A scalar bias sink and a (10, 10) sink, each tied to a source, then added."""
    g = UnwindGraph()
    bias = g.sink((), "bias")
    g.valued_pair(bias, g.source((), "bias_target"), v_bias)
    t0 = g.sink((10, 10), "t0")
    g.valued_pair(t0, g.source((10, 10), "t0_target"), v_table)
    g.sum_like([t0, bias], 0, 100 + v_bias + v_table)
    return g


def test_greedy0_finds_the_best_when_the_table_pair_is_worth_more():
    assert bias_and_table(0.5, 0.7).solve("greedy0").score() == pytest.approx(171.2)


def test_greedy0_is_knowingly_suboptimal_when_the_bias_pair_is_worth_more():
    """It takes the bias's own pair first (0.7 > 0.5), which blocks the 101.2 reduce pair;
    151.2 was possible."""
    assert bias_and_table(0.7, 0.5).solve("greedy0").score() == pytest.approx(50.7)


def test_greedy0_fills_a_sink_in_parts_by_pairs_of_decreasing_value():
    g = UnwindGraph()
    sink = g.sink((4,), "sink")
    left, right = g.slice(sink, (0,), (2,)), g.slice(sink, (1,), (4,))
    g.valued_pair(left, g.source((2,), "left_target"), 3.0)
    g.valued_pair(right, g.source((3,), "right_target"), 1.0)
    solution = g.solve("greedy0")
    assert solution.score() == 3.0 * 2 + 1.0 * 2  # index 1 went to the more valuable pair
    assert len(solution.sink_paths()) == 2


@pytest.mark.parametrize(("v_target", "v_chain", "v_copy"), [(5.0, 1.0, 0.5), (1.0, 1.0, 1.0)])
def test_fixed_point_example_reproduces_the_seed_scores(v_target, v_chain, v_copy):
    g, _ = examples.fixed_point_calls(v_target, v_chain, v_copy)
    solution = g.solve("greedy0")
    solution_one = 10 * v_target + 24 * v_copy
    solution_two = 4 * v_target + 6 * v_chain + 36 * v_copy
    assert solution.score() in (pytest.approx(solution_one), pytest.approx(solution_two))
    assert solution.upper_bound() == pytest.approx(10 * v_target + 6 * v_chain + 36 * v_copy)


@pytest.mark.parametrize(("v_bias", "v_table", "best"), [(0.7, 0.5, 151.2), (0.5, 0.7, 171.2)])
def test_default_solver_defers_the_pair_that_blocked_the_reduce_pair(v_bias, v_table, best):
    solution = bias_and_table(v_bias, v_table).solve("deferral")
    assert solution.algo == "deferral"
    assert solution.score() == pytest.approx(best)


def test_paths_explain_each_tensor_from_its_roots():
    g, t = examples.matmul()
    solution = g.solve()
    (from_target,) = solution.paths(t["Z"])
    assert from_target.src == t["rhs_target"]
    assert repr(from_target.chain) == "(3,4) -> Reverse(1) -> SettSample(Region((3, 4), [2:3, :]))"
    ids = np.arange(12).reshape(3, 4)
    assert np.array_equal(from_target.chain.apply(ids), ids[2:3, ::-1])
    for tensor in g.tensors():
        covered = sum(path.regions.total_elms() for path in solution.paths(tensor))
        assert covered == g.numel(tensor)


FIXED_POINT_VALUES = [
    (5.0, 1.0, 0.5),  # 6·4 = 24 > 6: Solution 1
    (3.0, 1.0, 1.0),  # 12 > 12 is false: a tie, both score 54
    (2.0, 1.0, 1.0),  # 6 < 12: Solution 2
    (1.0, 4.0, 0.5),  # negative left side: Solution 2
    (9.0, 0.5, 2.0),  # 51 > 24: Solution 1
]


@pytest.mark.parametrize(("v_target", "v_chain", "v_copy"), FIXED_POINT_VALUES)
def test_exact_picks_solution_one_exactly_when_the_seed_says(v_target, v_chain, v_copy):
    g, t = examples.fixed_point_calls(v_target, v_chain, v_copy)
    solution = g.solve("exact")
    assert solution.proven_optimal
    one = 10 * v_target + 24 * v_copy
    two = 4 * v_target + 6 * v_chain + 36 * v_copy
    assert solution.score() == pytest.approx(max(one, two))
    x_takes_target = [p.src for p in solution.paths(t["x"])] == [g.valued_pairs()[1].b]
    if 6 * (v_target - v_chain) > 12 * v_copy:
        assert x_takes_target
    elif two > one:
        assert np.array_equal(solution.layout(t["x"]), solution.layout(t["out"]))


def test_with_a_barrier_matmul_solution_two_is_a_cycle_and_exact_avoids_it():
    """The notes' motivation for FixedPoints: as a Barrier, the output depends on x, so x
    cannot take the output's layout, whatever it would score."""
    g, t = examples.fixed_point_calls(1.0, 4.0, 0.5, as_barrier=True)
    solution = g.solve("exact")
    assert solution.proven_optimal
    assert not np.array_equal(solution.layout(t["x"]), solution.layout(t["out"]))
    assert solution.score() < 4 * 1.0 + 6 * 4.0 + 36 * 0.5
