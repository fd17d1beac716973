"""ONNX's own node tests as the judge of the importer's shapes and types, and of planning.

The ``onnx`` package ships 1,884 backend node tests (small models with the outputs a
reference run gives). Each case is imported with ``Ir.from_onnx`` in three views and every
main-graph output's shape and element type compared with the reference outputs of the
case's first data set:

- ``given``: the model as generated;
- ``undeclared``: the model with the shapes of its graph outputs and value infos removed
  (element types kept), so the importer has to find them;
- ``rules``: the undeclared model imported while ``onnx.shape_inference.infer_shapes`` is
  patched (``unittest.mock.patch``) to raise, so only our own shape rules give shapes.

Outcomes: ``ok``; ``wrong`` (a shape or type differs from ONNX's, or a rule contradicts a
shape the model declares: a defect); ``unknown`` (imported, some output shape unknown);
``refused-op`` (op types the registry does not know), ``refused-type`` (an element type the
IR does not model), ``refused-other`` (another of our errors); ``internal`` (an exception
that is not a ``PopartUnwindError``: a defect); ``crash`` and ``timeout`` (each import runs
in a worker process, killed after ``--timeout`` seconds). Cases imported in the ``given``
view are then run through the transform pipeline and planned on a 16-tile IPU Model:
``planned``, or the error's class and first line.

    python benchmarks/onnx_conformance.py
    python benchmarks/onnx_conformance.py --cases 'flatten|pool' --json out.json
    python benchmarks/onnx_conformance.py --markdown

The judging code lives in ``tests/frontends/onnx_conformance_cases.py``, which the test
suite's subset (``tests/frontends/test_onnx_conformance.py``) uses too. Progress goes to
stderr; the tables, in a fixed order, to stdout.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent.parent / "tests"
if str(CASES_DIR) not in sys.path:
    sys.path.insert(0, str(CASES_DIR))

import onnx_conformance_cases as judge  # noqa: E402

PLAN = "plan"
#: Outcome columns of the op-type table: what is not ``ok``, ``unknown`` or planned.
FAILURES = (judge.REFUSED_OP, judge.REFUSED_TYPE, judge.REFUSED_OTHER, judge.WRONG,
            judge.INTERNAL, judge.CRASH, judge.TIMEOUT)


# -- running in worker processes ---------------------------------------------------------------
def _worker(connection: Connection) -> None:
    """Judge (case, view) tasks as they come; for the ``given`` view, plan what imported.
    Sends one (step, outcome, detail) message per step, then None."""
    while True:
        task = connection.recv()
        if task is None:
            return
        case, view = task
        outcome, ir = judge.import_case(case, view)
        connection.send((view, outcome.outcome, outcome.detail))
        if view == "given" and ir is not None:
            planned = judge.plan_case(ir)
            connection.send((PLAN, planned.outcome, planned.detail))
        connection.send(None)


@dataclass
class _Worker:
    """A worker process, the task it runs and since when."""

    process: multiprocessing.Process
    connection: Connection
    task: tuple[judge.ConformanceCase, str] | None = None
    started: float = 0.0
    steps_done: list[str] = field(default_factory=list)

    @classmethod
    def start(cls) -> _Worker:
        ours, theirs = multiprocessing.Pipe()
        process = multiprocessing.Process(target=_worker, args=(theirs,), daemon=True)
        process.start()
        theirs.close()
        return cls(process, ours)

    def give(self, task: tuple[judge.ConformanceCase, str]) -> None:
        self.task, self.started, self.steps_done = task, time.monotonic(), []
        self.connection.send(task)

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.connection.close()


Results = dict[str, dict[str, judge.Outcome]]


def run_cases(cases: Sequence[judge.ConformanceCase], jobs: int, timeout: float) -> Results:
    """Every case in every view, ``jobs`` worker processes at a time; a worker that dies or
    runs over ``timeout`` seconds on one task is replaced and the task's step recorded as
    ``crash`` or ``timeout``."""
    tasks = [(case, view) for case in cases for view in judge.VIEWS]
    results: Results = {case.name: {} for case in cases}
    workers = [_Worker.start() for _ in range(max(1, min(jobs, len(tasks))))]
    pending, finished = list(reversed(tasks)), 0
    try:
        while finished < len(tasks):
            for worker in workers:
                if worker.task is None and pending:
                    worker.give(pending.pop())
            busy = [w for w in workers if w.task is not None]
            ready = wait([w.connection for w in busy], timeout=1.0)
            for index, worker in enumerate(workers):
                if worker.task is None:
                    continue
                if worker.connection in ready:
                    done = _receive(worker, results)
                elif time.monotonic() - worker.started > timeout:
                    done = _fail(worker, results, judge.TIMEOUT, f"over {timeout:g} s")
                else:
                    continue
                if done:
                    finished += 1
                    _progress(finished, len(tasks))
                    if not worker.process.is_alive() or worker.task is not None:
                        workers[index] = _Worker.start()
    finally:
        for worker in workers:
            worker.stop()
    return results


def _receive(worker: _Worker, results: Results) -> bool:
    """Read the worker's next message; True once its task is done (or the worker died)."""
    case = worker.task[0]
    try:
        message = worker.connection.recv()
    except (EOFError, OSError):
        return _fail(worker, results, judge.CRASH,
                     f"worker exited with code {worker.process.exitcode}")
    if message is None:
        worker.task = None
        return True
    step, outcome, detail = message
    results[case.name][step] = judge.Outcome(outcome, detail)
    worker.steps_done.append(step)
    return False


