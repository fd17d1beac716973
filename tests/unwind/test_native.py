"""The solver's C++ core against its Python reference: the same runs, path for path.

Greedy0 and every run of the deferral heuristic execute in the C++ core by default
(``engine="native"``); ``greedy0.py`` is the reference (``engine="python"``). On random
graphs of every op kind (views, concats, sum_likes with broadcasts, barriers, fixed points,
calls), each run must plant the same sink paths in the same order (same source, sink,
canonical chain and region pieces) and report the same blockers and late sinks, so that
every solver built on the runs gives the same solution whichever engine runs them.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import SolverError
from popart_unwind.unwind import UnwindGraph, examples
from popart_unwind.unwind.greedy0 import greedy_runner, paths_back_to_sinks
from popart_unwind.unwind.random_graphs import random_graph
from popart_unwind.unwind.solution import Solution

SETTINGS = settings(max_examples=150, deadline=None)


def path_key(path) -> tuple:
    return (path.src, path.dst, path.chain, tuple(
        (r.shape, tuple(map(tuple, r.get_ons()))) for r in path.regions.regions))


def assert_same_runs(graph: UnwindGraph) -> None:
    """Deferral's sequence of runs, taken with both engines, agrees run by run."""
    native, python = greedy_runner(graph, "native"), greedy_runner(graph, "python")
    deferred: frozenset[int] = frozenset()
    late: frozenset = frozenset()
    for _ in range(4):
        got, want = native(deferred, late), python(deferred, late)
        assert [path_key(p) for p in got[0].sink_paths()] == [
            path_key(p) for p in want[0].sink_paths()]
        assert got[0].symbolic_score() == want[0].symbolic_score()
        assert got[1:] == want[1:]
        if got[1] <= deferred and got[2] <= late:
            return
        deferred, late = deferred | frozenset(got[1]), late | frozenset(got[2])


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 8))
def test_runs_match_the_reference_on_random_graphs(seed: int, size: int) -> None:
    assert_same_runs(random_graph(np.random.default_rng(seed), size))


EXAMPLES = {
    "basic": lambda: examples.basic(),
    "dim_shuffle": lambda: examples.dim_shuffle(),
    "matmul": lambda: examples.matmul(),
    "unbroadcast_add": lambda: examples.unbroadcast_add(),
    "broadcast_add": lambda: examples.broadcast_add(),
    "call_copies": lambda: examples.call_copies(),
    "fixed_point_calls": lambda: examples.fixed_point_calls(1.0, 2.0, 3.0),
    "fixed_point_calls_barrier": lambda: examples.fixed_point_calls(3.0, 2.0, 1.0, True),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_runs_match_the_reference_on_the_examples(name: str) -> None:
    graph, _ = EXAMPLES[name]()
    assert_same_runs(graph)


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.integers(1, 8))
def test_solvers_agree_across_engines(seed: int, size: int) -> None:
    graph = random_graph(np.random.default_rng(seed), size)
    for algo in ("greedy0", "deferral"):
        native = graph.solve(algo, engine="native")
        python = graph.solve(algo, engine="python")
        assert [path_key(p) for p in native.sink_paths()] == [
            path_key(p) for p in python.sink_paths()]
        assert native.score() == python.score()


def block_chain(blocks: int, variant: int) -> UnwindGraph:
    """The block chain poprithms' Greedy0 is timed on (benchmarks/unwind_blocks.py)."""
    g = UnwindGraph()
    previous = g.sink((8, 16))
    g.valued_pair(previous, g.source((8, 16)), 1.0)
    for _ in range(blocks):
        if variant == 0:
            x = g.sink((8, 16))
        else:
            tall = g.sink((16, 16))
            x = g.slice(tall, (0, 0), (8, 16))
            g.valued_pair(g.reverse(g.slice(tall, (8, 0), (16, 16)), (1,)), previous, 2.0)
        u = g.sum_like([previous, x], [1], 3.0).out
        lhs = g.dim_shuffle(g.reshape(u, (16, 8)), (1, 0))
        g.valued_pair(lhs, g.source((8, 16)), 9.0)
        w = g.sink((16, 16))
        g.valued_pair(w, g.source((16, 16)), 10.0)
        (mm,) = g.barrier([lhs, w], [(8, 16)])
        previous = g.sum_like([mm, g.sink((16,))], 0, 20.0).out
    return g


