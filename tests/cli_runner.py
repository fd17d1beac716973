"""The command line run in-process, as the tests drive it."""

from __future__ import annotations

import io

from popart_unwind.cli import main


def run(*argv: str) -> tuple[int, str, str]:
    """``popart-unwind ARGV`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(list(argv), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()