def _fail(worker: _Worker, results: Results, outcome: str, detail: str) -> bool:
    """Record the step the worker was on as failed, and end the worker (its task stays
    set, so the caller replaces it)."""
    case, view = worker.task
    step = PLAN if view in worker.steps_done else view
    results[case.name][step] = judge.Outcome(outcome, detail)
    worker.stop()
    return True


def _progress(finished: int, total: int) -> None:
    if finished % 200 == 0 or finished == total:
        print(f"{finished}/{total} imports judged", file=sys.stderr, flush=True)


# -- tables ------------------------------------------------------------------------------------
def outcome_table(results: Results) -> tuple[list[str], list[list[str]]]:
    """Cases by import outcome, one column per view."""
    counts = {view: Counter(r[view].outcome for r in results.values() if view in r)
              for view in judge.VIEWS}
    rows = [[outcome, *(str(counts[view][outcome]) for view in judge.VIEWS)]
            for outcome in judge.IMPORT_OUTCOMES
            if any(counts[view][outcome] for view in judge.VIEWS)]
    rows.append(["total", *(str(sum(counts[view].values())) for view in judge.VIEWS)])
    return ["outcome", *judge.VIEWS], rows


def plan_table(results: Results) -> tuple[list[str], list[list[str]]]:
    """Cases imported in the ``given`` view, by planning outcome."""
    counts = Counter(r[PLAN].outcome for r in results.values() if PLAN in r)
    ordered = sorted(counts.items(), key=lambda item: (item[0] != judge.PLANNED, -item[1],
                                                       item[0]))
    rows = [[outcome, str(count)] for outcome, count in ordered]
    rows.append(["total", str(sum(counts.values()))])
    return ["planning outcome (given view)", "cases"], rows


def op_table(results: Results, op_types: dict[str, str]) -> tuple[list[str], list[list[str]]]:
    """Refusals and defects by the cases' main op type, each cell given/undeclared/rules,
    the op types with most such outcomes first."""
    counts: dict[str, Counter] = {}
    for name, steps in results.items():
        for view in judge.VIEWS:
            if view in steps and steps[view].outcome in FAILURES:
                counts.setdefault(op_types[name], Counter())[steps[view].outcome, view] += 1
    cases = Counter(op_types.values())
    columns = [o for o in FAILURES if any(c[o, v] for c in counts.values() for v in judge.VIEWS)]
    ordered = sorted(counts.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    rows = [[op, str(cases[op]),
             *("/".join(str(c[column, view]) for view in judge.VIEWS) for column in columns)]
            for op, c in ordered]
    return ["op type", "cases", *columns], rows


def defect_rows(results: Results, op_types: dict[str, str]
                ) -> tuple[list[str], list[list[str]]]:
    """Every ``wrong``, ``internal``, ``crash`` and ``timeout`` step, with its message."""
    rows = [[name, op_types[name], step, outcome.outcome, outcome.detail]
            for name, steps in results.items()
            for step, outcome in sorted(steps.items(), key=lambda s: _step_order(s[0]))
            if outcome.outcome in (*judge.DEFECTS, judge.TIMEOUT)]
    return ["case", "op type", "view", "outcome", "message"], rows


def render(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |",
                 "| " + " | ".join("---" for _ in header) + " |"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                  for row in rows]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                           strict=True))
                     .rstrip() for row in [header, *rows])


def as_json(results: Results, op_types: dict[str, str]) -> list[dict]:
    return [{"name": name, "op_type": op_types[name],
             **{step: {"outcome": o.outcome, "detail": o.detail}
                for step, o in sorted(steps.items(), key=lambda s: _step_order(s[0]))}}
            for name, steps in results.items()]


def _step_order(step: str) -> int:
    return [*judge.VIEWS, PLAN].index(step)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="regular expression the case names must match")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds one import (and its planning) may take (default 120)")
    parser.add_argument("--json", type=Path, help="write every case's outcomes here")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args(argv)

    started = time.monotonic()
    cases = judge.conformance_cases(args.cases)
    print(f"{len(cases)} cases collected", file=sys.stderr, flush=True)
    results = run_cases(cases, args.jobs, args.timeout)
    op_types = {case.name: case.op_type for case in cases}
    print(f"done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(as_json(results, op_types), indent=1) + "\n")
    tables = [outcome_table(results), plan_table(results), op_table(results, op_types),
              defect_rows(results, op_types)]
    print("\n\n".join(render(*table, markdown=args.markdown) for table in tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
