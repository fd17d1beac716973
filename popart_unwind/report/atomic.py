"""Output files that are complete or absent: never a partial plan, model or report.

Each file is written to a temporary name in its own folder and renamed over the target
(``os.replace`` is atomic within one file system); a report folder is built in a temporary
folder beside its target and renamed into place the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from popart_unwind.errors import PopartUnwindError


class OutputError(PopartUnwindError, ValueError):
    """An output location cannot be written (missing folder, not a folder, not ours)."""


#: A folder holding this file is a report we wrote, and may be replaced by a new one.
REPORT_MARKER = "index.html"


def check_file_target(path: Path, what: str) -> None:
    """Refuse early (before any work) a file target whose folder is missing or which is a
    folder itself."""
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder, not a file")
    if not path.parent.is_dir():
        raise OutputError(f"{what} {path}: folder {path.parent} does not exist")


def check_folder_target(path: Path, what: str) -> None:
    """Refuse a report folder whose parent is missing, or that exists and is not empty and
    not an earlier report (a folder holding ``index.html``)."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path} exists and is not a folder")
    if not path.parent.is_dir():
        raise OutputError(f"{what} {path}: folder {path.parent} does not exist")
    if path.is_dir() and any(path.iterdir()) and not (path / REPORT_MARKER).is_file():
        raise OutputError(f"{what} {path} is a non-empty folder that is not a report; "
                          f"choose a new or empty folder")


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def staged_folder(path: Path) -> Iterator[Path]:
    """A temporary folder beside ``path``; when the block ends normally it replaces
    ``path`` (an earlier report there is removed), otherwise it is deleted."""
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield staging
        os.chmod(staging, 0o755)
        _swap_into_place(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_into_place(staging: Path, path: Path) -> None:
    if not path.exists():
        os.replace(staging, path)
        return
    check_folder_target(path, "report folder")
    retired = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
    os.replace(path, retired / "report")  # two renames: the old report, then the new one
    try:
        os.replace(staging, path)
    except BaseException:
        os.replace(retired / "report", path)
        raise
    finally:
        shutil.rmtree(retired, ignore_errors=True)
