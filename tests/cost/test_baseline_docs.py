"""The example of docs/baseline.md runs."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "baseline.md"


def test_the_baseline_page_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})
    printed = capsys.readouterr().out
    assert "bytes exchanged, linear:" in printed
