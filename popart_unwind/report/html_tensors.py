"""The report's tensor sections: where ours differs from PopART, and every tensor.

Both lead to the same per-tensor material (each plan's explanation and a drawing of its
layout), which is sent once, as JSON the page's script reads (``page_script.py``): a
drawing is a few hundred characters (``layout_data.py``) rather than a picture file, so
every tensor of a graph of thousands has one.
"""

from __future__ import annotations

import html
import json
from math import prod
from typing import Any

from popart_unwind.ir.tensor import qualified_id
from popart_unwind.report.differences import (
    BASELINE,
    TensorWorth,
    differing_ops,
    ranked_differences,
    tensor_worths,
)
from popart_unwind.report.layout_data import encoded_layouts
from popart_unwind.report.session import PlanRun
from popart_unwind.report.summary import PLAN_TITLES

#: How many gains, and how many losses, the differences section details (all are in the
#: table).
DETAILED_DIFFERENCES = 20

WORTH_NOTE = (
    "What a difference is worth is read off the ops that read the tensor, directly or "
    "through views of it: the bytes they receive and the cycles they take (input exchange, "
    "partial sums and compute) in our plan with only this tensor laid out as PopART lays it "
    "out, minus in our plan, so a positive figure is what our layout of it saves there. "
    "Only the readers are priced again: the ops after them, whose inputs may move with the "
    "readers' results, are not. Tile memory is exact: the most bytes of the tensor on one "
    "tile, PopART's minus ours. A tensor counts as laid out otherwise when PopART puts some "
    "element on another tile and that changes one of these figures.")


def _e(text: Any) -> str:
    return html.escape(str(text))


def _saving(value: int | None, unit: str = "") -> str:
    """``ours saves 12 B`` / ``ours adds 12 B`` / ``the same``: PopART's minus ours."""
    if not value:
        return "the same"
    return f"ours {'saves' if value > 0 else 'adds'} {abs(value):,}{unit}"


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape)) or "scalar"


def _plans(run: PlanRun) -> list[str]:
    return [name for name in ("ours", BASELINE) if name in run.layouts]


def tensor_sections(run: PlanRun) -> tuple[str, str, str]:
    """(the differences section, the tensor table section, the page's tensor data as a
    JSON script element)."""
    worths = tensor_worths(run)
    index = {decision.key: i for i, decision in enumerate(run.decisions)}
    return (_differences(run, worths, index), _table(run, worths),
            _data(run))


def _differences(run: PlanRun, worths: dict[Any, TensorWorth], index: dict[Any, int]) -> str:
    head = '<h2 id="differences">Where ours differs from PopART</h2>'
    if BASELINE not in run.layouts:
        return (f"{head}\n<p>No comparison: PopART's plan was not made (<code>--baseline "
                f"popart</code> makes it).</p>")
    gains, losses = ranked_differences(worths)
    idle = sum(1 for worth in worths.values() if worth.on_other_tiles and not worth.differs)
    ops = differing_ops(run)
    idle_text = (f" ({idle:,} more lie on other tiles, which changes none of its figures)"
                 if idle else "")
    parts = [head, f"<p>{len(gains) + len(losses):,} of {len(run.decisions):,} planned "
             f"tensors are laid out otherwise than PopART's heuristic lays them out: some "
             f"element on another tile, changing what their readers exchange, their cycles "
             f"or the tensor's most bytes on one tile{idle_text}. Ours gains on "
             f"{len(gains):,} of them and loses on {len(losses):,}. {len(ops):,} of "
             f"{len(run.planned_ops):,} matmuls and convolutions are planned otherwise.</p>"]
    if gains or losses:
        parts.append(f"<p>{_e(WORTH_NOTE)}</p>")
    for found, title, anchor in ((gains, "Where ours gains", "gains"),
                                 (losses, "Where ours loses", "losses")):
        if not found:
            continue
        shown = found[:DETAILED_DIFFERENCES]
        more = len(found) - len(shown)
        parts.append(f'<h3 id="{anchor}">{title} ({len(found):,} tensor'
                     f"{'' if len(found) == 1 else 's'}"
                     f"{f', the {len(shown)} worth most' if more else ''})</h3>")
        for worth in shown:
            parts.append(_difference(run, worth, index[worth.key]))
        if more:
            parts.append(f'<p>And {more:,} more: the <a href="#tensors">tensor table</a> '
                         f"lists every tensor; filter it to those PopART lays out "
                         f"otherwise.</p>")
    parts.append(_op_table(run, ops))
    return "\n".join(parts)


