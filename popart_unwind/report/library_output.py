"""What the libraries a model is loaded with say while they load it, held back from the
command's own lines.

A ``module:factory`` runs the user's code and the libraries it drives (transformers,
torch's exporter, onnx): they print, log and warn. Left alone, those lines land among the
progress display and the summary. While the model loads, ``captured`` takes them all:
``print`` and C-level writes to file descriptors 1 and 2 (the descriptors pointed at
temporary files), records of any logger (a handler on the root logger; a library logger
that does not propagate, as transformers' does not, writes through its own handler to
stderr, which the descriptor catches) and warnings. The command then says them in one line,
or each with ``--verbose``, or not at all with ``--quiet`` (docs/cli.md, *Warnings*).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from popart_unwind.errors import (
    IgnoredAttributeWarning,
    OutputWarning,
    TransformWarning,
    UnknownOpsWarning,
)

#: The tool's own warnings, which the command says itself (cli.py), not the model's code.
TOOL_WARNINGS = (UnknownOpsWarning, IgnoredAttributeWarning, TransformWarning, OutputWarning)

#: Warnings about a library's own future, not about the user's model or command.
LIBRARY_NOTICES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


@dataclasses.dataclass
class LibraryOutput:
    """What was said while the model loaded, in the order each kind was said."""

    #: (stream, line) of what was printed: "stdout" or "stderr"
    printed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    #: (logger's top-level name, level, message)
    logged: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    #: (category, module, message, whether it is a library's notice of its own future)
    warned: list[tuple[str, str, str, bool]] = dataclasses.field(default_factory=list)

    def summary(self) -> str | None:
        """One line on what was said, notices of deprecation left out; None for nothing."""
        warned = [w for w in self.warned if not w[3]]
        parts = []
        if warned:
            sources = _counted(f"{category} from {module}" for category, module, _, _ in warned)
            parts.append(f"raised {_plural(len(warned), 'warning')} ({sources})")
        if self.printed:
            parts.append(f"printed {_plural(len(self.printed), 'line')} "
                         f"({_counted(stream for stream, _ in self.printed)})")
        if self.logged:
            parts.append(f"logged {_plural(len(self.logged), 'record')} "
                         f"({_counted(name for name, _, _ in self.logged)})")
        if not parts:
            return None
        said = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return f"while the model loaded, its code and libraries {said}; --verbose shows them"

    def lines(self) -> list[str]:
        """Everything said, one line each (``--verbose``)."""
        found = [f"[{stream}] {line}" for stream, line in self.printed]
        found += [f"[{name} {level}] {message}" for name, level, message in self.logged]
        found += [f"[{category} from {module}] {message}"
                  for category, module, message, _ in self.warned]
        return found


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _counted(names: Iterator[str] | list[str]) -> str:
    """``stderr ×3, stdout`` in the order first said."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if count == 1 else f"{name} ×{count}"
                     for name, count in counts.items())


class _Recorder(logging.Handler):
    def __init__(self, output: LibraryOutput) -> None:
        super().__init__(logging.NOTSET)
        self.output = output

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a record that cannot format is dropped
            message = record.getMessage()
            for line in message.splitlines() or [""]:
                self.output.logged.append((record.name.split(".")[0], record.levelname,
                                           line))


def _flush_c_streams() -> None:
    """C's buffered ``printf`` output is written before the descriptors go back."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def captured() -> Iterator[LibraryOutput]:
    """Hold back what is printed, logged and warned inside the block (module docstring);
    the descriptors, ``sys.stdout``/``sys.stderr``, the root logger and the warning filters
    are restored however the block ends."""
    output = LibraryOutput()
    recorder = _Recorder(output)
    root = logging.getLogger()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        files = {1: out_file, 2: err_file}
        saved: dict[int, int] = {}
        python_out, python_err = io.StringIO(), io.StringIO()
        caught: list[warnings.WarningMessage] = []
        try:
            for fd, file in files.items():
                with contextlib.suppress(OSError):  # a descriptor that is closed stays so
                    saved[fd] = os.dup(fd)
                    os.dup2(file.fileno(), fd)
            root.addHandler(recorder)
            with warnings.catch_warnings(record=True) as recorded, \
                    contextlib.redirect_stdout(python_out), contextlib.redirect_stderr(python_err):
                warnings.simplefilter("always")
                try:
                    yield output
                finally:
                    caught = list(recorded)
        finally:
            root.removeHandler(recorder)
            _flush_c_streams()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            printed = {"stdout": python_out.getvalue(), "stderr": python_err.getvalue()}
            for fd, stream in ((1, "stdout"), (2, "stderr")):
                files[fd].seek(0)
                printed[stream] += files[fd].read().decode("utf-8", "replace")
            for stream, text in printed.items():
                output.printed += [(stream, line) for line in text.splitlines() if line.strip()]
            for warning in caught:
                if warning.category in TOOL_WARNINGS:  # the tool's own: said as ever
                    warnings.warn_explicit(warning.message, warning.category,
                                           warning.filename, warning.lineno or 0)
                    continue
                text = " ".join(str(warning.message).split())
                output.warned.append((warning.category.__name__, Path(warning.filename).stem,
                                      text, issubclass(warning.category, LIBRARY_NOTICES)))
