"""What a path names, in words a user understands, before anything tries to read it.

Opening a FIFO blocks, opening a folder fails with a misleading message, and a symbolic
link loop reads as "no such file"; so the kind of the path is decided first (``os.stat``
without opening it) and anything that is not a regular file is refused in one line.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from popart_unwind.errors import ModelPathError

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def path_kind(mode: int) -> str:
    """``a folder``, ``a FIFO (named pipe)``, ... or ``a regular file``, from ``st_mode``."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def describe_unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file (missing, a dangling or looping symbolic link,
    a folder, a FIFO, a device, a name holding a NUL byte), or None when it is a regular
    file."""
    if "\0" in str(path):
        return "is no file name: it holds a NUL byte"
    try:
        info = os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if error.errno == errno.ENOENT:
            return "is a symbolic link to a missing file" if os.path.islink(path) \
                else "no such file"
        if error.errno == errno.ENOTDIR:
            return "no such file (a part of the path is not a folder)"
        if error.errno == errno.ENAMETOOLONG:
            return "is a name too long for the system"
        return f"cannot be read: {error.strerror}"
    if stat.S_ISREG(info.st_mode):
        return None
    return f"is {path_kind(info.st_mode)}, not a file"


def require_regular_file(path: Path, what: str) -> None:
    """Raise ModelPathError, one line, unless ``path`` is a regular file."""
    problem = describe_unreadable(path)
    if problem is not None:
        raise ModelPathError(f"cannot read {what} {path}: {problem}")
