"""The report's pictures, rendered with matplotlib's Agg backend into PNG bytes (each
tensor's layout is drawn by the page itself: ``layout_data.py``).

- per-tile bars (resident memory, received exchange), one row per plan on one scale;
- per-tile memory on a grid of tiles (always-live and peak), one column per plan, one
  colour scale for all, the budget as the top of the scale when a tile exceeds it.

Rendering is deterministic (no timestamps in the PNG), so one plan gives one picture.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import matplotlib
import numpy as np
from matplotlib import style
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from popart_unwind.report.summary import PLAN_TITLES

DPI = 100
RC = {"font.size": 8.0, "axes.titlesize": 8.5, "axes.labelsize": 8.0}
PLAN_COLOURS = {"ours": "#1f77b4", "popart": "#d62728", "linear": "#7f7f7f"}


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _figure(width: float, height: float) -> Figure:
    """A figure whose axes are placed by hand (a layout engine costs more than drawing)."""
    fig = Figure(figsize=(width, height), dpi=DPI, facecolor="white")
    FigureCanvasAgg(fig)
    return fig


def _axes(fig: Figure, left: float, bottom: float, width: float, height: float) -> Axes:
    """Axes at a rectangle given in inches from the figure's lower left corner."""
    fig_width, fig_height = fig.get_size_inches()
    ax = fig.add_axes((left / fig_width, bottom / fig_height, width / fig_width,
                       height / fig_height))
    ax.xaxis.set_major_locator(MaxNLocator(5, integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(4, integer=True))
    return ax


def per_tile_bars(title: str, values: Mapping[str, np.ndarray], unit: str,
                  budget: int | None = None) -> bytes:
    """One row of per-tile bars per plan, on a shared scale (``budget``: a dashed line
    where the tile memory ends, drawn when the bars come within a quarter of it)."""
    row, gap = 0.8, 0.45
    with style.context("default"), matplotlib.rc_context(RC):
        fig = _figure(10.0, len(values) * (row + gap) + 0.75)
        axes = [_axes(fig, 0.8, 0.5 + (len(values) - 1 - i) * (row + gap), 9.0, row)
                for i in range(len(values))]
        peak = max((float(np.max(v)) for v in values.values() if np.size(v)), default=0.0)
        for ax, (plan, per_tile) in zip(axes, values.items(), strict=True):
            per_tile = np.asarray(per_tile, dtype=float)
            ax.stairs(per_tile, np.arange(per_tile.size + 1), fill=True,
                      color=PLAN_COLOURS.get(plan, "#2ca02c"))
            if budget and peak > budget / 4:
                ax.axhline(budget, color="black", linestyle="--", linewidth=0.8)
            total, top = per_tile.sum(), per_tile.max() if per_tile.size else 0.0
            ax.set_title(f"{PLAN_TITLES.get(plan, plan)}: total {total:,.0f} {unit}, "
                         f"busiest tile {top:,.0f} {unit}", loc="left")
            ax.set_ylabel(unit)
            ax.set_xlim(0, max(per_tile.size, 1))
            ax.set_ylim(0, max(peak * 1.05, 1.0))
        for ax in axes[:-1]:
            ax.tick_params(labelbottom=False)
        axes[-1].set_xlabel("tile")
        fig.suptitle(title, fontsize=9, fontweight="bold", y=1 - 0.08 / fig.get_figheight())
        return _png(fig)


def tile_grid(num_tiles: int) -> tuple[int, int]:
    """(rows, columns) to draw ``num_tiles`` tiles as a grid: the exact factorization
    closest to 3:2 landscape when one is no flatter than 4:1 (1472 tiles: 32 × 46), else
    a near-square grid with the last row partly empty. Tile t sits at (t // columns,
    t % columns): a picture of tile ids, not of the IPU's physical floor plan."""
    best: tuple[float, int, int] | None = None
    for columns in range(1, num_tiles + 1):
        if num_tiles % columns:
            continue
        rows = num_tiles // columns
        ratio = columns / rows
        if 1 / 4 <= ratio <= 4:
            score = abs(np.log(ratio / 1.5))
            if best is None or score < best[0]:
                best = (score, rows, columns)
    if best is not None:
        return best[1], best[2]
    columns = int(np.ceil(np.sqrt(num_tiles * 1.5)))
    return -(-num_tiles // columns), columns


def _on_grid(per_tile: np.ndarray, rows: int, columns: int) -> np.ma.MaskedArray:
    cells = np.full(rows * columns, np.nan)
    cells[:per_tile.size] = per_tile
    return np.ma.masked_invalid(cells.reshape(rows, columns))


def tile_memory_heatmap(title: str, panels: Mapping[str, Mapping[str, np.ndarray]],
                        budget: int, marked: Mapping[str, int] | None = None) -> bytes:
    """Per-tile bytes drawn on a grid of tiles: one column per plan, one row per figure
    (``panels``: plan -> figure name -> bytes per tile), all on one colour scale from 0 to
    the most any tile holds (or the budget, if lower: tiles over it are red); ``marked``:
    plan -> a tile to ring (the fullest)."""
    plans = list(panels)
    figures = list(dict.fromkeys(f for per_plan in panels.values() for f in per_plan))
    sizes = [np.asarray(v).size for per_plan in panels.values() for v in per_plan.values()]
    num_tiles = max(sizes, default=1) or 1
    rows, columns = tile_grid(num_tiles)
    most = max((float(np.max(v)) for per_plan in panels.values() for v in per_plan.values()
                if np.size(v)), default=0.0)
    top = max(min(most, float(budget)) if budget else most, 1.0)
    over = bool(budget) and most > budget
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white", over="#d62728")
    panel_width = 4.2
    panel_height = max(1.2, min(3.2, panel_width * rows / columns))
    left, gap, vgap, bottom = 0.6, 0.4, 0.55, 0.45
    with style.context("default"), matplotlib.rc_context(RC):
        fig = _figure(left + len(plans) * (panel_width + gap) + 1.3,
                      bottom + len(figures) * (panel_height + vgap) + 0.3)
        image = None
        for j, plan in enumerate(plans):
            for i, figure in enumerate(figures):
                ax = _axes(fig, left + j * (panel_width + gap),
                           bottom + (len(figures) - 1 - i) * (panel_height + vgap),
                           panel_width, panel_height)
                values = np.asarray(panels[plan].get(figure, np.zeros(0)), dtype=float)
                image = ax.imshow(_on_grid(values, rows, columns), cmap=cmap, vmin=0.0,
                                  vmax=top, aspect="auto", origin="upper",
                                  interpolation="nearest")
                tile = (marked or {}).get(plan)
                if tile is not None and figure == figures[-1]:
                    ax.plot([tile % columns], [tile // columns], marker="o", markersize=9,
                            markerfacecolor="none", markeredgecolor="#ff7f0e",
                            markeredgewidth=1.5, clip_on=False)
                busiest = float(values.max()) if values.size else 0.0
                share = f", {100 * busiest / budget:.1f}% of the budget" if budget else ""
                ax.set_title(f"{PLAN_TITLES.get(plan, plan)}: {figure} "
                             f"(fullest {busiest:,.0f} B{share})", loc="left")
                ax.set_xticks([])
                ax.set_yticks([])
                ax.set_xlabel(f"{rows} rows × {columns} tiles, tile t at row t // "
                              f"{columns}", fontsize=7)
        if image is not None:
            bar = _axes(fig, left + len(plans) * (panel_width + gap), bottom, 0.15,
                        len(figures) * (panel_height + vgap) - vgap)
            label = "bytes on the tile" + (f" (red: over the {budget:,} B budget)"
                                           if over else f" (budget {budget:,} B)")
            fig.colorbar(image, cax=bar, label=label, extend="max" if over else "neither")
        fig.suptitle(title, fontsize=9, fontweight="bold",
                     y=1 - 0.08 / fig.get_figheight())
        return _png(fig)
