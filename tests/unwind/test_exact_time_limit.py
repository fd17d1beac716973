"""The exact solver's time limit holds: HiGHS runs in its own thread, is interrupted at the
limit and returns within STOP_SECONDS of it; a signal reaches the caller during a solve."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import highspy
from hard_program import hard_program

from popart_unwind.unwind.exact import STOP_SECONDS, _own_locks, run_bounded


def test_the_limit_holds_even_when_highs_would_run_on():
    """HiGHS's own limit is set far away: the interrupt alone must end the solve."""
    solver = hard_program(highs_limit=1000.0)
    began = time.monotonic()
    status = run_bounded(solver, 1.0)
    elapsed = time.monotonic() - began
    assert elapsed < 1.0 + STOP_SECONDS + 0.3, elapsed
    if status is not None:  # stopped in time: HiGHS says it was interrupted
        assert solver.getModelStatus() in (highspy.HighsModelStatus.kInterrupt,
                                           highspy.HighsModelStatus.kHighsInterrupt)


def test_a_solve_within_its_limit_is_highs_own():
    solver = hard_program(highs_limit=0.5)
    began = time.monotonic()
    status = run_bounded(solver, 5.0)
    assert time.monotonic() - began < 1.5
    assert status is not None
    assert solver.getModelStatus() == highspy.HighsModelStatus.kTimeLimit


SIGNALLED = textwrap.dedent(f"""
    import signal, sys
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    from hard_program import hard_program
    from popart_unwind.unwind.exact import run_bounded

    class Stop(BaseException):
        pass

    def handler(signum, frame):
        raise Stop()

    signal.signal(signal.SIGTERM, handler)
    solver = hard_program(highs_limit=1000.0)
    print("solving", flush=True)
    try:
        run_bounded(solver, 60.0)
    except Stop:
        print("stopped", flush=True)
        sys.exit(7)
""")


def test_a_signal_is_handled_during_a_solve():
    process = subprocess.Popen([sys.executable, "-c", SIGNALLED], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    assert process.stdout.readline() == "solving\n"
    time.sleep(1.0)  # well into the root LP
    sent = time.monotonic()
    process.terminate()
    out, _ = process.communicate(timeout=30)
    assert time.monotonic() - sent < 2.0
    assert (process.returncode, out) == (7, "stopped\n")


def test_a_solve_starts_while_another_is_still_running():
    """A solve left behind at its limit may run on for a while; another must still start
    (highspy keeps its running-solve locks on the class unless each solver has its own)."""
    first = hard_program(highs_limit=1000.0)
    first.HandleUserInterrupt = True
    _own_locks(first)
    first.startSolve()
    try:
        second = hard_program(highs_limit=0.2)
        began = time.monotonic()
        status = run_bounded(second, 5.0)
        assert status is not None and time.monotonic() - began < 3.0
        assert second.getModelStatus() == highspy.HighsModelStatus.kTimeLimit
    finally:
        first.cancelSolve()
        first.wait()
