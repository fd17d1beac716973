"""The report as a reader sees it: opened in headless Chromium.

For the demo's report and a 2,001-tensor one: the page runs without a console error,
every picture decodes, nothing scrolls sideways at 1280 px, and the search finds a tensor
by name and opens its explanations and the drawing of its layouts.

The browser is Debian's ``chromium`` (or the one ``POPART_UNWIND_CHROMIUM`` names) driven
by Playwright's Python package, never a browser Playwright downloads. Without either, the
tests skip and say why; with ``POPART_UNWIND_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they
fail instead, so CI cannot pass without running them.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wide_model import save_wide_model

from popart_unwind.cli import main
from popart_unwind.report.demo_model import DEMO_TITLE

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


@pytest.fixture(scope="module")
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


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's report (and its plan file beside the folder)."""
    return write_report(tmp_path_factory.mktemp("demo"), "demo")


@pytest.fixture(scope="module")
def wide_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a 2,001-tensor model on a GC200's 1,472 tiles."""
    folder = tmp_path_factory.mktemp("wide")
    model = save_wide_model(folder / "model", WIDE_LAYERS)
    return write_report(folder, "plan", str(model))


WIDTH = 1280


@pytest.fixture(params=["demo_report", "wide_report"])
def report(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(request.param)


@pytest.fixture
def page(browser: Any, report: Path) -> Iterator[Any]:
    """The report opened at 1280 × 900, its console errors and page errors collected."""
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    opened = context.new_page()
    opened.errors = []
    opened.on("console", lambda message: opened.errors.append(message.text)
              if message.type == "error" else None)
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    opened.on("requestfailed", lambda request: opened.errors.append(f"failed {request.url}"))
    opened.goto(report.as_uri(), wait_until="load")
    yield opened
    context.close()


def plan_of(report: Path) -> dict[str, Any]:
    return json.loads((report.parent.parent / "plan.json").read_text())


def no_sideways_scroll(page: Any) -> None:
    width, inner = page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= inner == WIDTH


def test_page_loads_without_errors_and_every_image_decodes(page, report):
    assert page.errors == []
    images = page.evaluate("""async () => {
        const all = Array.from(document.images);
        const decoded = await Promise.all(all.map(
            image => image.decode().then(() => image.naturalWidth > 0, () => false)));
        return [all.length, decoded.filter(Boolean).length];
    }""")
    assert images[0] >= 4 and images[0] == images[1]  # bars and memory map at least
    slots, drawn = page.evaluate("""[
        document.querySelectorAll('div.layout-slot').length,
        document.querySelectorAll('div.layout-slot svg rect').length]""")
    assert slots == 0 or drawn > slots  # each difference drawn (a frame and its cells)
    no_sideways_scroll(page)
    assert page.title() == (DEMO_TITLE if "demo" in str(report) else "wide.onnx")


def test_search_finds_a_tensor_and_shows_its_explanation(page, report):
    plan = plan_of(report)
    # 32.norm.weight is also part of 132.norm.weight, ...: the full name opens its own row
    name = ("model.transformer.h.0.mlp.c_fc.weight" if "demo" in str(report)
            else "32.norm.weight")
    entry = plan["tensors"][name]
    page.fill("#tensor-search", name)
    matches = sum(name in other for other in plan["tensors"])
    assert matches == (1 if "demo" in str(report) else 5)
    assert page.inner_text("#tensor-count") == (
        f"{matches} of {len(plan['tensors'])} tensors shown"
        + ("" if matches == 1 else ", the one named in full opened"))
    visible = page.locator("#tensor-table tbody tr:not([hidden])")
    assert visible.count() == matches + 1  # the rows and the opened explanation
    detail = page.locator("#tensor-table tr.detail")
    assert detail.is_visible()
    assert page.evaluate("document.querySelector('tr.detail').previousElementSibling"
                         ".dataset.name") == name
    assert f"ours: {entry['explanation']}" in detail.inner_text()
    cells = detail.locator("svg rect")
    assert cells.count() >= 2  # frame and at least one cell per drawing
    no_sideways_scroll(page)
    button = page.locator(f'#tensor-table tbody tr[data-name="{name}"] button.open')
    button.click()  # closes it
    assert page.locator("#tensor-table tr.detail").count() == 0
    assert button.get_attribute("aria-expanded") == "false"
    button.click()  # opens it again, once
    assert page.locator("#tensor-table tr.detail").count() == 1
    assert page.errors == []


def test_a_search_opens_what_it_finds_without_a_click(page, report):
    """A part of a name opens every match (the first five when more match), each with its
    explanation and its drawings."""
    plan = plan_of(report)
    text = "mlp.c_fc" if "demo" in str(report) else "7.norm"
    names = [name for name in plan["tensors"] if text in name]
    assert len(names) > 1
    page.fill("#tensor-search", text)
    opened = page.evaluate("""Array.from(document.querySelectorAll('tr.detail')).map(
        d => d.previousElementSibling.dataset.name)""")
    order = page.evaluate("""Array.from(document.querySelectorAll(
        '#tensor-table tbody tr:not([hidden]):not(.detail)')).map(r => r.dataset.name)""")
    assert sorted(order) == sorted(names)
    assert opened == order[:5]
    for name in opened:
        detail = page.locator(f'#tensor-table tr[data-name="{name}"] + tr.detail')
        assert detail.is_visible()
        assert f"ours: {plan['tensors'][name]['explanation']}" in detail.inner_text()
        assert detail.locator("svg rect").count() >= 2
    status = page.inner_text("#tensor-count")
    assert status.startswith(f"{len(names)} of {len(plan['tensors'])} tensors shown")
    assert status.endswith(", the first 5 opened") == (len(names) > 5)
    page.fill("#tensor-search", "")
    assert page.locator("#tensor-table tr.detail").count() == 0
    assert page.errors == []


def test_filters_and_sorting_apply_to_every_row(page, report):
    plan = plan_of(report)
    rows = page.locator("#tensor-table tbody tr")
    assert rows.count() == len(plan["tensors"])
    page.select_option("#differs-filter", "yes")
    shown = page.evaluate("""Array.from(document.querySelectorAll(
        '#tensor-table tbody tr:not([hidden])')).map(r => r.cells[7].textContent)""")
    assert shown and set(shown) == {"yes"}
    assert page.inner_text("#tensor-count").startswith(f"{len(shown)} of ")
    page.select_option("#differs-filter", "")
    method = sorted({entry["method"] for entry in plan["tensors"].values()})[0]
    page.select_option("#method-filter", method)
    methods = page.evaluate("""Array.from(document.querySelectorAll(
        '#tensor-table tbody tr:not([hidden])')).map(r => r.dataset.method)""")
    expected = sum(entry["method"] == method for entry in plan["tensors"].values())
    assert methods == [method] * expected
    page.select_option("#method-filter", "")
    header = page.locator("#tensor-table th", has_text="bytes").first
    header.click()
    sizes = page.evaluate("""Array.from(document.querySelectorAll(
        '#tensor-table tbody tr')).map(r => Number(r.cells[4].dataset.v))""")
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    header.click()
    sizes = page.evaluate("""Array.from(document.querySelectorAll(
        '#tensor-table tbody tr')).map(r => Number(r.cells[4].dataset.v))""")
    assert sizes == sorted(sizes, reverse=True)
    assert page.errors == []


def test_a_difference_leads_to_its_row(page, report):
    links = page.locator("a.to-tensor")
    assert links.count() > 0  # both models have biases PopART maps linearly
    target = links.first.get_attribute("href")
    links.first.click()
    row = page.locator(target)
    assert row.is_visible()
    assert page.locator(f"{target} + tr.detail").is_visible()
    no_sideways_scroll(page)
    assert page.errors == []