def _difference(run: PlanRun, worth: TensorWorth, i: int) -> str:
    decision = run.decisions[i]
    name = qualified_id(decision.graph_id, decision.tensor_id)
    ours, theirs = worth.exchange_bytes["ours"], worth.exchange_bytes[BASELINE]
    readers = "op reads" if worth.readers == 1 else "ops read"
    return (f'<div class="difference">\n<h4><a class="to-tensor" href="#tensor-{i}">'
            f"{_e(name)}</a> <small>[{_e(_shape(decision.shape))}, {_e(decision.dtype)}]"
            f"</small></h4>\n"
            f"<p>{worth.readers:,} {readers} it. Exchange there: {theirs:,} B with PopART's "
            f"layout of it, {ours:,} B with ours ({_saving(worth.saved('exchange_bytes'), ' B')}"
            f"); cycles there: {worth.cycles[BASELINE]:,} and {worth.cycles['ours']:,} "
            f"({_saving(worth.saved('cycles'))}); most of it on one tile: "
            f"{worth.tile_bytes[BASELINE]:,} B and {worth.tile_bytes['ours']:,} B "
            f"({_saving(worth.saved('tile_bytes'), ' B')}).</p>\n"
            + "".join(f'<p class="explanation"><b>{_e(PLAN_TITLES[plan])}:</b> '
                      f"{_e(text)}</p>\n" for plan, text in _explanations(run, decision.key))
            + f'<div class="layout-slot" data-i="{i}"></div>\n</div>')


def _explanations(run: PlanRun, key: Any) -> list[tuple[str, str]]:
    found = []
    for plan in _plans(run):
        entry = run.methods.get(plan, {}).get(key)
        if entry is not None:
            found.append((plan, entry[1]))
    return found


def _plan_text(plan: dict[str, Any] | None) -> str:
    """A matmul plan in a few words: its partition, and the pass it computes."""
    if plan is None:
        return "-"
    part = plan["partition"]
    splits = (part["groups"], part["rows"], part["inner"], part["cols"])
    text = "×".join(map(str, splits)) + f" ({prod(splits):,} tiles)"
    if plan.get("fully_connected_pass", "NONE") != "NONE":
        text += (f", {plan['fully_connected_pass']} " +
                 ("with its layer" if plan.get("joint") else "alone"))
    if plan.get("start_tile"):
        text += f", from tile {plan['start_tile']:,}"
    return text


def _op_table(run: PlanRun, ops: list[Any]) -> str:
    """Every matmul and convolution PopART plans otherwise, most cycles saved first (the
    op's own cycles: input exchange, partial sums and compute), with the bytes it receives
    under each plan."""
    intro = ("<h3>Matmul plans</h3>\n<p>A plan is the partition G×M×K×N of an op's work "
             "over the tiles, and whether a fully connected layer's passes share it; "
             "cycles are the op's own (input exchange, partial sums and compute), bytes "
             "those its tiles receive, per step.</p>")
    if not ops:
        return f"{intro}\n<p>PopART plans every matmul and convolution as ours does.</p>"
    received = {plan: {(row.graph_id, row.op_id): row.per_step("exchange_bytes")
                       for row in run.costs[plan].ops} for plan in ("ours", BASELINE)}
    rows = []
    for op in ops:
        ours, theirs = op.cycles.get("ours", 0), op.cycles.get(BASELINE, 0)
        key = (op.graph_id, op.op_id)
        bytes_ours, bytes_theirs = received["ours"].get(key, 0), received[BASELINE].get(key, 0)
        rows.append(f"<tr><td>{_e(qualified_id(op.graph_id, op.name))}</td><td>{_e(op.type)}"
                    f"</td><td>{_e(_plan_text(op.plans.get('ours')))}</td>"
                    f"<td>{_e(_plan_text(op.plans.get(BASELINE)))}</td>"
                    f'<td class="num">{ours:,}</td><td class="num">{theirs:,}</td>'
                    f'<td class="num">{theirs - ours:+,}</td>'
                    f'<td class="num">{bytes_ours:,}</td><td class="num">{bytes_theirs:,}</td>'
                    f"</tr>")
    return (f"{intro}\n<table>\n<tr><th>op</th><th>type</th><th>our plan</th>"
            f"<th>PopART's plan</th><th>cycles ours</th><th>cycles PopART</th>"
            f"<th>cycles saved</th><th>bytes ours</th><th>bytes PopART</th></tr>\n"
            + "\n".join(rows) + "\n</table>")


