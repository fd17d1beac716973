"""The summary table: our plan beside the baselines on the cost model's figures.

A rich table on a terminal, aligned plain text otherwise (logs, pipes, CI), and HTML rows
for the report; all three come from :func:`summary_rows`, so they always agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from popart_unwind.cost.terms import ALWAYS, FIGURES, figure
from popart_unwind.report.terminal_text import printable

#: Column titles of the plans the table can show, in order.
PLAN_TITLES = {"ours": "ours", "popart": "PopART baseline", "linear": "linear"}


def _number(value: float | int) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def _objective(summary: Mapping[str, Any]) -> str:
    value, bound = summary["objective"], summary["upper_bound"]
    share = f" ({100 * value / bound:.1f}%)" if bound else ""
    return _number(value) + share


def _memory(summary: Mapping[str, Any], budget: int, figure: str = "max_tile_bytes") -> str:
    value = summary[figure]
    share = f" ({100 * value / budget:.1f}%)" if budget else ""
    return f"{_number(value)} B{share}"


def _fits(summary: Mapping[str, Any]) -> str:
    return "yes" if summary["fits"] else "no"


#: The table's rows, in order. The labels are the cost model's (``cost/terms.py``); a
#: figure the table does not place yet follows these, so a new cost term shows by itself.
_ROW_ORDER = ("objective", "upper_bound", "exchange_bytes", "exchange_cycles",
              "compute_cycles", "cycles", "avoidable_exchange_bytes", "max_tile_bytes",
              "peak_tile_bytes", "always_live_max_tile_bytes", "peak_tile_bytes_floor",
              "fits", "regions")
#: Figures shown as bytes of tile memory, with their share of the tile's budget.
_TILE_MEMORY = frozenset({"max_tile_bytes", "peak_tile_bytes", "always_live_max_tile_bytes",
                          "peak_tile_bytes_floor"})


def _table_figures() -> list[str]:
    """The summary keys the table shows, in its order."""
    labelled = [str(f.key) for f in FIGURES if f.shown == ALWAYS and f.table_label]
    return [*_ROW_ORDER, *(key for key in labelled if key not in _ROW_ORDER)]


def _cell(key: str, summary: Mapping[str, Any], bytes_per_tile: int) -> str:
    if key == "objective":
        return _objective(summary)
    if key == "fits":
        return _fits(summary)
    if key in _TILE_MEMORY:
        return _memory(summary, bytes_per_tile, key)
    return _number(summary[key])


def summary_rows(summaries: Mapping[str, Mapping[str, Any]], bytes_per_tile: int
                 ) -> tuple[list[str], list[list[str]]]:
    """(column titles, rows of cells): one column per plan present, ours first."""
    names = [name for name in PLAN_TITLES if name in summaries]
    header = ["", *(PLAN_TITLES[name] for name in names)]
    rows = [[figure(key).table_label,
             *(_cell(key, summaries[name], bytes_per_tile) for name in names)]
            for key in _table_figures()]
    return header, rows + _ipu_rows([summaries[name] for name in names], bytes_per_tile)


def _ipu_rows(summaries: list[Mapping[str, Any]], bytes_per_tile: int) -> list[list[str]]:
    """On several IPUs: the bytes copied between them, and each IPU's peak tile memory;
    in a pipeline also the cycles per micro-batch and each IPU's stash."""
    if not summaries or "per_ipu" not in summaries[0]:
        return []
    rows = [[figure("ipu_copy_bytes").table_label,
             *(_number(s["ipu_copy_bytes"]) for s in summaries)]]
    pipelined = "pipeline_cycles" in summaries[0]
    if pipelined:
        rows.append([figure("pipeline_cycles").table_label,
                     *(_number(s["pipeline_cycles"]) for s in summaries)])
    for ipu in range(len(summaries[0]["per_ipu"])):
        rows.append([f"IPU {ipu} peak tile memory",
                     *(_memory(s["per_ipu"][ipu], bytes_per_tile, "peak_tile_bytes")
                       for s in summaries)])
        if pipelined:
            rows.append([f"IPU {ipu} stash bytes",
                         *(_number(s["per_ipu"][ipu]["stash_bytes"]) for s in summaries)])
    return rows


#: The figures the verdict weighs: (summary key, saying fewer, saying more, the unit: a
#: noun counted, or ``B`` after a number of bytes of tile memory). Each is named by its
#: short name in the cost model's figure table.
_VERDICT_FIGURES = (
    ("exchange_bytes", "exchanges {n} fewer {noun}", "exchanges {n} more {noun}", "byte"),
    ("cycles", "takes {n} fewer {noun}", "takes {n} more {noun}", "cycle"),
    ("peak_tile_bytes", "peaks {n} {noun} lower on its fullest tile",
     "peaks {n} {noun} higher on its fullest tile", "B"),
)

