"""The exact solver: an integer program over sink-element labels, solved with HiGHS.

It is the optimality oracle of the tests and benchmarks, and the finishing step of the
default solver on small graphs (``hybrid.py``). It refuses graphs of more than
``max_sink_elements`` sink elements (1,000,000 by default, a guard on memory: a block chain
of 528,128 sink elements took a process peak of 2.5 GB, HiGHS included). How long a proof
takes depends on how the elements are tied more than on their number
(benchmarks/unwind_exact_reach.py). The problem it solves is set out in
:mod:`exact_problem`; the program is

* ``x[s, L]`` binary: sink element ``s`` takes label ``L`` (one of its candidates), with
  ``sum_L x[s, L] = 1``. Taking the own origin of another sink element ``s'`` needs ``s'``
  to keep it: ``x[s, s'] <= x[s', s']``; taking the stand-in of a sink needs one of its
  elements outside ``s``'s component to keep its own: ``x[s, S'] <= sum_o x[o, o]`` (no
  row when one of them is in no term, as such elements always keep their own).
* sink with root terms score ``v * x[s, r]``; sink with sink terms score ``v * sum_L z``
  with ``z[s1, s2, L] <= x[s1, L]`` and ``z[s1, s2, L] <= x[s2, L]`` (continuous).
* dependencies: ``y[S, X] >= x[s, L]`` (continuous) for every element ``s`` of sink ``S``
  taking a label of a tensor ``X`` that is not a free root; then ``S`` must come after
  every sink ``X`` depends on by graph edges (``sink_ancestors``):
  ``p[S] >= p[S'] + 1 - M (1 - y[S, X])`` with order values ``p`` in ``[0, M - 1]`` and
  ``M`` the number of ordered sinks. A solution is valid exactly when such an order exists.

HiGHS runs with a relative gap of 0 (and its absolute gap of 1e-6). The program starts
from Greedy0's solution, or a given ``start`` solution (moved onto the candidate labels), so
a run stopped by its time or node limit is never worse than that start. A node limit
(``max_nodes``) stops at the same point on every run; a time limit does not. The labels are
turned into sink paths (:func:`paths_for_labels`), and the result's exact score must equal
the program's objective.
"""

from __future__ import annotations

import atexit
import bisect
import math
import threading
import time
from collections import defaultdict
from collections.abc import Mapping

import highspy
import numpy as np

from popart_unwind.errors import PopartUnwindError, SolverError
from popart_unwind.memory import Chain, Region
from popart_unwind.memory.fill_sample import region_from_ons
from popart_unwind.unwind.exact_problem import (
    Candidates,
    Origins,
    Terms,
    candidate_labels,
    objective_terms,
)
from popart_unwind.unwind.graph import TensorId, UnwindGraph
from popart_unwind.unwind.greedy0 import solve_greedy0
from popart_unwind.unwind.ops import FREE_ROOT_KINDS
from popart_unwind.unwind.solution import Path, Solution, sink_ancestors

TOLERANCE = 1e-6
_STOPPED = {
    highspy.HighsModelStatus.kTimeLimit,
    highspy.HighsModelStatus.kIterationLimit,
    highspy.HighsModelStatus.kSolutionLimit,
    highspy.HighsModelStatus.kInterrupt,
    highspy.HighsModelStatus.kHighsInterrupt,
}