@pytest.mark.parametrize(("variant", "score"), [(0, 40_704.0), (1, 43_264.0)])
def test_block_chain_scores_as_poprithms(variant: int, score: float) -> None:
    """poprithms' Greedy0 scores N = 10 blocks 40,704 (variant 0) and 43,264 (variant 1)."""
    graph = block_chain(10, variant)
    assert_same_runs(graph)
    assert graph.solve("greedy0").symbolic_score() == score


def test_an_unknown_engine_is_refused() -> None:
    graph = UnwindGraph()
    graph.sink((2,))
    with pytest.raises(SolverError, match="engine 'fast'"):
        graph.solve("greedy0", engine="fast")


def test_native_solution_is_a_solution() -> None:
    graph = random_graph(np.random.default_rng(7), 4)
    solution = graph.solve("greedy0")
    assert isinstance(solution, Solution)
    assert solution.symbolic_score() == solution.score()


#: 200,000 sinks tied in pairs: one run once scanned every sink per finalization (about
#: 90 s here); finding the next sink from an ordered set takes about 3 s.
MANY_SINKS = """
from popart_unwind.unwind import UnwindGraph
from popart_unwind.unwind.greedy0 import greedy_runner
graph = UnwindGraph()
for i in range(100_000):
    graph.valued_pair(graph.sink((4, 8), f"a{i}"), graph.sink((4, 8), f"b{i}"), 1.0)
solution, _, _ = greedy_runner(graph, "native")(frozenset(), frozenset())
assert solution.symbolic_score() == 3_200_000.0
"""


def test_a_run_over_many_sinks_is_not_quadratic_in_them(tmp_path):
    """A generous bound (a minute for about 10 s of work, graph building included). The
    child runs in an empty folder, so it imports the installed package, not the sources."""
    done = subprocess.run([sys.executable, "-c", MANY_SINKS], timeout=60, cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def chain_of_adds(length: int) -> UnwindGraph:
    """``x`` through ``length`` ops, every other one an Add of the same weight ``w``."""
    graph = UnwindGraph()
    current, weight = graph.sink((4, 8), "x"), graph.sink((4, 8), "w")
    for i in range(length):
        current = (graph.identity(current, f"r{i}") if i % 2 == 0 else
                   graph.sum_like([current, weight], [0, 1], 1.0, name=f"a{i}").out)
    return graph


def test_paths_back_list_each_sink_and_chain_once():
    """Every tensor of the chain reaches x and w by one chain each; listing a route per Add
    made the lists grow along the chain (200 ops: 10,000 entries)."""
    back = paths_back_to_sinks(chain_of_adds(200))
    assert max(len(entries) for entries in back.values()) == 2
    assert sum(len(entries) for entries in back.values()) <= 2 * 202


#: A chain of 6,000 ops through the C++ core, in a process of its own: its analysis listed
#: 9 M paths back (839 MiB peak); once per sink and chain it stays near the interpreter's
#: own size (about 60 MiB). The peak is the program's own (VmHWM): getrusage's may keep
#: that of the process it was forked from.
LONG_CHAIN = """
from popart_unwind.unwind import UnwindGraph
from popart_unwind.unwind.greedy0 import greedy_runner
graph = UnwindGraph()
current, weight = graph.sink((4, 8), "x"), graph.sink((4, 8), "w")
for i in range(6000):
    current = (graph.identity(current, f"r{i}") if i % 2 == 0 else
               graph.sum_like([current, weight], [0, 1], 1.0, name=f"a{i}").out)
solution, _, _ = greedy_runner(graph, "native")(frozenset(), frozenset())
assert solution.symbolic_score() == 96_000.0
with open("/proc/self/status") as status:
    print(next(line for line in status if line.startswith("VmHWM:")).split()[1])
"""


def test_a_long_chain_of_adds_runs_in_little_memory(tmp_path):
    done = subprocess.run([sys.executable, "-c", LONG_CHAIN], timeout=300, cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 400 * 1024, done.stdout  # KiB
