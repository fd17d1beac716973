"""The example in docs/canonicalizer.md runs and prints what the page says."""

from __future__ import annotations

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "canonicalizer.md"


def test_canonicalizer_page_example_runs():
    result = doctest.testfile(str(DOC), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
