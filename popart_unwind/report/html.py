"""The HTML report: one self-contained ``index.html`` (pictures as base64 PNG data URIs,
CSS and its one script inline, no network) with the PNGs also saved beside it.

Sections: the model, target and solver (with any ops no layout rule models); where ours
differs from PopART, worth first (``html_tensors.py``); the summary table; per-tile memory
and exchange bars; the ops that move the most data; for small problems the unwinding
diagram; and every tensor in a table to search, filter and sort, each with its
explanations and a drawing of its layouts.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from popart_unwind.report import pictures
from popart_unwind.report.html_tensors import tensor_sections
from popart_unwind.report.page_script import SCRIPT, STYLE
from popart_unwind.report.progress import ProgressCallback
from popart_unwind.report.session import PlanRun
from popart_unwind.report.summary import (
    PLAN_TITLES,
    ipu_holdings_lines,
    ops_without_rule_order,
    summary_rows,
    verdict,
)
from popart_unwind.version import __version__

TOP_OPS = 20
MAX_DIAGRAM_TENSORS = 40

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; vertical-align: top; }
th { background: #f4f4f4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { max-width: 40em; overflow-wrap: break-word; }
img { max-width: 100%; height: auto; display: block; margin: 0.5em 0 1.5em; }
.meta { color: #555; } code { font-size: 0.95em; }
.verdict { font-size: 1.15em; font-weight: 600; }
"""


def write_report(run: PlanRun, folder: Path, title: str,
                 progress: ProgressCallback | None = None) -> None:
    """Write ``index.html`` and the PNGs into ``folder`` (an empty staging folder);
    ``progress(step, done, total)`` hears of each section as it is drawn. ``title`` heads
    the page: the model's file name, not its path."""
    images: dict[str, bytes] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("tensors", lambda: tensor_sections(run)),
        ("summary", lambda: _summary(run)),
        ("per-tile bars", lambda: _per_tile(run, images)),
        ("memory map", lambda: _memory_map(run, images)),
        ("memory search", lambda: _memory_search(run)),
        ("ops", lambda: _top_ops(run)),
        ("diagram", lambda: _diagram(run, folder, images)),
    ]
    parts: dict[str, Any] = {}
    for done, (step, make) in enumerate(steps):
        if progress is not None:
            progress(step, done, len(steps))
        parts[step] = make()
    for name, png in images.items():
        (folder / name).write_bytes(png)
    differences, table, data = parts.pop("tensors")
    body = "\n".join([differences, *(part for part in parts.values() if part), table])
    page = (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{_e(title)}</title>\n<style>{CSS}{STYLE}</style>\n</head>\n<body>\n"
            f"<h1>{_e(title)}</h1>\n{_verdict(run)}{_meta(run)}\n{body}\n{data}\n"
            f"<script>{SCRIPT}</script>\n</body>\n</html>\n")
    (folder / "index.html").write_text(page, encoding="utf-8")


def _e(text: Any) -> str:
    return html.escape(str(text))


def _img(images: dict[str, bytes], name: str, alt: str) -> str:
    """The picture embedded as a data URI (the page needs no other file)."""
    encoded = base64.b64encode(images[name]).decode("ascii")
    return f'<img src="data:image/png;base64,{encoded}" alt="{_e(alt)}">'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric_from: int = 1,
           text_from: int | None = None) -> str:
    """Columns from ``numeric_from`` up to ``text_from`` (exclusive) are numbers."""
    head = "".join(f"<th>{_e(cell)}</th>" for cell in header)
    end = len(header) if text_from is None else text_from
    lines = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{_e(cell)}</td>' if numeric_from <= i < end
            else f'<td class="text">{_breakable(cell)}</td>' for i, cell in enumerate(row))
        lines.append(f"<tr>{cells}</tr>")
    return f"<table>\n<tr>{head}</tr>\n" + "\n".join(lines) + "\n</table>"


def _breakable(text: Any) -> str:
    """Escaped, with a line-break opportunity after each separator of a long name
    (``model.layer.0/MatMul``), so that names wrap at their parts, not mid-word."""
    return re.sub(r"([/._:])", r"\1<wbr>", _e(text))


def _verdict(run: PlanRun) -> str:
    """The summary's sentence, first on the page (none without the PopART baseline)."""
    sentence = verdict(run.summaries())
    return "" if sentence is None else f'<p class="verdict">{_e(sentence)}</p>\n'


def _meta(run: PlanRun) -> str:
    source = run.ir.metadata.get("source", "model")
    if run.ir.metadata.get("format") == "onnx":
        source = Path(source).name  # the file, not where it lies
    counts: dict[str, int] = {}
    for decision in run.decisions:
        counts[decision.method] = counts.get(decision.method, 0) + 1
    methods = ", ".join(f"{count} {method}" for method, count in sorted(counts.items()))
    score, bound = float(run.plan.objective), float(run.plan.upper_bound)
    share = f" ({100 * score / bound:.1f}%)" if bound else ""
    return (f'<p class="meta">Model <code>{_e(source)}</code> · target IpuModel, '
            f"{run.model.tiles_per_ipu:,} tiles of {run.model.bytes_per_tile:,} bytes · "
            f"solver <code>{_e(run.algorithm)}</code>, its score on the unwinding graph "
            f"{_figure(score)} of {_figure(bound)}{share} · {len(run.decisions)} tensors "
            f"({_e(methods)}) · popart-unwind {_e(__version__)}</p>\n"
            + _ops_without_rule(run))


