"""SIGTERM and SIGINT as an exception, so that an interrupted run removes its temporaries.

Python's default SIGTERM ends the process at once, leaving any temporary output behind;
inside :func:`signals_raise` either signal raises :class:`Terminated` in the main thread,
the ``with`` blocks unwind (removing the temporaries), and the handlers that were there
before are restored on the way out. A second signal while that happens is ignored. The
signal is seen between Python bytecodes, so a long call into the compiled solver finishes
its current step first.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Terminated(BaseException):
    """The process received SIGTERM or SIGINT (a BaseException, like KeyboardInterrupt,
    so that ``except Exception`` blocks do not swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise :class:`Terminated` (main thread only;
    elsewhere the handlers cannot be changed and the block runs unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return  # already unwinding: let the cleanup finish
        fired.append(signum)
        raise Terminated(signum)

    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    for signum in HANDLED:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
