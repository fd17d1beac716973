"""Reports for the report's tests, and the headless browser that opens them.

The browser is Debian's ``chromium`` (or the one ``POPART_UNWIND_CHROMIUM`` names) driven
by Playwright's Python package, never a browser Playwright downloads. Without either, the
browser tests skip and say why; with ``POPART_UNWIND_REQUIRE_BROWSER=1`` (set by
``.ci/run``) they fail instead, so CI cannot pass without running them.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wide_model import save_wide_model

from popart_unwind.cli import main

#: Layers of the wide model in the browser tests: 4 tensors each, 2,001 with the input.
WIDE_LAYERS = 500


def chromium_path() -> str | None:
    """The system browser: ``POPART_UNWIND_CHROMIUM`` if set, else chromium on PATH."""
    named = os.environ.get("POPART_UNWIND_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _unavailable(reason: str) -> None:
    if os.environ.get("POPART_UNWIND_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (POPART_UNWIND_REQUIRE_BROWSER=1: the browser tests must run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium, or a skip (a failure where the browser is required)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install '.[test]')")
    path = chromium_path()
    if path is None:
        _unavailable("no Chromium found (apt-get install chromium, or set "
                     "POPART_UNWIND_CHROMIUM to its executable)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield launched
        finally:
            launched.close()


def write_report(folder: Path, *arguments: str) -> Path:
    """Run the command with ``--report folder/report --out folder/plan.json``; the page."""
    status = main([*arguments, "--report", str(folder / "report"), "--out",
                   str(folder / "plan.json"), "--quiet"], stdout=io.StringIO(),
                  stderr=io.StringIO())
    assert status == 0
    return folder / "report" / "index.html"


@pytest.fixture(scope="session")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's report (and its plan file beside the folder)."""
    return write_report(tmp_path_factory.mktemp("demo"), "demo")


@pytest.fixture(scope="session")
def wide_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a 2,001-tensor model on a GC200's 1,472 tiles."""
    folder = tmp_path_factory.mktemp("wide")
    model = save_wide_model(folder / "model", WIDE_LAYERS)
    return write_report(folder, "plan", str(model))
