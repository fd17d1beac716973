"""Progress on a terminal: one line per stage (import, transforms, plan, baseline,
evaluate, report) with a spinner or a bar and the time taken; nothing at all when the
stream is not a terminal or the user asked for quiet."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TextIO

ProgressCallback = Callable[[str, int, int], None]


class StageProgress:
    """Stage lines with rich; a no-op when ``enabled`` is false."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self._progress: Any = None
        self._task: Any = None
        self._label = ""
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(file=stream)
        if not console.is_terminal:
            return
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description:<28}"),
                                  BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=console)

    @property
    def enabled(self) -> bool:
        return self._progress is not None

    def __enter__(self) -> StageProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextlib.contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """A line for ``label``, running while the block runs, complete when it ends."""
        if self._progress is None:
            yield
            return
        self._label = label
        self._task = self._progress.add_task(label, total=None)
        try:
            yield
        finally:
            task = self._progress.tasks[-1]
            total = task.total or 1
            self._progress.update(self._task, description=label, total=total,
                                  completed=total)
            self._task = None

    def update(self, step: str, done: int, total: int) -> None:
        """Report ``done`` of ``total`` units of ``step`` within the running stage (the
        planner's progress callback)."""
        if self._progress is None or self._task is None:
            return
        from rich.markup import escape

        from popart_unwind.report.terminal_text import printable

        step = escape(printable(step))  # a step may name the model's tensors
        self._progress.update(self._task, description=f"{self._label}: {step}",
                              total=max(total, 1), completed=min(done, max(total, 1)))
