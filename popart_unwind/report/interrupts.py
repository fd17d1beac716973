"""SIGTERM and SIGINT as an exception, so that an interrupted run removes its temporaries.

Python's default SIGTERM ends the process at once, leaving any temporary output behind;
inside :func:`signals_raise` either signal raises :class:`Terminated` in the main thread,
the ``with`` blocks unwind (removing the temporaries), and the handlers that were there
before are restored on the way out. A second signal while that happens is ignored.

Python runs a signal's handler between bytecodes of the main thread, so a long call into
compiled code (a solver, a C++ hook) would hold it back until the call returns. A watchdog
thread therefore hears each signal too (``signal.set_wakeup_fd``); when the main thread has
not begun to handle it within ``GRACE_SECONDS``, the watchdog calls ``on_stuck`` (the
command removes its temporaries, says so and ends the process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

HANDLED = (signal.SIGTERM, signal.SIGINT)
#: How long the main thread has to begin handling a signal before the watchdog acts: a run
#: ends within this plus the removal of its temporaries (docs/cli.md promises 2 s).
GRACE_SECONDS = 1.5


class Terminated(BaseException):
    """The process received SIGTERM or SIGINT (a BaseException, like KeyboardInterrupt,
    so that ``except Exception`` blocks do not swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raise(on_stuck: Callable[[int], None] | None = None) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise :class:`Terminated` (main thread only;
    elsewhere the handlers cannot be changed and the block runs unchanged). ``on_stuck``
    (called with the signal's number, from another thread) is what to do when the main
    thread does not get to the handler within ``GRACE_SECONDS``; it should end the
    process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []
    handled = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        handled.set()
        if fired:
            return  # already unwinding: let the cleanup finish
        fired.append(signum)
        raise Terminated(signum)

    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    for signum in HANDLED:
        signal.signal(signum, handler)
    watchdog = _Watchdog(handled, on_stuck) if on_stuck is not None else None
    try:
        yield
    finally:
        if watchdog is not None:
            watchdog.close()
        for signum, old in previous.items():
            signal.signal(signum, old)


class _Watchdog:
    """A thread reading the signal numbers Python's C-level handler writes to a pipe."""

    def __init__(self, handled: threading.Event, on_stuck: Callable[[int], None]) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._handled = handled
        self._on_stuck = on_stuck
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="signal watchdog",
                                        daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self._read, 1)
            except OSError:
                return
            if not data or data == b"\0":  # closed: the run is over
                return
            if data[0] in HANDLED and not self._handled.wait(GRACE_SECONDS):
                self._on_stuck(data[0])

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        with contextlib.suppress(OSError):
            os.write(self._write, b"\0")
        self._thread.join(timeout=GRACE_SECONDS + 1)
        for end in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(end)
