"""Laws of the planner on random small IRs (views, elementwise ops, matmuls, barriers)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planner_testing import build, programs, small_target
from popart_unwind.transforms import plan_ir

from popart_unwind.ir.tile_mapping import tile_array, tile_mapping
from popart_unwind.options import SessionOptions

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def planned_tensors(ir):
    """Every tensor the plan must map: producer-less tensors and call outputs."""
    found = []
    for graph in ir.graphs:
        found += graph.producerless_tensors()
    return found


@SETTINGS
@given(programs())
def test_every_producerless_tensor_gets_a_complete_valid_mapping(program):
    ir = build(program)
    target = small_target(8)
    result = plan_ir(ir, target)
    for tensor in planned_tensors(ir):
        assert tensor.tile_mapping is not None, tensor.id
        assert len(tensor.tile_mapping) == target.num_tiles
        tiles = tile_array(tensor.tile_mapping, tensor.nelms(), target.num_tiles, tensor.id)
        planned = result.tensor(tensor.graph.id, tensor.id).tiles
        assert np.array_equal(tiles, planned)
        # the narrowest ids, shared with the realizer (and the target's answers): read-only
        assert planned.dtype == np.int16 and not planned.flags.writeable
    assert len(result.tensors) == len(planned_tensors(ir))
    assert 0 <= result.objective <= result.upper_bound + 1e-9


@SETTINGS
@given(programs())
def test_equal_irs_get_identical_plans(program):
    first, second = build(program), build(program)
    a = plan_ir(first, small_target(8))
    target = small_target(8)
    target.linear_tiles((100,), "float32")  # a used target: plans reset its rotation
    b = plan_ir(second, target)
    assert a.mappings() == b.mappings()
    assert (a.objective, a.upper_bound) == (b.objective, b.upper_bound)
    assert [p.explanation for p in a.tensors] == [p.explanation for p in b.tensors]
    again = plan_ir(second, target)
    assert not again.changed and again.mappings() == b.mappings()


@SETTINGS
@given(programs())
def test_equal_origins_sit_on_equal_tiles(program):
    """The realization never breaks what the solver made agree: for every ValuedPair, the
    elements with equal origins have equal tiles, so the tile-level agreement of the pairs
    is at least the solver's objective."""
    ir = build(program)
    result = plan_ir(ir, small_target(8), write=False)
    graph, solution, realizer = result.unwind_graph, result.solution, result.realizer
    tile_score = 0.0
    for pair in graph.valued_pairs():
        same_origin = solution.layout(pair.a) == solution.layout(pair.b)
        same_tile = (realizer.tiles(pair.a).reshape(graph.shape(pair.a))
                     == realizer.tiles(pair.b).reshape(graph.shape(pair.b)))
        assert not (same_origin & ~same_tile).any()
        tile_score += pair.value * np.count_nonzero(same_tile)
    assert tile_score >= solution.score() - 1e-9
    assert abs(solution.score() - result.objective) < 1e-6


@settings(max_examples=10, deadline=None)
@given(programs(max_ops=4))
def test_exact_solver_scores_at_least_the_default(program):
    ir = build(program)
    default = plan_ir(ir, small_target(8), write=False)
    exact = plan_ir(ir, small_target(8), options=SessionOptions(unwind_algorithm="exact"),
                    write=False)
    assert exact.solver == "exact"
    assert exact.objective >= default.objective - 1e-9
    assert exact.upper_bound == default.upper_bound


@given(st.lists(st.integers(0, 5), max_size=60), st.integers(6, 9))
def test_poplar_mapping_lists_each_tiles_maximal_runs_in_order(tiles, num_tiles):
    array = np.array(tiles, dtype=np.int16)
    expected = [[] for _ in range(num_tiles)]
    for begin, tile in enumerate(tiles):  # element by element: extend or open a run
        runs = expected[tile]
        if runs and runs[-1][1] == begin:
            runs[-1] = (runs[-1][0], begin + 1)
        else:
            runs.append((begin, begin + 1))
    assert tile_mapping(array, num_tiles) == expected
    assert np.array_equal(tile_array(expected, len(tiles), num_tiles), array)
