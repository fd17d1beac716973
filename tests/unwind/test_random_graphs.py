"""The random graph generator: every op appears, graphs are small, valid and reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest

from popart_unwind.errors import GraphError
from popart_unwind.unwind import UnwindGraph
from popart_unwind.unwind.random_graphs import random_graph
from popart_unwind.unwind.solution import sink_ancestors

GRAPH_OPS = (
    "sink", "source", "barrier", "fixed_point", "sum_like", "sum_like_reduce", "reshape",
    "flatten", "dim_shuffle", "reverse", "identity", "slice", "sub_sample", "sett_sample",
    "concat", "expand", "call", "valued_pair",
)


@pytest.fixture
def direct_calls(monkeypatch) -> list[tuple[str, UnwindGraph, tuple]]:
    """Records (op name, graph, arguments) of UnwindGraph methods called from outside it."""
    calls: list[tuple[str, UnwindGraph, tuple]] = []
    depth = [0]
    for name in GRAPH_OPS:
        method = getattr(UnwindGraph, name)

        def spy(self, *args, _method=method, _name=name, **kwargs):
            if depth[0] == 0:
                calls.append((_name, self, (*args, *kwargs.values())))
            depth[0] += 1
            try:
                return _method(self, *args, **kwargs)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(UnwindGraph, name, spy)
    return calls


def describe(graph: UnwindGraph) -> list:
    """Everything that defines a graph, comparable across runs."""
    tensors = [(graph.kind(t), graph.shape(t), graph.node(t).inputs, repr(graph.node(t).chain),
                graph.node(t).axis, graph.node(t).unwind_indices) for t in graph.tensors()]
    return [tensors, graph.valued_pairs()]


def test_every_op_and_every_sum_like_feature_appears(direct_calls):
    graphs = [random_graph(np.random.default_rng(seed)) for seed in range(200)]
    assert {name for name, _, _ in direct_calls} == set(GRAPH_OPS)
    sum_likes = [(graph, args) for name, graph, args in direct_calls if name == "sum_like"]
    assert any(len(args[1]) >= 2 for _, args in sum_likes)  # several unwind indices
    assert any(isinstance(args[2], dict) for _, args in sum_likes)  # per-pair values
    assert any(len({graph.shape(t) for t in args[0]}) > 1 for graph, args in sum_likes)
    assert any(not any(graph.kind(t) in ("source", "fixed_point") for t in graph.tensors())
               for graph in graphs)


def has_competition(graph: UnwindGraph) -> bool:
    """Some tensor tied to two or more sources."""
    sources = set(graph.sources())
    count: dict = {}
    for pair in graph.valued_pairs():
        for mine, other in ((pair.a, pair.b), (pair.b, pair.a)):
            if other in sources:
                count[mine] = count.get(mine, 0) + 1
    return any(n >= 2 for n in count.values())


def has_dependency_conflict(graph: UnwindGraph) -> bool:
    """Some barrier output tied to a tensor whose sinks also feed that barrier, or two
    sinks each tied to a barrier over the other."""
    ancestors = sink_ancestors(graph)
    for pair in graph.valued_pairs():
        for mine, other in ((pair.a, pair.b), (pair.b, pair.a)):
            if graph.kind(other) == "barrier" and ancestors[mine] & ancestors[other]:
                return True
    return False


def test_both_kinds_of_conflict_appear():
    graphs = [random_graph(np.random.default_rng(seed)) for seed in range(100)]
    assert sum(map(has_competition, graphs)) >= 10
    assert sum(map(has_dependency_conflict, graphs)) >= 10


@pytest.mark.parametrize("size,max_elements", [(1, 1), (1, 4), (3, 12), (5, 8)])
def test_graphs_stay_within_their_sizes(size, max_elements):
    with_pairs = 0
    for seed in range(40):
        graph = random_graph(np.random.default_rng(seed), size, max_elements)
        assert all(graph.numel(t) <= max_elements for t in graph.tensors())
        assert sum(graph.numel(t) for t in graph.sinks()) <= size * max_elements
        with_pairs += bool(graph.valued_pairs())
        for pair in graph.valued_pairs():
            assert graph.shape(pair.a) == graph.shape(pair.b)
            assert math.isfinite(pair.value) and pair.value > 0
    assert with_pairs >= 30


def test_same_generator_state_gives_the_same_graph():
    for seed in range(20):
        first = random_graph(np.random.default_rng(seed))
        second = random_graph(np.random.default_rng(seed))
        assert describe(first) == describe(second)
    assert describe(random_graph(np.random.default_rng(1))) != describe(
        random_graph(np.random.default_rng(2)))


def test_bad_sizes_are_rejected():
    with pytest.raises(GraphError, match="size 0"):
        random_graph(np.random.default_rng(0), size=0)
    with pytest.raises(GraphError, match="max_elements 0"):
        random_graph(np.random.default_rng(0), max_elements=0)


def test_greedy0_solves_random_graphs():
    for seed in range(200):
        solution = random_graph(np.random.default_rng(seed)).solve("greedy0")
        assert 0 <= solution.score() <= solution.upper_bound()


def test_greedy0_solves_a_reduction_of_a_sum_like_output():
    """A sum_like output's layout is its first unwind input's, so a reduction of it may be
    unwound into another of its inputs without a cycle."""
    random_graph(np.random.default_rng(239)).solve("greedy0")
    g = UnwindGraph()
    a, b = g.sink(()), g.sink(())
    total = g.sum_like([a, b], 0, 1.0)
    reduced = g.sum_like_reduce(total.out, ())
    g.valued_pair(reduced, b, 10.0)
    for algo in ("greedy0", "deferral", "exact"):
        assert g.solve(algo).score() == 10.0
