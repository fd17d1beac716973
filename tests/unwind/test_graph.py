"""The UnwindGraph: construction, queries, and typed errors naming the op and shapes."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import GraphError, PopartUnwindError, SolverError
from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.unwind import Path, TensorId, UnwindGraph, score


def test_graph_stays_the_public_name_of_the_unwind_graph():
    from popart_unwind.unwind import Graph

    assert Graph is UnwindGraph and isinstance(Graph(), UnwindGraph)


def test_tensor_ids_are_ordered_hashable_and_show_their_names():
    g = UnwindGraph()
    a, b = g.sink((2,), "weights"), g.source((2,))
    assert a < b and len({a, b, TensorId(0)}) == 2
    assert repr(a) == "weights#0" and repr(b) == "#1"
    assert g.tensors() == [a, b] and g.sinks() == [a] and g.sources() == [b]


def test_sum_like_ties_equal_inputs_and_reduces_broadcast_ones():
    g = UnwindGraph()
    x, y = g.sink((4, 3)), g.sink((4, 3))
    bias, scalar = g.sink((3,)), g.sink(())
    result = g.sum_like([x, y, bias, scalar], 0, {(0, 1): 2.0, "default": 1.0})
    assert g.shape(result.out) == (4, 3)
    pairs = [(p.a, p.b, p.value) for p in g.valued_pairs()]
    assert (x, y, 2.0) in pairs
    assert [(index, target) for index, _, target in result.reductions] == [(2, bias), (3, scalar)]
    for _, reduced, target in result.reductions:
        assert g.kind(reduced) == "sum_like_reduce" and g.node(reduced).inputs == (x,)
        assert (reduced, target, 1.0) in pairs


def test_call_ties_copies_and_makes_a_sink_per_copy_out():
    g = UnwindGraph()
    outer, inner, result = g.sink((2,)), g.sink((2,)), g.source((3,))
    (copy_out,) = g.call([outer], [inner], [result], 4.0)
    assert g.kind(copy_out) == "sink" and g.shape(copy_out) == (3,)
    assert [(p.a, p.b, p.value) for p in g.valued_pairs()] == [
        (outer, inner, 4.0),
        (result, copy_out, 4.0),
    ]


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda g, t: g.valued_pair(t, g.sink((3, 2)), 1.0), "equal shape"),
        (lambda g, t: g.valued_pair(t, g.sink((2, 3)), -1.0), "non-negative"),
        (lambda g, t: g.dim_shuffle(t, (0, 0)), "not a permutation"),
        (lambda g, t: g.slice(t, (0, 0), (3, 3)), "out of range"),
        (lambda g, t: g.concat([t, g.sink((3, 2))], 0), "does not match"),
        (lambda g, t: g.concat([t], 2), "outside the rank"),
        (lambda g, t: g.expand(t, (4, 3)), "broadcast"),
        (lambda g, t: g.reshape(t, (4,)), "number of elements"),
        (lambda g, t: g.sum_like([t, g.sink((2, 3))], 2, 1.0), "out of range"),
        (lambda g, t: g.sum_like([g.sink((3,)), t], 0, 1.0), "not the output shape"),
        (lambda g, t: g.sum_like([t, g.sink((4,))], 0, 1.0), "do not broadcast"),
        (lambda g, t: g.sum_like([t, g.sink((2, 3))], 0, {(0, 1): 1.0, (0, 5): 2.0}), "range"),
        (lambda g, t: g.sum_like_reduce(t, (4,)), "does not broadcast"),
        (lambda g, t: g.sub_sample(t, (1,)), "one positive int per axis"),
        (lambda g, t: g.call([t], [], [], 1.0), "copy-in"),
        (lambda g, t: g.shape(TensorId(99)), "not a tensor of this graph"),
        (lambda g, t: g.solve("simulated-annealing"), "unknown unwinding algorithm"),
    ],
)
def test_invalid_use_raises_typed_errors(build, fragment):
    g = UnwindGraph()
    t = g.sink((2, 3), "t")
    with pytest.raises(PopartUnwindError, match=fragment):
        build(g, t)


def test_graph_errors_name_the_tensor_and_shapes():
    g = UnwindGraph()
    t = g.sink((2, 3), "weights")
    with pytest.raises(GraphError, match=r"weights#0.*\(2, 3\)"):
        g.reshape(t, (5,))


def full(shape):
    return DisjointRegions(shape, [Region.full(shape)])


def test_score_of_a_user_given_solution_is_exact():
    """The objective example of poprithms' unwinding notes: 2 of 6 elements agree at value
    10 -> 20."""
    g = UnwindGraph()
    sink, source = g.sink((2, 3)), g.source((2, 3))
    g.valued_pair(sink, source, 10.0)
    corners = DisjointRegions(
        (2, 3),
        [Region.from_bounds((2, 3), (0, 0), (1, 1)), Region.from_bounds((2, 3), (1, 2), (2, 3))],
    )
    assert score(g, [Path(source, sink, Chain((2, 3)), corners)]) == 20.0
    assert score(g, [Path(source, sink, Chain((2, 3)), full((2, 3)))]) == 60.0
    assert score(g, []) == 0.0


def test_equal_mappings_reached_through_different_ops_count():
    """A concat of a tensor with its own reverse agrees with a reverse of the concat at the
    middle elements; a symbolic score that only compares op sequences would miss them."""
    g = UnwindGraph()
    x = g.sink((3,))
    both = g.concat([x, g.reverse(x, (0,))], 0)
    flipped = g.reverse(both, (0,))
    g.valued_pair(both, flipped, 1.0)
    assert score(g, []) == 6.0  # [x0 x1 x2 x2 x1 x0] is a palindrome


def test_expanded_sinks_agree_wherever_the_broadcast_copy_matches():
    g = UnwindGraph()
    row = g.sink((1, 3))
    wide = g.expand(row, (2, 3))
    target = g.source((2, 3))
    g.valued_pair(wide, target, 1.0)
    solution = g.solve("greedy0")
    assert solution.score() == 3.0  # one broadcast copy can match the target, not both
    assert np.array_equal(solution.layout(row), solution.layout(target)[:1])


def test_a_sink_unwound_from_a_barrier_it_feeds_is_rejected():
    g = UnwindGraph()
    sink = g.sink((2,))
    (out,) = g.barrier([sink], [(2,)])
    with pytest.raises(SolverError, match="cycle"):
        score(g, [Path(out, sink, Chain((2,)), full((2,)))])


def test_paths_that_overlap_or_overreach_are_rejected():
    g = UnwindGraph()
    sink, source = g.sink((4,)), g.source((4,))
    half = Chain((4,)).slice((0,), (2,)).sett_fill_into(Region.from_bounds((4,), (0,), (2,)))
    with pytest.raises(SolverError, match="does not reach"):
        score(g, [Path(source, sink, half, full((4,)))])
    with pytest.raises(SolverError, match="overlaps"):
        score(
            g,
            [
                Path(source, sink, Chain((4,)), full((4,))),
                Path(source, sink, Chain((4,)), full((4,))),
            ],
        )


def test_solving_restores_the_garbage_collector_state():
    import gc

    g = UnwindGraph()
    g.valued_pair(g.sink((2,)), g.source((2,)), 1.0)
    assert gc.isenabled()
    g.solve()
    assert gc.isenabled()
    gc.disable()
    try:
        g.solve()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(SolverError):
        g.solve("no-such-solver")
    assert gc.isenabled()
