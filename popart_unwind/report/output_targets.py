"""Which output locations the command may write, decided before any work is done.

The rules (docs/cli.md, *What is refused*):

- a file output (``--out``, ``--onnx-out``) is written only where nothing is, or over a
  regular file; never over an input (the same path, through a symbolic link, or a hard link
  to it), a folder, a device, a FIFO or a socket; symbolic links are followed, so the link
  stays and its target is replaced;
- a report folder (``--report``) is created where nothing is, or replaces an empty folder,
  or (only with ``--force``) a report folder this tool made, recognised by its marker file
  listing what the tool wrote there; a folder holding anything else, the current folder or
  one holding it, and a folder holding an input are refused;
- no two outputs name the same file, and a file output lies either outside the report
  folder or directly in it (it is then written into the new report).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from popart_unwind.errors import OutputError
from popart_unwind.frontends.input_file import path_kind

#: A report folder the tool made holds this file: a first line saying so, then the names of
#: the files the tool wrote there, one per line.
REPORT_MARKER = ".popart-unwind-report"
MARKER_HEADER = "popart-unwind report folder; these files were written by popart-unwind:"


@dataclasses.dataclass(frozen=True)
class InputFile:
    """A file the run reads, which no output may replace."""

    what: str  # "the model", "external data of the model", ...
    path: Path


@dataclasses.dataclass(frozen=True)
class FileTarget:
    """One file output: the option naming it, the path as given, and where it goes."""

    option: str
    given: Path
    path: Path  # absolute, symbolic links resolved
    in_report: bool = False  # directly inside the report folder: written with the report


@dataclasses.dataclass(frozen=True)
class FolderTarget:
    """The report folder: the path as given, where it goes, and what is there now."""

    option: str
    given: Path
    path: Path  # absolute, symbolic links resolved
    #: "absent", "empty" (an empty folder) or "report" (an earlier report, --force given)
    state: str


def check_outputs(files: Sequence[tuple[str, Path | None]], report: Path | None,
                  inputs: Sequence[InputFile], force: bool,
                  report_option: str = "--report") -> tuple[list[FileTarget],
                                                            FolderTarget | None]:
    """The checked targets of ``files`` (option, path or None) and of the report folder;
    raises OutputError, one line naming the option and path, on the first that is refused."""
    folder = check_report_folder(report_option, report, inputs, force) \
        if report is not None else None
    targets: list[FileTarget] = []
    for option, given in files:
        if given is None:
            continue
        target = check_file(option, given, inputs, folder)
        for earlier in targets:
            if _same_file(earlier.path, target.path):
                raise OutputError(f"{earlier.option} and {option} name the same file "
                                  f"({given}); give each output its own file")
        targets.append(target)
    return targets, folder


def resolve(option: str, given: Path) -> Path:
    """``given`` made absolute with symbolic links followed; a loop, or a path through
    something that is not a folder, is refused."""
    if str(given) == "":
        raise OutputError(f"{option} needs a path, got an empty string")
    try:
        os.stat(given)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OutputError(f"{option} {given} is a symbolic link loop") from None
        if error.errno == errno.ENOTDIR:
            raise OutputError(f"{option} {given}: a part of the path is not a folder") \
                from None
        if error.errno != errno.ENOENT:  # too long a name, no permission to look, ...
            raise OutputError(f"{option} {given}: {error.strerror or error}") from None
    return Path(os.path.realpath(given))


def check_file(option: str, given: Path, inputs: Sequence[InputFile],
               report: FolderTarget | None) -> FileTarget:
    """A file output that replaces no input and nothing but a regular file."""
    path = resolve(option, given)
    kind = _kind(path)
    if kind is not None and kind != "a regular file":
        raise OutputError(f"{option} {given} is {kind}; outputs only replace regular files")
    in_report = report is not None and path.parent == report.path
    if report is not None:
        if path == report.path:
            raise OutputError(f"{option} {given} is the {report.option} folder; give the "
                              f"file its own name")
        if path.is_relative_to(report.path):
            if not in_report:
                raise OutputError(f"{option} {given} lies in a subfolder of the "
                                  f"{report.option} folder, which is replaced as a whole; "
                                  f"put it in the folder itself")
            if path.name == REPORT_MARKER:
                raise OutputError(f"{option} {given} is the report folder's marker file")
    if not in_report and not path.parent.is_dir():
        raise OutputError(f"{option} {given}: folder {given.parent} does not exist")
    for source in inputs:
        if _same_file(path, source.path):
            raise OutputError(f"{option} {given} is {source.what} ({source.path}); writing "
                              f"it would destroy the input, choose another file")
    return FileTarget(option, given, path, in_report)


def check_report_folder(option: str, given: Path, inputs: Sequence[InputFile],
                        force: bool) -> FolderTarget:
    """A report folder the tool may create or replace (see the module's rules)."""
    path = resolve(option, given)
    cwd = Path(os.path.realpath(os.getcwd()))
    if path == path.parent or cwd.is_relative_to(path):
        raise OutputError(f"{option} {given} is the current folder or holds it; the report "
                          f"folder is replaced as a whole, so name a new folder")
    if not path.parent.is_dir():
        raise OutputError(f"{option} {given}: folder {given.parent} does not exist")
    for source in inputs:
        if Path(os.path.realpath(source.path)).is_relative_to(path):
            raise OutputError(f"{option} {given} holds {source.what} ({source.path}); the "
                              f"report folder is replaced as a whole, so name another folder")
    kind = _kind(path)
    if kind is None:
        return FolderTarget(option, given, path, "absent")
    if kind != "a folder":
        raise OutputError(f"{option} {given} is {kind}, not a folder")
    entries = sorted(os.listdir(path))
    if not entries:
        return FolderTarget(option, given, path, "empty")
    foreign = unlisted_entries(path)
    if foreign is None:
        raise OutputError(f"{option} {given} is a folder popart-unwind did not make (it has "
                          f"no {REPORT_MARKER} file); choose a new or empty folder")
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise OutputError(f"{option} {given} is an earlier report, but holds {foreign[0]!r}"
                          f"{more}, which popart-unwind did not write; move it away first")
    if not force:
        raise OutputError(f"{option} {given} holds an earlier report; pass --force to "
                          f"replace it")
    return FolderTarget(option, given, path, "report")


def unlisted_entries(folder: Path) -> list[str] | None:
    """The entries of report folder ``folder`` its marker does not list as regular files
    the tool wrote (sorted), or None when it has no valid marker. Checked before any work
    and again when the folder is replaced (``atomic``)."""
    written = read_marker(folder)
    if written is None:
        return None
    return [name for name in sorted(os.listdir(folder)) if name != REPORT_MARKER and (
        name not in written or _kind(folder / name) != "a regular file")]


def file_changed(target: FileTarget) -> str | None:
    """What now stands at a file output's path if it is no longer nothing or a regular
    file (a folder, a FIFO, ... put there while the plan ran), else None."""
    kind = _kind(target.path)
    return kind if kind is not None and kind != "a regular file" else None


def marker_text(names: Sequence[str]) -> str:
    """The marker file's content for a report folder holding ``names``."""
    return "\n".join([MARKER_HEADER, *sorted(n for n in names if n != REPORT_MARKER)]) + "\n"


def read_marker(folder: Path) -> set[str] | None:
    """The names a report folder's marker lists, or None when it has no valid marker."""
    marker = folder / REPORT_MARKER
    if _kind(marker) != "a regular file":
        return None
    try:
        lines = marker.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or lines[0] != MARKER_HEADER:
        return None
    return {line for line in lines[1:] if line}


def _kind(path: Path) -> str | None:
    """What is at ``path`` (symbolic links not followed), or None if nothing is."""
    try:
        return path_kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def _same_file(first: Path, second: Path) -> bool:
    """The same path once resolved, or two names of one file (hard links)."""
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        one, two = os.stat(first), os.stat(second)
    except OSError:
        return False
    return stat.S_ISREG(one.st_mode) and (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)