def solve_exact(
    graph: UnwindGraph,
    time_limit: float = 60.0,
    max_sink_elements: int = 1_000_000,
    start: Solution | None = None,
    max_nodes: int | None = None,
) -> Solution:
    """The best valid solution, proven optimal unless ``time_limit`` (seconds) or
    ``max_nodes`` (branch-and-bound nodes) stopped it.

    Graphs with more than ``max_sink_elements`` sink elements raise SolverError. When
    stopped early, the best solution found is returned with ``proven_optimal=False``; it is
    never worse than ``start`` (a solution of ``graph``), or Greedy0's when none is given.
    """
    total = sum(graph.numel(t) for t in graph.sinks())
    if total > max_sink_elements:
        raise SolverError(
            f"exact solver: the graph has {total} sink elements in {len(graph.sinks())} "
            f"sinks, more than max_sink_elements={max_sink_elements}; it is meant for small "
            "graphs (choose a heuristic: --algo hybrid, the default; from Python, "
            "solve_exact(..., max_sink_elements=...) raises the guard)"
        )
    began = time.perf_counter()
    origins = Origins(graph)
    terms = objective_terms(graph, origins)
    candidates = candidate_labels(graph, origins, terms)
    program = LabelProgram(graph, origins, terms, candidates)
    start_labels = _start_labels(graph, origins, candidates, start)
    stats = {
        "sink_elements": total,
        "active_sink_elements": len(candidates.labels),
        "label_choices": sum(len(v) for v in candidates.labels.values()),
        "start_objective": terms.value(candidates.resolve(origins, start_labels)),
    }
    remaining = time_limit - (time.perf_counter() - began)  # the limit is the whole solve's
    chosen, proven, solver_stats = program.solve(start_labels, remaining, max_nodes)
    stats.update(solver_stats)
    label = candidates.resolve(origins, chosen)
    objective = terms.value(label)
    stats["objective"] = objective
    solution = Solution(
        graph, paths_for_labels(graph, label), algo="exact", proven_optimal=proven, stats=stats
    )
    _verify(solution, objective, solver_stats.get("solver_objective"), proven)
    solution.stats["seconds"] = time.perf_counter() - began
    return solution


def _verify(solution: Solution, objective: float, solver_objective, proven: bool) -> None:
    """The layouts' exact score must be the program's objective at the chosen labels, and
    HiGHS's objective must agree with it up to its feasibility tolerance per term."""
    score = solution.score()
    if not math.isclose(score, objective, rel_tol=1e-9, abs_tol=TOLERANCE):
        raise SolverError(
            f"exact solver: the solution scores {score} but the integer "
            f"program's objective is {objective}"
        )
    slack = TOLERANCE * max(1.0, solution.upper_bound())
    if proven and solver_objective is not None and abs(solver_objective - objective) > slack:
        raise SolverError(
            f"exact solver: HiGHS reports the objective {solver_objective} but "
            f"its labels score {objective}"
        )


