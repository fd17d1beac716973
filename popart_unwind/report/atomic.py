"""Outputs that are all written or none: never a partial plan, model or report.

:class:`OutputTransaction` reserves, before any work, a temporary file beside every output
file and a temporary folder beside the report folder (which proves each folder writable and
names the output when it is not). The run writes into those; :meth:`commit` then moves them
into place (``os.replace``, atomic within one file system), keeping the files it replaces
until every move succeeded so that a failure part-way puts them back. Leaving the block
without a commit, by an error or a signal, removes every temporary.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from popart_unwind.errors import OutputError, OutputWarning
from popart_unwind.frontends.input_file import path_kind
from popart_unwind.report.output_targets import (
    REPORT_MARKER,
    FileTarget,
    FolderTarget,
    file_changed,
    marker_text,
    read_marker,
    unlisted_entries,
)

__all__ = ["OutputError", "OutputTransaction"]


class OutputTransaction:
    """The temporaries of a run's outputs, and their move into place (see the module)."""

    def __init__(self, files: Sequence[FileTarget], report: FolderTarget | None) -> None:
        self.files = list(files)
        self.report = report
        self._temps: dict[Path, Path] = {}  # target path -> its temporary file
        self._staging: Path | None = None
        self._committed = False
        self._committing = False

    # -- reserving and writing ----------------------------------------------------------------
    def __enter__(self) -> OutputTransaction:
        try:
            if self.report is not None:
                self._staging = _reserve(self.report.option, self.report.given,
                                         self.report.path, folder=True)
            for target in self.files:
                if not target.in_report:
                    self._temps[target.path] = _reserve(target.option, target.given,
                                                        target.path, folder=False)
        except BaseException:
            self._discard()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if not self._committed:
            self._discard()

    @property
    def report_folder(self) -> Path:
        """The temporary folder the report is built in."""
        if self._staging is None:
            raise OutputError("this run writes no report folder")
        return self._staging

    def put(self, target: FileTarget, data: bytes) -> None:
        """Write ``target``'s content into its temporary (or into the staged report)."""
        self.put_written(target, lambda stream: stream.write(data))

    def put_written(self, target: FileTarget, write: Callable[[BinaryIO], object]) -> None:
        """``put`` of the content ``write`` writes to the stream it is given, piece by
        piece (a plan file need not be held whole)."""
        if target.in_report:
            temp = self.report_folder / target.path.name
        else:
            temp = self._temps[target.path]
        try:
            with open(temp, "wb") as stream:
                write(stream)
        except OSError as error:
            raise OutputError(f"cannot write {target.option} {target.given}: "
                              f"{error.strerror or error}") from None

    # -- moving into place ----------------------------------------------------------------------
    def commit(self) -> None:
        """Move every output into place, or (on any failure) none: replaced files are
        restored and the new ones removed."""
        self._committing = True
        try:
            self._commit()
        finally:
            self._committing = False

    def abandon(self) -> bool:
        """Remove every temporary now, from another thread, for a process about to end;
        False (nothing done) while the outputs are being moved into place."""
        if self._committing or self._committed:
            return False
        self._discard()
        return True

    def _commit(self) -> None:
        if self._staging is not None and self.report is not None:
            try:
                names = os.listdir(self._staging)
                (self._staging / REPORT_MARKER).write_text(marker_text(names),
                                                           encoding="utf-8")
                os.chmod(self._staging, 0o755)
            except OSError as error:
                raise OutputError(f"cannot write {self.report.option} {self.report.given}: "
                                  f"{error.strerror or error}") from None
        moved: list[tuple[FileTarget, Path | None]] = []  # target, backup of what it replaced
        try:
            for target in self.files:
                if target.in_report:
                    continue
                changed = file_changed(target)  # checked again at the moment it is replaced
                if changed is not None:
                    raise OutputError(f"{target.option} {target.given} became {changed} while "
                                      f"the plan ran; nothing was replaced")
                try:
                    backup = _keep_old(target.path)
                except OSError as error:
                    raise OutputError(f"cannot replace {target.option} {target.given}: "
                                      f"{error.strerror or error}") from None
                moved.append((target, backup))
                temp = self._temps[target.path]
                os.chmod(temp, 0o644)
                _move(target.option, target.given, temp, target.path)
                del self._temps[target.path]
            if self.report is not None and self._staging is not None:
                _swap_folder(self.report, self._staging)
                self._staging = None
        except BaseException:
            for target, backup in reversed(moved):
                with contextlib.suppress(OSError):
                    if backup is not None:
                        os.replace(backup, target.path)
                    else:
                        target.path.unlink(missing_ok=True)
            raise
        finally:
            for _, backup in moved:
                if backup is not None:
                    with contextlib.suppress(OSError):
                        backup.unlink(missing_ok=True)
        self._committed = True

    def _discard(self) -> None:
        for temp in self._temps.values():
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
        self._temps.clear()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None