def _figure(value: float) -> str:
    return f"{value:,.0f}" if value.is_integer() else f"{value:,.2f}"


def _ops_without_rule(run: PlanRun) -> str:
    """The planner's caveat: ops no layout rule models are barriers, their exchange not
    counted; named so that none goes unnoticed."""
    if not run.ops_without_rule:
        return '<p class="meta">Every op has a layout rule.</p>'
    names = ", ".join(f"<code>{_e(name)}</code> ×{count}"
                      for name, count in ops_without_rule_order(run.ops_without_rule))
    return (f'<p class="meta">Ops without a layout rule (barriers: outputs mapped linearly, '
            f"no exchange counted): {names}</p>")


def _summary(run: PlanRun) -> str:
    header, rows = summary_rows(run.summaries(), run.model.bytes_per_tile)
    note = ("<p>Objective: the planner's preferences met by each plan's tiles (Σ value × "
            "elements whose two ends share a tile; higher is better; the share is of the "
            "upper bound), one figure per plan on one scale. The solver's score above "
            "counts the same preferences on the unwinding graph, before its layouts become "
            "tiles: there an element agrees only where the solver made it agree, while on "
            "tiles two elements also agree when they land on one tile by coincidence, and "
            "the realizer's memory balancing moves some elements; so the two differ by a "
            "little either way. Exchange: bytes tiles receive before ops compute "
            "and the cycles that takes. Max tile memory: the fullest tile's resident bytes "
            "(always-live tensors and the largest single op's data) against the tile's "
            "budget. Peak tile memory: the most bytes the busiest tile holds at once over the "
            "schedule (liveness: activations kept for later ops included); always-live: "
            "producer-less tensors alone; fits: whether the peak is within the budget (code, "
            "exchange buffers and Poplar's own memory not counted). Regions: contiguous "
            "pieces received (exchange code).</p>")
    return f"<h2>Summary</h2>\n{_table(header, rows)}\n{note}" + _ipus(run)


def _ipus(run: PlanRun) -> str:
    """On several IPUs: which layers each holds under our plan (docs/multi-ipu.md)."""
    if run.model.ipus == 1:
        return ""
    items = "".join(f"<li>{_breakable(line)}</li>"
                    for line in ipu_holdings_lines(run.weights_by_ipu(), run.model.ipus))
    return (f"<h3>IPUs</h3>\n<p>{run.model.ipus} IPUs of {run.model.tiles_per_ipu:,} tiles; "
            f"the per-tile pictures below show their tiles one IPU after another. The layers "
            f"each IPU holds under our plan (first and last, in the order the forward pass "
            f"reads them):</p>\n<ul>{items}</ul>")


def _per_tile(run: PlanRun, images: dict[str, bytes]) -> str:
    budget = run.model.bytes_per_tile
    images["memory_per_tile.png"] = pictures.per_tile_bars(
        "Resident memory per tile", {n: r.resident_bytes_per_tile for n, r in run.costs.items()},
        "B", budget)
    images["peak_memory_per_tile.png"] = pictures.per_tile_bars(
        "Peak memory per tile (liveness over the schedule)",
        {n: r.peak_bytes_per_tile for n, r in run.costs.items()}, "B", budget)
    images["exchange_per_tile.png"] = pictures.per_tile_bars(
        "Bytes received per tile (exchange)",
        {n: r.received_bytes_per_tile for n, r in run.costs.items()}, "B")
    return ("<h2>Per tile</h2>\n"
            f"<p>Tile budget {budget:,} bytes (dashed line when the bars come near it).</p>\n"
            + _img(images, "memory_per_tile.png", "resident memory per tile") + "\n"
            + _img(images, "peak_memory_per_tile.png", "peak memory per tile") + "\n"
            + _img(images, "exchange_per_tile.png", "received exchange bytes per tile"))