class _Program:
    """Columns (lower bound 0) and rows of a mixed-integer program, for HiGHS."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.integer: list[bool] = []
        self.starts = [0]
        self.index: list[int] = []
        self.coef: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def column(self, cost: float, upper: float, integer: bool) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        self.integer.append(integer)
        return len(self.cost) - 1

    def row(self, entries: list[tuple[int, float]], lower: float, upper: float) -> None:
        for col, coef in entries:
            self.index.append(col)
            self.coef.append(coef)
        self.starts.append(len(self.index))
        self.row_lower.append(lower)
        self.row_upper.append(upper)

    def highs(self, offset: float) -> highspy.Highs:
        """A silent HiGHS instance holding this program, maximising, gap 0."""
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(self.cost), len(self.row_lower)
        lp.col_cost_ = np.asarray(self.cost, dtype=np.float64)
        lp.col_lower_ = np.zeros(len(self.cost))
        lp.col_upper_ = np.asarray(self.upper, dtype=np.float64)
        lp.row_lower_ = np.asarray(self.row_lower, dtype=np.float64)
        lp.row_upper_ = np.asarray(self.row_upper, dtype=np.float64)
        matrix = lp.a_matrix_
        matrix.format_ = highspy.MatrixFormat.kRowwise
        matrix.num_col_, matrix.num_row_ = lp.num_col_, lp.num_row_
        matrix.start_ = np.asarray(self.starts, dtype=np.int32)
        matrix.index_ = np.asarray(self.index, dtype=np.int32)
        matrix.value_ = np.asarray(self.coef, dtype=np.float64)
        lp.a_matrix_ = matrix
        kinds = highspy.HighsVarType
        lp.integrality_ = [kinds.kInteger if i else kinds.kContinuous for i in self.integer]
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.offset_ = offset
        solver = highspy.Highs()
        solver.silent()
        _check(solver.passModel(lp), "loading the program")
        solver.setOptionValue("mip_rel_gap", 0.0)
        return solver


#: How long a solve still running at its time limit is waited for once interrupted, before
#: it is left behind. HiGHS checks its limit and the interrupt between steps only; a step
#: of an LP at the root can take long (interrupted at the root, a 400-column knapsack took
#: 0.8 s to stop), so the solve is asked to stop at its limit and waited for at most this.
STOP_SECONDS = 0.9
#: The status of a solve left behind: the start solution stands, and HiGHS's thread (which
#: holds no Python state) runs on until its next check of the interrupt.
ABANDONED = "Interrupted: did not stop in time"
#: Solves left behind, still stopping. The process waits for them when it exits: a HiGHS
#: thread still running when the interpreter ends aborts the process (std::terminate).
_LEFT_BEHIND: list[highspy.Highs] = []


def run_bounded(solver: highspy.Highs, time_limit: float) -> highspy.HighsStatus | None:
    """``solver.run()`` in HiGHS's own thread, the calling thread waiting in short steps: a
    signal (SIGTERM, SIGINT) is handled at once rather than when the solve ends, and a solve
    still running at ``time_limit`` is interrupted (HiGHS's interrupt callback). Returns
    HiGHS's status, or None when the solve did not stop within ``STOP_SECONDS`` of being
    interrupted (it is then left behind, unread): the call returns within ``time_limit``
    plus ``STOP_SECONDS``. An exception (a signal's) interrupts the solve, waits as long for
    it to stop, and goes on."""
    _own_locks(solver)
    solver.HandleUserInterrupt = True  # HiGHS asks, at each interrupt check, whether to stop
    solver.startSolve()
    deadline = time.monotonic() + max(0.0, time_limit)
    try:
        while True:
            done, status = solver.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            if done:
                return status
            if time.monotonic() >= deadline:
                return _stop(solver)
    except BaseException:
        _stop(solver)
        raise


def _own_locks(solver: highspy.Highs) -> None:
    """Give ``solver`` locks of its own. highspy 1.15's ``Highs`` keeps the locks that say a
    solve is running on the class, shared by every instance: while one solve runs (one left
    behind above, still stopping), starting any other fails with "Solver is already
    running". Its methods read them through the instance, so instance locks separate the
    solves."""
    solver._Highs__solver_stopped = threading.RLock()
    solver._Highs__solver_started = threading.Lock()


def _stop(solver: highspy.Highs) -> highspy.HighsStatus | None:
    """Interrupt a running solve; its status once stopped, or None (left behind) when it
    has not stopped within ``STOP_SECONDS``."""
    solver.cancelSolve()
    done, status = solver.wait(STOP_SECONDS)
    if done:
        return status
    if not _LEFT_BEHIND:
        atexit.register(_wait_for_left_behind)
    _LEFT_BEHIND.append(solver)
    return None


def _wait_for_left_behind() -> None:
    for solver in _LEFT_BEHIND:
        solver.wait()
    _LEFT_BEHIND.clear()


def _check(status, what: str) -> None:
    if status == highspy.HighsStatus.kError:
        raise SolverError(f"exact solver: HiGHS failed {what}")


class LabelProgram:
    """The integer program of the module docstring for one graph."""

    def __init__(
        self, graph: UnwindGraph, origins: Origins, terms: Terms, candidates: Candidates
    ) -> None:
        self.origins = origins
        self.terms = terms
        self.candidates = candidates
        self.labels = candidates.labels
        self.program = _Program()
        self.x: dict[tuple[int, int], int] = {}
        self.z: dict[tuple[int, int, int], int] = {}
        self.y: dict[tuple[TensorId, TensorId], int] = {}
        self.p: dict[TensorId, int] = {}
        self.after: dict[tuple[TensorId, TensorId], list[TensorId]] = {}
        self._choices()
        self._agreements()
        self._order(graph)

    def _choices(self) -> None:
        """x, one label per element, and own labels only while their owner keeps them."""
        program = self.program
        for s, offered in self.labels.items():
            for label in offered:
                value = self.terms.with_root.get((s, label), 0.0)
                self.x[(s, label)] = program.column(value, 1.0, True)
            program.row([(self.x[(s, label)], 1.0) for label in offered], 1.0, 1.0)
        for (s, label), col in self.x.items():
            if label != s and (label, label) in self.x:
                program.row([(col, 1.0), (self.x[(label, label)], -1.0)], -math.inf, 0.0)
            elif label < 0:
                keepers = self._keepers(s, label)
                if keepers is not None:
                    program.row([(col, 1.0), *((k, -1.0) for k in keepers)], -math.inf, 0.0)

    def _keepers(self, s: int, label: int) -> list[int] | None:
        """The x columns of the elements stand-in ``label`` may become for ``s`` keeping
        their own origins; None when one of them is inactive (it always keeps its own)."""
        outside = self.candidates.outside(
            self.origins, self.candidates.component[s], self.origins.owner(label)
        )
        if any(o not in self.labels for o in outside):
            return None
        return [self.x[(o, o)] for o in outside]

    def _agreements(self) -> None:
        """z for each label two tied sink elements could share."""
        program = self.program
        for (s1, s2), value in self.terms.between_sinks.items():
            shared = sorted(set(self.labels[s1]) & set(self.labels[s2]))
            for label in shared:
                col = program.column(value, 1.0, False)
                self.z[(s1, s2, label)] = col
                for s in (s1, s2):
                    program.row([(col, 1.0), (self.x[(s, label)], -1.0)], -math.inf, 0.0)

    def _order(self, graph: UnwindGraph) -> None:
        """y for each (sink, label tensor) used whose tensor depends on sinks, and order
        values that forbid cycles."""
        origins, program = self.origins, self.program
        ancestors = sink_ancestors(graph)
        for (s, label), col in self.x.items():
            sink, owner = origins.owner(s), origins.owner(label)
            if owner == sink or not ancestors[owner]:
                continue
            key = (sink, owner)
            if key not in self.y:
                self.y[key] = program.column(0.0, 1.0, False)
                self.after[key] = sorted(ancestors[owner])
            program.row([(col, 1.0), (self.y[key], -1.0)], -math.inf, 0.0)
        ordered = sorted({t for key, after in self.after.items() for t in (key[0], *after)})
        big = float(len(ordered))
        for sink in ordered:
            self.p[sink] = program.column(0.0, big - 1.0, False)
        for key in sorted(self.y):
            for before in self.after[key]:
                program.row(
                    [(self.p[key[0]], 1.0), (self.p[before], -1.0), (self.y[key], -big)],
                    1.0 - big,
                    math.inf,
                )

    def solve(
        self, start: dict[int, int], time_limit: float, max_nodes: int | None = None
    ) -> tuple[dict[int, int], bool, dict]:
        """The labels HiGHS finds from ``start`` (every element's own if ``start`` does not
        fit), whether they are proven optimal, and statistics."""
        if not self.x:
            return {}, True, {"status": "no labels to choose"}
        values = self.start_values(start)
        if values is None:
            start = {s: s for s in self.labels}
            values = self.start_values(start)
        solver = self.program.highs(self.terms.constant)
        solver.setOptionValue("time_limit", max(0.0, float(time_limit)))
        if max_nodes is not None:
            solver.setOptionValue("mip_max_nodes", max(0, int(max_nodes)))
        solution = highspy.HighsSolution()
        solution.col_value = values
        solution.value_valid = True
        _check(solver.setSolution(solution), "taking the start solution")
        finished = run_bounded(solver, time_limit)
        if finished is None:  # HiGHS did not stop when asked: its result is not read
            return dict(start), False, {"status": ABANDONED, "columns": len(self.program.cost),
                                        "rows": len(self.program.row_lower), "nodes": 0}
        _check(finished, "solving")
        status = solver.getModelStatus()
        info = solver.getInfo()
        stats = {
            "status": solver.modelStatusToString(status),
            "columns": len(self.program.cost),
            "rows": len(self.program.row_lower),
            "nodes": int(info.mip_node_count),
            "bound": float(info.mip_dual_bound),
        }
        if status != highspy.HighsModelStatus.kOptimal and status not in _STOPPED:
            raise SolverError(f"exact solver: HiGHS stopped with status {stats['status']}")
        if info.primal_solution_status != highspy.kSolutionStatusFeasible:
            return dict(start), False, stats
        stats["solver_objective"] = float(info.objective_function_value)
        return (
            self.labels_from(solver.getSolution().col_value),
            (status == highspy.HighsModelStatus.kOptimal),
            stats,
        )

    def labels_from(self, col_value) -> dict[int, int]:
        """Each element's label: the candidate whose x is largest (1 up to tolerance)."""
        return {
            s: max(offered, key=lambda label: (col_value[self.x[(s, label)]], -label))
            for s, offered in self.labels.items()
        }

    def start_values(self, label: dict[int, int]) -> list[float] | None:
        """Column values for ``label``, or None when it breaks a row: a label that is not
        a candidate, another's own origin not kept, or dependencies in a cycle."""
        if not self._keeps_rows(label):
            return None
        values = [0.0] * len(self.program.cost)
        for s, chosen in label.items():
            values[self.x[(s, chosen)]] = 1.0
        for (s1, s2, shared), col in self.z.items():
            values[col] = float(label[s1] == shared == label[s2])
        used = {(self.origins.owner(s), self.origins.owner(chosen)) for s, chosen in label.items()}
        edges: dict[TensorId, set[TensorId]] = defaultdict(set)
        for key, col in self.y.items():
            if key in used:
                values[col] = 1.0
                edges[key[0]].update(self.after[key])
        ranks = _ranks(edges)
        if ranks is None:
            return None
        for sink, col in self.p.items():
            values[col] = float(ranks.get(sink, 0))
        return values

    def _keeps_rows(self, label: dict[int, int]) -> bool:
        """Whether ``label`` picks candidates and keeps the own origins it reads."""
        for s, chosen in label.items():
            if (s, chosen) not in self.x:
                return False
            if chosen < 0:
                outside = self.candidates.outside(
                    self.origins, self.candidates.component[s], self.origins.owner(chosen)
                )
                if not any(label.get(o, o) == o for o in outside):
                    return False
            elif chosen != s and label.get(chosen, chosen) != chosen:
                return False
        return True


def _ranks(edges: dict[TensorId, set[TensorId]]) -> dict[TensorId, int] | None:
    """For sinks that must come after others (``edges``), an order value: 0 after nothing,
    else one more than the largest of what they come after. None on a cycle."""
    nodes = sorted({t for sink, after in edges.items() for t in (sink, *after)})
    waiting = {t: len(edges.get(t, ())) for t in nodes}
    users: dict[TensorId, list[TensorId]] = defaultdict(list)
    for sink, after in edges.items():
        for before in after:
            users[before].append(sink)
    ranks: dict[TensorId, int] = {}
    ready = [t for t in nodes if waiting[t] == 0]
    while ready:
        tensor = ready.pop()
        ranks[tensor] = 1 + max((ranks[t] for t in edges.get(tensor, ())), default=-1)
        for user in users[tensor]:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return ranks if len(ranks) == len(nodes) else None


def _start_labels(
    graph: UnwindGraph, origins: Origins, candidates: Candidates, start: Solution | None
) -> dict[int, int]:
    """``start``'s labels (Greedy0's when None) moved onto the candidates (no loss), or
    every element's own when Greedy0 fails."""
    if start is not None and start.graph is not graph:
        raise SolverError("exact solver: the start solution belongs to another graph")
    try:
        layouts = (start if start is not None else solve_greedy0(graph)).layouts()
    except PopartUnwindError:
        return {s: s for s in candidates.labels}
    found = {s: int(layouts[origins.owner(s)].ravel()[origins.flat(s)]) for s in candidates.labels}
    return _onto_candidates(graph, origins, candidates, found)


def _onto_candidates(
    graph: UnwindGraph, origins: Origins, candidates: Candidates, found: dict[int, int]
) -> dict[int, int]:
    """Move each group of a component sharing a label that some member is not offered to
    an offered label of the same standing (see ``candidate_labels``): a free root when the
    graph has one, else a label of the same tensor (a sink's stand-in). A lone member
    scores nothing with such a label, so it takes its own origin instead."""
    labels = candidates.labels
    has_free = any(
        graph.kind(t) in FREE_ROOT_KINDS and origins.numel[t] > 0 for t in origins.tensors
    )
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for s in sorted(found):
        groups[(candidates.component[s], found[s])].append(s)
    moved = dict(found)
    for (_, label), members in groups.items():
        if all(label in labels[s] for s in members):
            continue
        common = set.intersection(*(set(labels[s]) for s in members))
        owner = origins.owner(label)
        fits = [
            c
            for c in sorted(common)
            if len(members) > 1
            and (
                graph.kind(origins.owner(c)) in FREE_ROOT_KINDS
                if has_free
                else origins.owner(c) == owner and (c < 0 or graph.kind(owner) != "sink")
            )
        ]
        for s in members:
            moved[s] = fits[0] if fits else s
    return moved


def paths_for_labels(graph: UnwindGraph, label: Mapping[int, int]) -> list[Path]:
    """Sink paths giving sink origin ``s`` the origin ``label[s]`` (others keep their own).

    A label that is another sink element's own origin is read from that sink, so it is
    that element's label only while it keeps its own. For each (sink, label tensor), the
    elements are split into runs whose label indices rise with the sink indices; each run
    is one path ``flatten -> SettSample -> SettFillInto -> reshape``.
    """
    origins = Origins(graph)
    moves: dict[tuple[TensorId, TensorId], list[tuple[int, int]]] = defaultdict(list)
    for s, chosen in sorted(label.items()):
        if s == chosen:
            continue
        if not (0 <= s < origins.size and origins.is_sink[s] and 0 <= chosen < origins.size):
            raise SolverError(
                f"label {s} -> {chosen}: labels map a sink element's origin to "
                f"an origin, and origins run from 0 to {origins.size - 1}"
            )
        key = (origins.owner(s), origins.owner(chosen))
        moves[key].append((origins.flat(s), origins.flat(chosen)))
    paths = []
    for (sink, src), pairs in sorted(moves.items()):
        for run in _rising_runs(sorted(pairs)):
            paths.append(_path(graph, src, sink, run))
    return paths


def _rising_runs(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Split (sink index, label index) pairs, sorted by sink index, into few runs with
    strictly rising label indices: each pair joins the run with the highest last label
    index below its own (runs' last indices stay sorted)."""
    runs: list[list[tuple[int, int]]] = []
    tops: list[int] = []  # last label index of each run, ascending
    order: list[int] = []  # the run behind each entry of tops
    for pair in pairs:
        at = bisect.bisect_left(tops, pair[1]) - 1
        if at >= 0:
            tops[at] = pair[1]
            runs[order[at]].append(pair)
        else:
            tops.insert(0, pair[1])
            order.insert(0, len(runs))
            runs.append([pair])
    return runs


def _path(graph: UnwindGraph, src: TensorId, sink: TensorId, run: list[tuple[int, int]]) -> Path:
    src_count, sink_count = graph.numel(src), graph.numel(sink)
    taken = np.asarray([j for _, j in run], dtype=np.int64)
    placed = np.asarray([i for i, _ in run], dtype=np.int64)
    chain = (
        Chain(graph.shape(src))
        .flatten()
        .sett_sample(region_from_ons((src_count,), [taken]))
        .sett_fill_into(region_from_ons((sink_count,), [placed]))
        .reshape(graph.shape(sink))
        .canonicalized()
    )
    return Path(src, sink, chain, chain.apply_regions(Region.full(graph.shape(src))))
