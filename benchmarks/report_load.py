"""How long a large report takes to open in Chromium, and how large it is.

For each tensor count: build the wide model of tests/report/wide_model.py (a chain of
small layers, four weights each), write its report with ``popart-unwind plan`` on a GC200's
1,472 tiles, open it in headless Chromium (Debian's ``chromium`` driven by Playwright,
``--chromium`` to name another) and time, over ``--repeats`` fresh pages:

- load: from navigation to the end of the load event (the page parsed, its pictures
  decoded and its script run), as the browser's navigation timing reports it;
- search: typing a tensor's full name into the search box until its row is the only one
  shown and its explanation and layout drawings are open.

Prints one row per tensor count: the report's size, the planning time (the whole command,
report included) and the median load and search times. The target for 2,000 tensors is a
load within 3 s. ``--page PATH NAME`` times a report written beforehand instead (any
model's: NAME is a tensor to search for); its planning time is not known here.

    python benchmarks/report_load.py                       # 2,001 and 5,001 tensors
    python benchmarks/report_load.py --layers 500 --width 64 --markdown
    python benchmarks/report_load.py --layers --page report/index.html 624.weight
"""

from __future__ import annotations

import argparse
import io
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPORT_TESTS = Path(__file__).resolve().parent.parent / "tests" / "report"


def wide_model_module():
    """tests/report/wide_model.py (not an installed module)."""
    if str(REPORT_TESTS) not in sys.path:
        sys.path.insert(0, str(REPORT_TESTS))
    import wide_model

    return wide_model


def write_report(folder: Path, layers: int, width: int, tiles: int) -> tuple[Path, float]:
    """The wide model's report; the seconds ``popart-unwind plan`` took."""
    from popart_unwind.cli import main

    model = wide_model_module().save_wide_model(folder / "model", layers, width)
    start = time.perf_counter()
    status = main(["plan", str(model), "--tiles", str(tiles), "--report",
                   str(folder / "report"), "--quiet"], stdout=io.StringIO(),
                  stderr=io.StringIO())
    if status != 0:
        raise SystemExit(f"popart-unwind plan failed with status {status}")
    return folder / "report" / "index.html", time.perf_counter() - start


def time_page(browser, page_path: Path, tensor: str) -> tuple[float, float]:
    """(load seconds, search seconds) on a fresh page at 1280 px."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_path.as_uri(), wait_until="load")
    load = page.evaluate("""() => {
        const n = performance.getEntriesByType('navigation')[0];
        return (n.loadEventEnd - n.startTime) / 1000; }""")
    start = time.perf_counter()
    page.fill("#tensor-search", tensor)
    page.wait_for_selector("#tensor-table tr.detail svg")
    search = time.perf_counter() - start
    context.close()
    if errors:
        raise SystemExit(f"the page raised: {errors[0]}")
    return load, search


def medians(times: list[tuple[float, float]]) -> list[str]:
    """The median load (seconds) and search (milliseconds) as table cells."""
    return [f"{statistics.median(t[0] for t in times):.2f}",
            f"{1000 * statistics.median(t[1] for t in times):.0f}"]


def rows_of(page: Path) -> int:
    """The tensors a report lists (its table's rows)."""
    return page.read_text(encoding="utf-8").count('<tr id="tensor-')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=[500, 1250],
                        help="layers of the wide model (4 tensors each, plus the input)")
    parser.add_argument("--width", type=int, default=8, help="each layer's width")
    parser.add_argument("--tiles", type=int, default=1472)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chromium", default=shutil.which("chromium"),
                        help="the browser's executable (default: chromium on PATH)")
    parser.add_argument("--page", nargs=2, action="append", default=[],
                        metavar=("PATH", "NAME"),
                        help="also time this report page, searching for tensor NAME")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args()
    if not args.chromium:
        raise SystemExit("no chromium on PATH: apt-get install chromium, or --chromium PATH")
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, headless=True)
        for layers in args.layers:
            folder = Path(scratch) / f"wide{layers}"
            page, planned = write_report(folder, layers, args.width, args.tiles)
            times = [time_page(browser, page, f"{layers // 2}.norm.weight")
                     for _ in range(args.repeats)]
            rows.append([f"wide, {layers:,} layers of {args.width}", f"{4 * layers + 1:,}",
                         f"{args.tiles:,}", f"{page.stat().st_size / 1e6:.2f}",
                         f"{planned:.1f}", *medians(times)])
        for path, name in args.page:
            page = Path(path).resolve()
            times = [time_page(browser, page, name) for _ in range(args.repeats)]
            rows.append([page.parent.name, f"{rows_of(page):,}", "",
                         f"{page.stat().st_size / 1e6:.2f}", "", *medians(times)])
        browser.close()
    header = ["report", "tensors", "tiles", "report MB", "plan + report s", "load s",
              "search ms"]
    print(f"# {platform.machine()} {platform.system()}, Python {platform.python_version()}, "
          f"median of {args.repeats} loads")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("| " + " | ".join("---:" for _ in header) + " |")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