def _memory_map(run: PlanRun, images: dict[str, bytes]) -> str:
    """Per-tile memory on a grid of tiles, ours beside PopART's on one colour scale, and
    each plan's fullest tile: when its peak is reached and what fills it then."""
    shown = [name for name in ("ours", "popart") if name in run.costs]
    budget = run.model.bytes_per_tile
    panels = {name: {"always-live": run.costs[name].always_live_bytes_per_tile,
                     "peak": run.costs[name].peak_bytes_per_tile} for name in shown}
    marked = {name: run.costs[name].fullest_tile.tile for name in shown
              if run.costs[name].fullest_tile is not None}
    images["memory_map.png"] = pictures.tile_memory_heatmap(
        "Memory per tile: always-live and peak (liveness)", panels, budget, marked)
    rows = []
    for name in shown:
        fullest = run.costs[name].fullest_tile
        if fullest is None:
            continue
        over = fullest.bytes - budget
        rows.append([PLAN_TITLES[name], f"{fullest.tile}",
                     f"{fullest.bytes:,} B ({100 * fullest.bytes / budget:.1f}%)",
                     f"{fullest.always_live_bytes:,} B",
                     "yes" if over <= 0 else f"no: {over:,} B over",
                     fullest.op if fullest.op is not None else "(no op: always-live only)",
                     ", ".join(f"{tensor} {held:,} B" for tensor, held in fullest.largest)])
    table = _table(["plan", "tile", "peak", "always-live", "fits", "peak first at op",
                    "largest on the tile then"], rows, numeric_from=1, text_from=5)
    return ("<h2>Fullest tile</h2>\n"
            "<p>Each tile's bytes drawn on a grid of tile ids (row-major; not the chip's "
            "floor plan), one colour scale for every panel; the ringed tile is the plan's "
            "fullest. Always-live: producer-less tensors; peak: the most the tile holds at "
            f"once over the schedule. Tile budget {budget:,} bytes.</p>\n"
            + _img(images, "memory_map.png", "memory per tile on a grid of tiles") + "\n"
            + "<p>The fullest tile of each plan, at the first op where its peak is reached, "
            "with the largest tensors live on it then and their bytes on that tile (a "
            "subgraph the op runs counts as its own peak on the tile).</p>\n" + table)


def _memory_search(run: PlanRun) -> str:
    """The memory settings tried when our plan did not fit (``--option memory_weight``),
    or nothing."""
    search = run.memory_search
    if search is None:
        return ""
    rows = [[trial.setting + (" (kept)" if trial.setting == search.kept else ""),
             f"{trial.peak_tile_bytes:,} B", f"{trial.cycles:,}",
             f"{trial.exchange_bytes:,}", f"{trial.score:,.0f}",
             "yes" if trial.fits else "no"] for trial in search.trials]
    table = _table(["setting", "peak (ours)", "cycles", "exchange bytes", "score", "fits"],
                   rows, numeric_from=1, text_from=5)
    return ("<h2>Memory settings tried</h2>\n"
            f"<p>{_e(search.line())}. Each setting was planned and costed on its own graph; "
            f"score = cycles + {search.weight:g} × bytes over {search.bytes_per_tile:,}. "
            "Everything else on this page is the setting kept.</p>\n" + table)


def _op_rows(report: Any) -> list[Any]:
    rows = getattr(report, "ops", None)
    return list(rows if rows is not None else report.rows)


def _top_ops(run: PlanRun) -> str:
    names = list(run.costs)
    by_plan = {name: {row.op_id: row for row in _op_rows(report)}
               for name, report in run.costs.items()}
    ours = _op_rows(run.costs["ours"])

    def moved(row: Any) -> int:
        return max(by_plan[name][row.op_id].per_step("exchange_bytes")
                   for name in names if row.op_id in by_plan[name])

    ranked = sorted((row for row in ours if moved(row) > 0),
                    key=lambda row: (-moved(row), row.op_id))[:TOP_OPS]
    if not ranked:
        return "<h2>Exchange by op</h2>\n<p>No op receives any data under any plan.</p>"
    header = ["op", "type", "graph"]
    header += [f"bytes ({PLAN_TITLES[n]})" for n in names]
    header += [f"cycles ({PLAN_TITLES[n]})" for n in names]
    header += ["regions (ours)"]
    rows = []
    for row in ranked:
        plans = [by_plan[n].get(row.op_id) for n in names]
        rows.append([row.name or f"#{row.op_id}", row.type, row.graph_id or "main",
                     *(f"{p.per_step('exchange_bytes'):,}" if p else "" for p in plans),
                     *(f"{p.per_step('cycles'):,}" if p else "" for p in plans),
                     f"{row.regions:,}"])
    return (f"<h2>Exchange by op (top {len(rows)})</h2>\n"
            "<p>Ops ranked by the most bytes any plan makes them receive; per step (an op "
            "of a subgraph counts once per call site).</p>\n" + _table(header, rows, 3))


def _diagram(run: PlanRun, folder: Path, images: dict[str, bytes]) -> str:
    graph = getattr(run.plan, "unwind_graph", None)
    solution = getattr(run.plan, "solution", None)
    if graph is None or solution is None:
        return ""
    count = len(graph.tensors())
    if count > MAX_DIAGRAM_TENSORS:
        return (f"<h2>Unwinding problem</h2>\n<p>{count} tensors: too many to draw "
                f"(at most {MAX_DIAGRAM_TENSORS}).</p>")
    from popart_unwind.unwind.draw import draw

    path = draw(solution, folder / "unwind.png", title="The unwinding problem and its solution")
    images["unwind.png"] = Path(path).read_bytes()
    return ("<h2>Unwinding problem</h2>\n<p>Each tensor of the unwinding graph as a grid of "
            "elements coloured by mapping (same colour, same tile layout); ValuedPairs as "
            "double lines labelled value · agreeing/elements.</p>\n"
            + _img(images, "unwind.png", "the unwinding graph and its solution"))