def _table(run: PlanRun, worths: dict[Any, TensorWorth]) -> str:
    compared = BASELINE in run.layouts
    methods = sorted({d.method for d in run.decisions})
    header = [("tensor", "text"), ("graph", "text"), ("shape", "text"), ("dtype", "text"),
              ("bytes", "number"), ("method", "text")]
    if compared:
        header += [("PopART method", "text"), ("differs", "text"),
                   ("exchange saved (B)", "number"), ("cycles saved", "number"),
                   ("tile bytes saved", "number")]
    popart = run.methods.get(BASELINE, {})
    lines = []
    for i, d in enumerate(run.decisions):
        name = qualified_id(d.graph_id, d.tensor_id)
        size = prod(d.shape) * run.model.dtype_size(d.dtype)
        worth = worths[d.key]
        differs = _differs_text(worth)
        cells = [f'<td><button class="open" type="button" aria-expanded="false">{_e(name)}'
                 f"</button></td>", f"<td>{_e(d.graph_id or 'main')}</td>",
                 f"<td>{_e(_shape(d.shape))}</td>", f"<td>{_e(d.dtype)}</td>",
                 _number(size), f"<td>{_e(d.method)}</td>"]
        if compared:
            cells += [f"<td>{_e(popart.get(d.key, ('-', ''))[0])}</td>",
                      f"<td>{differs}</td>",
                      *(_number(worth.saved(figure) if worth.on_other_tiles else None)
                        for figure in ("exchange_bytes", "cycles", "tile_bytes"))]
        lines.append(f'<tr id="tensor-{i}" data-i="{i}" data-name="{_e(name)}" '
                     f'data-method="{_e(d.method)}" '
                     f'data-differs="{differs}">' + "".join(cells)
                     + "</tr>")
    heads = "".join(f'<th data-type="{kind}">{_e(title)}</th>' for title, kind in header)
    options = "".join(f'<option value="{_e(m)}">{_e(m)}</option>' for m in methods)
    controls = (f'<div class="controls">\n<label>Search <input type="search" '
                f'id="tensor-search" placeholder="tensor name" autocomplete="off"></label>\n'
                f'<label>Method <select id="method-filter"><option value="">any</option>'
                f"{options}</select></label>\n")
    if compared:
        controls += ('<label>PopART <select id="differs-filter"><option value="">any'
                     '</option><option value="yes">lays it out otherwise</option>'
                     '<option value="other tiles">on other tiles, no figure changed</option>'
                     '<option value="no">lays it out as ours</option></select></label>\n')
    controls += '<span id="tensor-count" role="status"></span>\n</div>'
    note = ("<p>Every planned tensor: open one (its name) for each plan's explanation and "
            "a drawing of its layout; click a column's title to sort by it. A drawing is a "
            "tiles × elements map: x the element (row-major, in at most 64 bins), y the "
            "tiles any plan uses (in at most 48 bins), colour the share of a bin's elements "
            "on those tiles (dark: a few, yellow: all); a linear mapping draws a staircase, "
            "a matmul's layout blocks.")
    if compared:
        note += (" Differs: <i>yes</i> when PopART puts some element on another tile and "
                 "that changes a figure, <i>other tiles</i> when it changes none. Figures "
                 "saved: PopART's minus ours, for tensors on other tiles (see "
                 "<a href=\"#differences\">Where ours differs from PopART</a> for what "
                 "they mean).")
    note += "</p>"
    return (f'<h2 id="tensors">Tensors</h2>\n{note}\n{controls}\n'
            f"<noscript><p>The explanations and drawings need the page's script.</p>"
            f"</noscript>\n"
            f'<table id="tensor-table">\n<thead><tr>{heads}</tr></thead>\n<tbody>\n'
            + "\n".join(lines) + "\n</tbody>\n</table>")


def _differs_text(worth: TensorWorth) -> str:
    """The table's "differs" cell: yes (a figure changes), other tiles (none does), no."""
    if worth.differs:
        return "yes"
    return "other tiles" if worth.on_other_tiles else "no"


def _number(value: int | None) -> str:
    if value is None:
        return '<td class="num"></td>'
    return f'<td class="num" data-v="{value}">{value:,}</td>'


def _data(run: PlanRun) -> str:
    """The tensors' explanations and drawings, in table order, as the script reads them;
    ``</`` is escaped so no name can end the script element."""
    plans = _plans(run)
    tensors = []
    for d in run.decisions:
        numel = prod(d.shape)
        layouts = {plan: run.layouts[plan][d.key] for plan in plans
                   if d.key in run.layouts[plan]}
        explanations = [run.methods.get(plan, {}).get(d.key, (None, None))[1]
                        for plan in ("ours", BASELINE)]
        tensors.append([qualified_id(d.graph_id, d.tensor_id), *explanations,
                        encoded_layouts(layouts, numel, run.model.tiles_per_ipu)])
    document = {"plans": plans, "titles": {plan: PLAN_TITLES[plan] for plan in plans},
                "tiles": run.model.tiles_per_ipu, "tensors": tensors}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return ('<script type="application/json" id="tensor-data">'
            + text.replace("</", "<\\/") + "</script>")
