"""Independent jobs run side by side, each in a process forked from this one.

A forked child starts with this process's memory as it is (an imported model, the options),
so what the jobs share is made once, before, and never sent anywhere; only each job's
answer comes back (pickled). The objects made before the children part are frozen out of
the cyclic collector's reach while they run (``gc.freeze``): a child's collections would
otherwise walk the whole imported model at each pass and write to every page that holds
it, which the system then copies for that child (real GPT-2's memory search: 7 CPU s);
they are given back to the collector after, unless something else had frozen objects
before (``gc.unfreeze`` would give back those too). A child keeps the memory its job
frees for the job's next arrays (``planning_memory.keep_freed_memory``): it ends after
one job. Each job runs in a fresh child, so no job sees what another left behind (caches,
a mapper's state), as when they ran one after another in a fresh import each. The
warnings a job raises come back with its answer, to be raised again here in the jobs'
order. Fork is POSIX's: ``available()`` says whether this platform has it.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from popart_unwind.errors import ResourceError
from popart_unwind.report.planning_memory import keep_freed_memory

#: (category, message, file name, line) of a warning a job raised.
WarningRecord = tuple[type[Warning], str, str, int]


def available() -> bool:
    """Whether jobs can run in forked children here."""
    return "fork" in multiprocessing.get_all_start_methods()


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class JobFailed(Exception):
    """A job raised an exception that could not be sent back as it was: its traceback."""


def run_forked(jobs: Sequence[Callable[[], Any]], processes: int,
               started: Callable[[int, int], None] | None = None,
               meanwhile: Callable[[], None] | None = None
               ) -> list[tuple[Any, list[WarningRecord]]]:
    """Each job's answer and the warnings it raised, in the jobs' order, running at most
    ``processes`` children at a time. ``started(index, done)`` is told when a job starts.
    ``meanwhile`` runs here once the first children have started, beside them (its
    warnings are raised here as it raises them; an exception it raises ends the
    children; a job started after it is forked from what it left). An exception a job
    raises is raised here (after every child has ended); a child that ends without an
    answer (killed) is a ResourceError."""
    if not jobs:
        if meanwhile is not None:
            meanwhile()
        return []
    context = multiprocessing.get_context("fork")
    waiting = list(enumerate(jobs))
    running: dict[Any, tuple[int, Any]] = {}
    answers: dict[int, tuple[str, Any, list[WarningRecord]]] = {}
    for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
        with contextlib.suppress(Exception):
            stream.flush()
    freezing = gc.get_freeze_count() == 0
    if freezing:
        gc.freeze()  # what exists now, each child's collector leaves alone
    try:
        while waiting or running:
            while waiting and len(running) < max(1, processes):
                index, job = waiting.pop(0)
                receive, send = context.Pipe(duplex=False)
                child = context.Process(target=_child, args=(job, send), daemon=True)
                if started is not None:
                    started(index, len(answers))
                child.start()
                send.close()
                running[receive] = (index, child)
            if meanwhile is not None:  # the children forked before it: none sees its work
                meanwhile, work = None, meanwhile
                work()
            for receive in multiprocessing.connection.wait(list(running)):
                index, child = running.pop(receive)
                try:
                    answers[index] = receive.recv()
                except EOFError:
                    child.join()
                    raise ResourceError(
                        f"a worker process ended without an answer (exit status "
                        f"{child.exitcode}; killed, perhaps for lack of memory)") from None
                finally:
                    receive.close()
                child.join()
    finally:
        for receive, (_, child) in running.items():  # an error or a signal: end the rest
            child.terminate()
            child.join()
            receive.close()
        if freezing:
            gc.unfreeze()
    found = []
    for index in range(len(jobs)):
        kind, value, raised = answers[index]
        if kind == "error":
            raise value
        found.append((value, raised))
    return found


def raise_again(records: list[WarningRecord]) -> None:
    """Raise here the warnings a job raised in its child."""
    for category, message, filename, lineno in records:
        warnings.warn_explicit(category(message), category, filename, lineno)


def _child(job: Callable[[], Any], send: Any) -> None:
    """Run ``job`` and send back its answer, then end at once (no exit handlers: they
    belong to the parent)."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # the parent ends its children
        signal.signal(signum, signal.SIG_DFL)
    keep_freed_memory()
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)  # the parent's watchdog is not this process's
    status = 0
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = job()
        raised = [(w.category, str(w.message), w.filename, w.lineno) for w in caught]
        send.send(("done", value, raised))
    except BaseException as error:  # every failure goes back to the parent
        status = 1
        try:
            send.send(("error", error, []))
        except Exception:  # an exception that does not pickle
            send.send(("error", JobFailed("".join(traceback.format_exception(error))), []))
    finally:
        send.close()
        os._exit(status)