#: On several IPUs the verdict says apart what the layouts save (the exchange before ops
#: and the cycles spent on the IPUs: the step's cycles without the copies between IPUs)
#: and what the split between the IPUs saves (the copies, and the fullest tile, which the
#: split decides with the layouts). ``ipu_cycles``: cycles - ipu_copy_cycles.
_LAYOUT_FIGURES = (
    ("exchange_bytes", "exchange {n} fewer {noun}", "exchange {n} more {noun}", "byte"),
    ("ipu_cycles", "take {n} fewer {noun} on the IPUs", "take {n} more {noun} on the IPUs",
     "cycle"),
)
_SPLIT_FIGURES = (
    ("ipu_copy_bytes", "copies {n} fewer {noun}", "copies {n} more {noun}", "byte"),
    ("ipu_copy_cycles", "takes {n} fewer {noun} copying", "takes {n} more {noun} copying",
     "cycle"),
    ("peak_tile_bytes", "peaks {n} {noun} lower on its fullest tile",
     "peaks {n} {noun} higher on its fullest tile", "B"),
)
_NAMES = {"ipu_cycles": "cycles on the IPUs", "ipu_copy_bytes": "IPU-copy bytes",
          "ipu_copy_cycles": "copy cycles"}


def verdict(summaries: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One sentence: what our plan saves against PopART's heuristic in exchange bytes,
    total cycles and peak tile memory, from the summaries themselves (the plan file's
    figures, to the byte), saying as plainly when it saves nothing or costs more. On
    several IPUs it says apart what the layouts save and what the split between the IPUs
    saves (``_LAYOUT_FIGURES``, ``_SPLIT_FIGURES``): the copies between IPUs can dwarf
    what the layouts change. None without the PopART baseline."""
    ours, popart = summaries.get("ours"), summaries.get("popart")
    if ours is None or popart is None:
        return None
    if int(ours.get("ipus", 1)) > 1:
        ours, popart = _with_ipu_cycles(ours), _with_ipu_cycles(popart)
        layouts = _compared(ours, popart, _LAYOUT_FIGURES, "save")
        split = _compared(ours, popart, _SPLIT_FIGURES, "saves")
        return (f"Against PopART's heuristic on {int(ours['ipus'])} IPUs, ours' layouts "
                f"{layouts}; its split between the IPUs {split}.")
    better, worse, same = _weighed(ours, popart, _VERDICT_FIGURES)
    if not better and not worse:
        return ("Against PopART's heuristic, ours saves nothing: the same exchange bytes, "
                "cycles and peak tile memory.")
    return f"Against PopART's heuristic, ours {_said(better, worse, same, 'saves')}."


def _with_ipu_cycles(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {**summary, "ipu_cycles": int(summary["cycles"]) - int(summary["ipu_copy_cycles"])}


def _weighed(ours: Mapping[str, Any], popart: Mapping[str, Any],
             figures: tuple[tuple[str, str, str, str], ...]
             ) -> tuple[list[str], list[str], list[str]]:
    """(what ours saves, what it costs more, the names of the figures that are the same)."""
    better, worse, same = [], [], []
    for key, fewer, more, unit in figures:
        saved = int(popart[key]) - int(ours[key])
        if saved == 0:
            same.append(_NAMES.get(key) or figure(key).name)
            continue
        amount = abs(saved)
        noun = unit if unit == "B" or amount == 1 else unit + "s"
        text = (fewer if saved > 0 else more).format(n=f"{amount:,}", noun=noun)
        (better if saved > 0 else worse).append(text + _share(amount, int(popart[key])))
    return better, worse, same


def _said(better: list[str], worse: list[str], same: list[str], saves: str) -> str:
    said = " but ".join(_listed(part) for part in (better, worse) if part)
    if not better:
        said = f"{saves} nothing: {'it' if saves == 'saves' else 'they'} " + said
    if same:
        said += "; the same " + _listed(same)
    return said


def _compared(ours: Mapping[str, Any], popart: Mapping[str, Any],
              figures: tuple[tuple[str, str, str, str], ...], saves: str) -> str:
    better, worse, same = _weighed(ours, popart, figures)
    if not better and not worse:
        return f"{saves} nothing: the same {_listed(same)}"
    return _said(better, worse, same, saves)


def _share(part: int, whole: int) -> str:
    """`` (3.3%)`` of ``whole``; `` (<0.1%)`` when that would read 0.0%."""
    if whole <= 0:
        return ""
    percent = 100 * part / whole
    return f" ({percent:.1f}%)" if percent >= 0.05 else " (<0.1%)"


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def ops_without_rule_order(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """(op type, count), most frequent first, ties by name: the summary's and the
    report's order."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def ops_without_rule_text(counts: Mapping[str, int]) -> str:
    """``Foo ×3, Bar ×1`` (empty for none)."""
    return ", ".join(f"{name} ×{count}" for name, count in ops_without_rule_order(counts))


def ops_without_rule_line(counts: Mapping[str, int]) -> str:
    """The summary's line naming the ops no layout rule models (a user must never get a
    silent barrier)."""
    return ("ops without a layout rule (barriers, no exchange counted): "
            + ops_without_rule_text(counts))


def plain_table(summaries: Mapping[str, Mapping[str, Any]], bytes_per_tile: int) -> str:
    """The table as aligned text (first column left, numbers right)."""
    header, rows = summary_rows(summaries, bytes_per_tile)
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        parts = [cells[0].ljust(widths[0])]
        parts += [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)]) + "\n"