def _reserve(option: str, given: Path, path: Path, folder: bool) -> Path:
    """A new temporary file (or folder) beside ``path``; refuses a folder we cannot write."""
    parent = path.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {given}: folder {given.parent} is not writable")
    prefix, suffix = _hidden(path), ".tmp"
    try:
        if folder:
            return Path(tempfile.mkdtemp(dir=parent, prefix=prefix, suffix=suffix))
        handle, name = tempfile.mkstemp(dir=parent, prefix=prefix, suffix=suffix)
        os.close(handle)
        return Path(name)
    except OSError as error:
        raise OutputError(f"{option} {given}: cannot write in folder {given.parent}: "
                          f"{error.strerror or error}") from None


#: The longest part of a target's name a temporary beside it repeats: the system's limit of
#: 255 bytes per name leaves room for the dot, the random part and the suffix.
NAME_KEPT = 200


def _hidden(path: Path) -> str:
    """The start of a hidden temporary's name beside ``path`` (at most NAME_KEPT bytes of
    the name, cut on a character's boundary)."""
    name = os.fsencode(path.name)
    if len(name) <= NAME_KEPT:
        return f".{path.name}."
    return f".{name[:NAME_KEPT].decode('utf-8', errors='ignore')}."


def _keep_old(path: Path) -> Path | None:
    """A second name (hard link) for the file at ``path``, so that it can be put back; None
    if nothing is there. Where hard links are not available the file is copied."""
    if not os.path.lexists(path):
        return None
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=_hidden(path), suffix=".old")
    os.close(handle)
    backup = Path(name)
    try:
        backup.unlink()
        os.link(path, backup)
    except OSError:
        shutil.copy2(path, backup)
    return backup


def _move(option: str, given: Path, temp: Path, path: Path) -> None:
    try:
        os.replace(temp, path)
    except OSError as error:
        raise OutputError(f"cannot write {option} {given}: {error.strerror or error}") from None


def _swap_folder(report: FolderTarget, staging: Path) -> None:
    """Put the staged report at ``report.path``, checking the folder again at this moment:
    a file the tool did not write is never removed, whenever it got there.

    Over nothing or an empty folder, one rename, which the system refuses when a folder
    there now holds anything (or a file is there). Over an earlier report, the old folder
    is first renamed aside, where a user saving into the report's path can no longer reach
    it, and checked again against its marker; a foreign entry puts it back and fails the
    run. Afterwards only the files its marker lists are removed from it."""
    if report.state != "report":
        try:
            os.replace(staging, report.path)
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise OutputError(_changed(report, _describe(report.path))) from None
            raise OutputError(f"cannot write {report.option} {report.given}: "
                              f"{error.strerror or error}") from None
        return
    retired = Path(tempfile.mkdtemp(dir=report.path.parent, prefix=_hidden(report.path),
                                    suffix=".old"))
    old = retired / "report"
    try:
        os.replace(report.path, old)
    except OSError as error:
        os.rmdir(retired)
        raise OutputError(_changed(report, error.strerror or str(error))) from None
    try:
        foreign = unlisted_entries(old)
        if foreign is None or foreign:
            raise OutputError(_changed(report, f"it now holds {foreign[0]!r}, which "
                                       f"popart-unwind did not write" if foreign
                                       else f"its {REPORT_MARKER} file is gone"))
        _move(report.option, report.given, staging, report.path)
    except BaseException:
        try:
            os.replace(old, report.path)
            os.rmdir(retired)
        except OSError:
            raise OutputError(f"{report.option} {report.given} changed while the plan ran; "
                              f"the earlier report is kept in {old}") from None
        raise
    if not _remove_written(old):
        warnings.warn(f"{report.option} {report.given}: the earlier report gained files "
                      f"popart-unwind did not write while it was replaced; they are kept "
                      f"in {old}", OutputWarning, stacklevel=2)
        return
    with contextlib.suppress(OSError):
        os.rmdir(retired)


def _changed(report: FolderTarget, what: str) -> str:
    return (f"{report.option} {report.given} changed while the plan ran ({what}); nothing "
            f"was replaced or removed")


def _describe(path: Path) -> str:
    kind = _kind_of(path)
    return f"it is now {kind}" if kind is not None else "it vanished"


def _kind_of(path: Path) -> str | None:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    kind = path_kind(mode)
    return f"{kind} holding files" if kind == "a folder" else kind


def _remove_written(folder: Path) -> bool:
    """Remove a retired report: only the regular files its marker lists, then the marker and
    the folder if nothing else is left; anything else (put there through an open handle
    after the check) stays, and the folder with it. Whether the folder is gone."""
    written = read_marker(folder) or set()
    for name in sorted(written):
        entry = folder / name
        if os.path.basename(name) == name and not entry.is_symlink() and entry.is_file():
            with contextlib.suppress(OSError):
                entry.unlink()
    if os.listdir(folder) != [REPORT_MARKER]:
        return False
    try:
        (folder / REPORT_MARKER).unlink()
        os.rmdir(folder)
    except OSError:
        return False
    return True
