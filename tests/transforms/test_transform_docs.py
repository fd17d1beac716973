"""The examples in docs/transforms.md run and print what the page says."""

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "transforms.md"


def test_transforms_page_examples_run():
    result = doctest.testfile(str(DOC), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