def print_summary(summaries: Mapping[str, Mapping[str, Any]], bytes_per_tile: int,
                  stream: TextIO, title: str) -> None:
    """Print the table to ``stream``: rich when it is a terminal, plain text otherwise.
    The title (which holds the model's file name) and the cells are escaped
    (``terminal_text``), and rich is given them as plain text, not markup."""
    title = printable(title)
    if not stream.isatty():
        stream.write(f"{title}\n{printable(plain_table(summaries, bytes_per_tile), True)}")
        stream.flush()
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    header, rows = summary_rows(summaries, bytes_per_tile)
    rows = [[escape(printable(cell)) for cell in row] for row in rows]
    table = Table(title=escape(title), title_justify="left")
    table.add_column(header[0], style="bold")
    for name in header[1:]:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*row)
    Console(file=stream).print(table)


def kib(value: int) -> str:
    """Bytes as KiB with one decimal (``12.5 KiB``); under 1 KiB as bytes (``96 B``)."""
    return f"{value / 1024:,.1f} KiB" if value >= 1024 else f"{value} B"


def _budget(value: int) -> str:
    return f"{value // 1024:,} KiB" if value % 1024 == 0 else kib(value)


def fullest_tile_line(fullest: Any, budget: int, tiles_per_ipu: int | None = None) -> str:
    """One line on the fullest tile (``cost.liveness.FullestTile``): its peak against
    the budget, the op at which it is first reached, what fills it then, and by how much
    it is over the budget when it is. With ``tiles_per_ipu`` (a machine of several IPUs,
    whose tiles the liveness numbers IPU after IPU) the tile is named on its IPU."""
    where = f" at op {fullest.op}" if fullest.op is not None else " (always-live bytes only)"
    if fullest.op is not None and fullest.graph:
        where += f" (graph {fullest.graph})"
    largest = ", ".join(f"{name} {kib(held)}" for name, held in fullest.largest)
    tile = f"tile {fullest.tile}" if tiles_per_ipu is None else \
        f"tile {fullest.tile % tiles_per_ipu} of IPU {fullest.tile // tiles_per_ipu}"
    line = (f"fullest {tile}: {kib(fullest.bytes)} of {_budget(budget)}{where}"
            + (f" (largest: {largest})" if largest else ""))
    if fullest.bytes > budget:
        over = fullest.bytes - budget
        line += f"; over the budget by {kib(over)} ({100 * over / budget:.1f}%)"
    return line


def ipu_holdings_lines(weights: list[tuple[str, int, int]], ipus: int) -> list[str]:
    """One line per IPU saying which layers it holds: ``weights`` are (name, IPU, bytes) of
    the model's weights in model order; a layer is a weight's name less its last part
    (``transformer.h.3.mlp.c_fc`` for ``….weight``). Each line names the first and last
    layer on the IPU, how many weights and their bytes."""
    lines = []
    for ipu in range(ipus):
        held = [(name, size) for name, at, size in weights if at == ipu]
        if not held:
            lines.append(f"IPU {ipu}: no weights")
            continue
        layers = list(dict.fromkeys(name.rpartition(".")[0] or name for name, _ in held))
        span = layers[0] if len(layers) == 1 else f"{layers[0]} … {layers[-1]}"
        total = sum(size for _, size in held)
        size = f"{total / 1e6:,.1f} MB" if total >= 100_000 else f"{total:,} B"
        lines.append(f"IPU {ipu}: {span} ({len(held)} weight{'s' if len(held) > 1 else ''}, "
                     f"{size})")
    return lines
