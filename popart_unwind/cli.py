"""The ``popart-unwind`` command.

Errors from the library are typed (``popart_unwind.errors``); the command turns each into one
line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from popart_unwind import __version__
from popart_unwind.errors import PopartUnwindError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="popart-unwind",
        description="Plan tile layouts of producer-less tensors for tile-based accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"popart-unwind {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        parser.parse_args(argv)
        parser.print_help()
        return 0
    except PopartUnwindError as error:
        print(f"popart-unwind: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
