"""Pictures of unwinding solutions, in the style of poprithms' unwinding notes.

Each tensor is a grid of cells, one per element, coloured by mapping: equal origin ids
(``solution.layout``) get equal colours, so a reader sees at a glance which tensors share a
layout. Rank 0 is one cell, rank 1 one row; higher ranks have ``prod(shape[:-1])`` rows of
``shape[-1]`` cells, with a gap between blocks of the leading dimensions (wider where more
leading indices change). Grey arrows are the ops (input → output); each ValuedPair is a pair
of parallel lines, one colour per value, labelled ``value · agreeing/numel``.

Cell colours come from a 20-colour qualitative palette, in order of origin id; beyond 20 ids
the palette repeats with a hatching pattern (160 distinct styles in all, then the styles
repeat). Tensors with more than 256 elements, or whose grid would be wider or taller than 64
cells, are drawn as a one-row *heat strip* of their flattened origin ids on a continuous
scale (rank of the id among all ids of the solution), so the picture stays readable; equal
strips still mean equal layouts.

Columns follow depth: producer-less tensors (sinks, sources) first, each op output right of
its inputs. ValuedPairs also push tensors right where that keeps the order acyclic: a
producer-less tensor goes right of an op output it is tied to (a Source naming an op's target
layout, a sink copied out of a call), otherwise right of an earlier-created producer-less
partner (a Source tied to a sink, a subgraph's input to its callers). A link spanning several
columns passes through a waypoint in each, and a few ordering sweeps pull every tensor
towards its neighbours, so lines seldom cross tensors. Drawing is deterministic: the same
solution gives a byte-identical PNG.
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib import patheffects, style
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, Rectangle
from matplotlib.path import Path as MplPath

from popart_unwind.errors import SolverError
from popart_unwind.unwind.graph import TensorId, UnwindGraph
from popart_unwind.unwind.solution import Solution

__all__ = ["cell_colours", "draw", "grid_shape", "is_strip"]

MAX_CELLS = 256  # more elements than this: a heat strip
MAX_GRID_SIDE = 64  # a grid wider or taller than this: a heat strip
STRIP_SIZE = (16.0, 1.5)  # width, height of a heat strip, in cells
BLOCK_GAP = 0.3  # between leading-dim blocks, per changing leading index
LABEL_HEIGHT = 1.3  # two lines of tensor label above each grid
CHAR_WIDTH = 0.27  # an estimate of one label character's width, in cells
COLUMN_GAP = 4.5
ROW_GAP = 1.8
WAYPOINT = 0.6  # height a routed link takes in a column it passes through
MARGIN = 1.0
HEADER = 2.6
MIN_WIDTH = 30.0  # room for the title and the legend
INCH_PER_CELL = 0.2
MAX_INCHES = 40.0  # bounds the image of a huge graph (draw a subset with ``tensors``)
DPI = 130
SWEEPS = 4
LEGEND_COLUMNS = 4

_TAB20 = matplotlib.colormaps["tab20"].colors
PALETTE = np.array(_TAB20[0::2] + _TAB20[1::2])  # strong colours first, then light
HATCHES = ("", "////", "\\\\\\\\", "xxxx", "....", "oo", "----", "||||")
HEAT = matplotlib.colormaps["viridis"]
PAIR_COLOURS = (
    "crimson",
    "royalblue",
    "darkorange",
    "darkviolet",
    "seagreen",
    "saddlebrown",
    "deeppink",
    "teal",
)
EDGE_COLOUR = "0.55"
RC = {"font.size": 7.0, "hatch.linewidth": 0.6, "hatch.color": "black"}


# ----- shapes and colours ----------------------------------------------------------------
def grid_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, columns) of the cell grid for a tensor of ``shape``."""
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return 1, shape[0]
    return math.prod(shape[:-1]), shape[-1]


def is_strip(shape: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` is drawn as a heat strip rather than as cells."""
    return math.prod(shape) > MAX_CELLS or max(grid_shape(shape)) > MAX_GRID_SIDE


@dataclass(frozen=True)
class _Styles:
    """The origin ids of one solution, sorted: an id's rank picks its style, so a tensor's
    colours do not depend on which other tensors are drawn."""

    cell_ids: np.ndarray  # ids that appear in cell-drawn tensors
    all_ids: np.ndarray

    @classmethod
    def of(cls, solution: Solution) -> _Styles:
        layouts = solution.layouts().values()
        none = np.empty(0, np.int64)
        cells = [none, *(a.ravel() for a in layouts if not is_strip(a.shape))]
        every = [none, *(a.ravel() for a in layouts)]
        return cls(np.unique(np.concatenate(cells)), np.unique(np.concatenate(every)))

    def colours(self, layout: np.ndarray) -> np.ndarray:
        """RGBA per element, shape ``layout.shape + (4,)``."""
        if is_strip(layout.shape):
            ranks = np.searchsorted(self.all_ids, layout)
            rgba = HEAT(ranks / max(len(self.all_ids) - 1, 1))
        else:
            ranks = np.searchsorted(self.cell_ids, layout)
            rgba = np.concatenate(
                [PALETTE[ranks % len(PALETTE)], np.ones((*ranks.shape, 1))], axis=-1
            )
        return rgba.reshape(*layout.shape, 4)

    def hatches(self, layout: np.ndarray) -> list[str]:
        """Hatch pattern per element of a cell-drawn tensor, in row-major order."""
        ranks = np.searchsorted(self.cell_ids, layout.ravel())
        return [HATCHES[r] for r in (ranks // len(PALETTE)) % len(HATCHES)]


def cell_colours(solution: Solution, tensor: TensorId) -> np.ndarray:
    """The RGBA colour of each cell of ``tensor``, shape ``grid_shape + (4,)``, as drawn.

    Tensors with equal layouts get identical arrays; it is the test hook for the colouring.
    """
    _known(solution.graph, [tensor])
    layout = solution.layout(tensor)
    return _Styles.of(solution).colours(layout).reshape(*grid_shape(layout.shape), 4)


def _known(graph: UnwindGraph, tensors: Iterable[object]) -> list[TensorId]:
    """``tensors`` in creation order without repeats, after checking each is in ``graph``."""
    known = set(graph.tensors())
    chosen = []
    for tensor in tensors:
        if not isinstance(tensor, TensorId) or tensor not in known:
            raise SolverError(
                f"draw: {tensor!r} is not a tensor of this graph (its tensors are #0 to "
                f"#{len(graph) - 1})"
            )
        chosen.append(tensor)
    return sorted(set(chosen))


# ----- placement ---------------------------------------------------------------------------
@dataclass(eq=False)
class _Box:
    """A tensor's grid with its label above, or a waypoint that routes a long link through
    a column; ``key`` breaks ties when a column is ordered."""

    key: tuple
    column: int
    width: float
    height: float
    tensor: TensorId | None = None
    footprint: float = 0.0  # the label's estimated width
    x: float = 0.0
    y: float = 0.0

    @property
    def label(self) -> float:
        return LABEL_HEIGHT if self.tensor is not None else 0.0

    @property
    def span(self) -> float:
        return self.label + self.height

    @property
    def centre(self) -> np.ndarray:
        return np.array([self.x + self.width / 2, self.y + self.height / 2])

    def rect(self) -> tuple[float, float, float, float]:
        """(left, top, right, bottom) around grid and label."""
        half = max(self.width, self.footprint) / 2
        cx = self.x + self.width / 2
        return cx - half, self.y - self.label, cx + half, self.y + self.height


@dataclass(frozen=True)
class _Link:
    """An op edge (``value`` None) or a ValuedPair, through ``boxes`` from left to right."""

    boxes: tuple[_Box, ...]
    value: float | None


@dataclass(frozen=True)
class _Layout:
    tensors: dict[TensorId, _Box]
    links: list[_Link]
    width: float
    height: float


def _pair_edge(graph: UnwindGraph, a: TensorId, b: TensorId) -> tuple[TensorId, TensorId] | None:
    """Which way a ValuedPair pushes columns: a producer-less tensor goes right of what it
    is tied to (of the later-created one, if both are producer-less)."""
    free_a, free_b = not graph.node(a).inputs, not graph.node(b).inputs
    if free_a and free_b:
        return (min(a, b), max(a, b)) if a != b else None
    if free_b:
        return a, b
    if free_a:
        return b, a
    return None


def _reaches(after: dict[TensorId, list[TensorId]], start: TensorId, goal: TensorId) -> bool:
    seen, todo = {start}, [start]
    while todo:
        tensor = todo.pop()
        if tensor == goal:
            return True
        fresh = [t for t in after[tensor] if t not in seen]
        seen.update(fresh)
        todo.extend(fresh)
    return False


def _longest_paths(after: dict[TensorId, list[TensorId]]) -> dict[TensorId, int]:
    """Edges from each tensor to the tensors after it (acyclic) -> length of the longest
    path into each tensor."""
    waiting = dict.fromkeys(after, 0)
    for nexts in after.values():
        for tensor in nexts:
            waiting[tensor] += 1
    depth = dict.fromkeys(after, 0)
    ready = [t for t, count in waiting.items() if count == 0]
    while ready:
        tensor = ready.pop()
        for later in after[tensor]:
            depth[later] = max(depth[later], depth[tensor] + 1)
            waiting[later] -= 1
            if waiting[later] == 0:
                ready.append(later)
    return depth


def _columns(graph: UnwindGraph, drawn: list[TensorId]) -> dict[TensorId, int]:
    """Column of each drawn tensor: its depth along ops and pair edges, empty columns removed.

    Pair edges from op outputs come first and *anchor* their producer-less partners; edges
    between producer-less tensors are then added only into unanchored ones, so the sinks
    copied out of one op share a column.
    """
    after = {t: graph.consumers(t) for t in graph.tensors()}
    edges = [e for p in graph.valued_pairs() if (e := _pair_edge(graph, p.a, p.b)) is not None]
    anchored = {
        late for early, late in edges if graph.node(early).inputs and _add_edge(after, early, late)
    }
    for early, late in edges:
        if not graph.node(early).inputs and late not in anchored:
            _add_edge(after, early, late)
    depth = _longest_paths(after)
    used = sorted({depth[t] for t in drawn})
    return {t: used.index(depth[t]) for t in drawn}


def _add_edge(after: dict[TensorId, list[TensorId]], early: TensorId, late: TensorId) -> bool:
    """Add ``early -> late`` unless it would close a cycle; whether it was added."""
    if _reaches(after, late, early):
        return False
    after[early].append(late)
    return True


def _row_offsets(shape: tuple[int, ...]) -> np.ndarray:
    """y offset of each grid row: the row index plus the gaps between leading-dim blocks."""
    rows, _ = grid_shape(shape)
    if len(shape) < 3 or rows == 0:
        return np.arange(rows, dtype=float)
    blocks = np.arange(rows) // shape[-2]
    index = np.stack(np.unravel_index(blocks, shape[:-2]), axis=1)
    changed = np.zeros(rows)
    changed[1:] = (index[1:] != index[:-1]).sum(axis=1)
    return np.arange(rows) + BLOCK_GAP * np.cumsum(changed)


def _label(graph: UnwindGraph, tensor: TensorId) -> tuple[str, str]:
    """Two label lines: the tensor's id, then its kind (a view's ops) and shape."""
    node = graph.node(tensor)
    kind = node.kind
    if kind == "view":
        kind = "/".join(op.type for op in node.chain.ops) or "identity"
    shape = graph.shape(tensor)
    dims = "×".join(str(d) for d in shape) if shape else "scalar"
    strip = " (heat strip)" if is_strip(shape) else ""
    return repr(tensor), f"{kind} {dims}{strip}"


def _tensor_box(graph: UnwindGraph, tensor: TensorId, column: int) -> _Box:
    shape = graph.shape(tensor)
    if is_strip(shape):
        width, height = STRIP_SIZE
    else:
        rows, cols = grid_shape(shape)
        width = float(max(cols, 1))
        height = float(_row_offsets(shape)[-1] + 1) if rows else 1.0
    chars = max(len(line) for line in _label(graph, tensor))
    return _Box((0, tensor.index), column, width, height, tensor, chars * CHAR_WIDTH)


def _route(a: _Box, b: _Box, value: float | None, number: int) -> _Link:
    """A link from ``a`` to ``b`` with a waypoint in each column between them."""
    if a.column > b.column:
        a, b = b, a
    way = [_Box((1, number), c, 0.0, WAYPOINT) for c in range(a.column + 1, b.column)]
    return _Link((a, *way, b), value)


def _place(graph: UnwindGraph, drawn: list[TensorId], pairs: dict) -> _Layout:
    """Columns by depth, links routed through waypoints, and each column ordered by a few
    sweeps that move every box towards its neighbours in other columns."""
    column = _columns(graph, drawn)
    tensors = {t: _tensor_box(graph, t, column[t]) for t in drawn}
    ends = [
        (i, t, None) for t in drawn for i in dict.fromkeys(graph.node(t).inputs) if i in tensors
    ]
    ends += [(a, b, value) for (a, b), value in pairs.items()]
    links = [_route(tensors[a], tensors[b], value, k) for k, (a, b, value) in enumerate(ends)]
    stacks: list[list[_Box]] = [[] for _ in range(max(column.values(), default=-1) + 1)]
    for box in [*tensors.values(), *(w for link in links for w in link.boxes[1:-1])]:
        stacks[box.column].append(box)
    width = _set_x(stacks)
    height = max((_stack_height(stack) for stack in stacks), default=1.0)
    near = _neighbours(links)
    for stack in stacks:
        _stack(stack, height)
    for sweep in range(SWEEPS):
        for stack in stacks if sweep % 2 == 0 else stacks[::-1]:
            stack.sort(key=lambda box: (_barycentre(box, near), box.key))
            _stack(stack, height)
    return _Layout(tensors, links, width, height)


def _set_x(stacks: list[list[_Box]]) -> float:
    """Centre each box in its column; returns the total width."""
    x = 0.0
    for stack in stacks:
        width = max(max(box.width, box.footprint) for box in stack)
        for box in stack:
            box.x = x + (width - box.width) / 2
        x += width + COLUMN_GAP
    return max(x - COLUMN_GAP, 1.0)


def _stack_height(stack: list[_Box]) -> float:
    return sum(box.span for box in stack) + ROW_GAP * (len(stack) - 1)


def _stack(stack: list[_Box], height: float) -> None:
    """Set the y of a column's boxes, top to bottom, centred in the drawing's height."""
    y = (height - _stack_height(stack)) / 2
    for box in stack:
        box.y = y + box.label
        y += box.span + ROW_GAP


def _neighbours(links: list[_Link]) -> dict[_Box, list[_Box]]:
    near: dict[_Box, list[_Box]] = {}
    for link in links:
        for a, b in itertools.pairwise(link.boxes):
            near.setdefault(a, []).append(b)
            near.setdefault(b, []).append(a)
    return near


def _barycentre(box: _Box, near: dict[_Box, list[_Box]]) -> float:
    """Mean height of a box's neighbours in other columns (its own if it has none)."""
    ys = [n.centre[1] for n in near.get(box, []) if n.column != box.column]
    return sum(ys) / len(ys) if ys else float(box.centre[1])


# ----- drawing -------------------------------------------------------------------------------
def _draw_tensor(ax: Axes, graph: UnwindGraph, box: _Box, layout: np.ndarray,
                 styles: _Styles) -> None:
    colours = styles.colours(layout)
    if is_strip(layout.shape):
        ax.imshow(
            colours.reshape(1, -1, 4),
            extent=(box.x, box.x + box.width, box.y + box.height, box.y),
            interpolation="nearest",
            aspect="auto",
            zorder=3,
        )
    else:
        _draw_cells(ax, box, layout, colours.reshape(-1, 4), styles.hatches(layout))
    ax.add_patch(
        Rectangle(
            (box.x, box.y),
            box.width,
            box.height,
            fill=False,
            lw=0.8,
            edgecolor="0.25",
            linestyle="-" if layout.size else ":",
            zorder=4,
        )
    )
    name, info = _label(graph, box.tensor)
    cx = box.centre[0]
    ax.text(cx, box.y - 0.75, name, ha="center", va="bottom", weight="bold", zorder=5)
    ax.text(cx, box.y - 0.15, info, ha="center", va="bottom", color="0.3", fontsize=6, zorder=5)


def _draw_cells(ax: Axes, box: _Box, layout: np.ndarray, colours: np.ndarray, hatches: list[str]):
    """One patch per element, grouped by hatch (a collection has a single hatch)."""
    _, cols = grid_shape(layout.shape)
    offsets = _row_offsets(layout.shape)
    groups: dict[str, list[int]] = {}
    for flat, hatch in enumerate(hatches):
        groups.setdefault(hatch, []).append(flat)
    for hatch, members in groups.items():
        cells = [Rectangle((box.x + f % cols, box.y + offsets[f // cols]), 1, 1) for f in members]
        ax.add_collection(
            PatchCollection(
                cells,
                facecolors=colours[members],
                edgecolors="white",
                linewidths=0.6,
                hatch=hatch or None,
                zorder=3,
            )
        )


def _exit(start: np.ndarray, step: np.ndarray, rect) -> np.ndarray:
    """Where the ray ``start + s * step`` (s >= 0) leaves ``rect``, ``start`` inside it."""
    left, top, right, bottom = rect
    limits = []
    for axis, (low, high) in enumerate(((left, right), (top, bottom))):
        if step[axis] > 0:
            limits.append((high - start[axis]) / step[axis])
        elif step[axis] < 0:
            limits.append((low - start[axis]) / step[axis])
    return start + min(limits) * step


def _leave(box: _Box, toward: np.ndarray, pad: float) -> np.ndarray:
    """A point just outside ``box`` (grid, and label above it) on the line from its centre
    toward ``toward``; a waypoint is passed through at its centre."""
    if box.tensor is None:
        return box.centre
    step = toward - box.centre
    grid = (box.x, box.y, box.x + box.width, box.y + box.height)
    point = _exit(box.centre, step, grid)
    left, top, right, _ = box.rect()
    if step[1] < 0 and point[1] <= box.y and left <= point[0] <= right:
        point = _exit(point, step, (left, top, right, box.y))
    return point + pad * step / np.linalg.norm(step)


def _polyline(link: _Link, pad: float) -> np.ndarray:
    """The link's points: out of its first box, through the waypoints, into its last."""
    centres = [box.centre for box in link.boxes]
    first = _leave(link.boxes[0], centres[1], pad)
    last = _leave(link.boxes[-1], centres[-2], pad)
    return np.array([first, *centres[1:-1], last])


def _draw_edge(ax: Axes, link: _Link) -> None:
    ax.add_patch(
        FancyArrowPatch(
            path=MplPath(_polyline(link, 0.3)),
            arrowstyle="-|>",
            mutation_scale=8,
            color=EDGE_COLOUR,
            lw=0.7,
            zorder=1,
        )
    )


def _pair_effects(colour: str) -> list:
    """A white line with a coloured outline reads as two parallel lines, even round bends."""
    return [patheffects.Stroke(linewidth=3.4, foreground=colour), patheffects.Normal()]


def _draw_pair(ax: Axes, link: _Link, colour: str, solution: Solution) -> None:
    """Two parallel lines, labelled with the value and the number of agreeing indices."""
    points = _polyline(link, 0.15)
    ax.plot(
        points[:, 0],
        points[:, 1],
        color="white",
        lw=1.2,
        zorder=2,
        solid_capstyle="butt",
        solid_joinstyle="round",
        path_effects=_pair_effects(colour),
    )
    a, b = (solution.layout(box.tensor) for box in (link.boxes[0], link.boxes[-1]))
    middle = (len(points) - 2) // 2
    x, y = (points[middle] + points[middle + 1]) / 2
    ax.text(
        x,
        y,
        f"{link.value:g} · {np.count_nonzero(a == b)}/{a.size}",
        ha="center",
        va="center",
        color=colour,
        fontsize=6.5,
        zorder=6,
        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": colour, "lw": 0.5},
    )


def _pairs(graph: UnwindGraph, drawn: set[TensorId]) -> dict[tuple[TensorId, TensorId], float]:
    """ValuedPairs between drawn tensors, repeats (either way round) added up."""
    total: dict[tuple[TensorId, TensorId], float] = {}
    for pair in graph.valued_pairs():
        if pair.a in drawn and pair.b in drawn and pair.a != pair.b:
            key = (min(pair.a, pair.b), max(pair.a, pair.b))
            total[key] = total.get(key, 0.0) + pair.value
    return total


def _pair_colour(value: float, values: list[float]) -> str:
    return PAIR_COLOURS[values.index(value) % len(PAIR_COLOURS)]


def _legend(fig: Figure, values: list[float], strips: bool) -> None:
    handles = [Line2D([], [], color=EDGE_COLOUR, lw=0.9, label="op: input → output")]
    for value in values:
        effects = _pair_effects(_pair_colour(value, values))
        handles.append(
            Line2D(
                [],
                [],
                color="white",
                lw=1.2,
                path_effects=effects,
                label=f"ValuedPair {value:g} · agreeing/numel",
            )
        )
    if strips:
        handles.append(
            Line2D([], [], color=HEAT(0.6), lw=5, label="heat strip: origin ids, flattened")
        )
    fig.legend(
        handles=handles,
        loc="lower center",
        ncols=min(len(handles), LEGEND_COLUMNS),
        frameon=False,
        fontsize=7,
        handlelength=2.4,
    )


def _header(fig: Figure, solution: Solution, title: str | None) -> None:
    score, bound = solution.score(), solution.upper_bound()
    share = f" ({100 * score / bound:.0f}%)" if bound else ""
    algo = f" ({solution.algo})" if solution.algo else ""
    fig.text(
        0.5,
        1 - 0.12 / fig.get_figheight(),
        title or f"Unwinding solution{algo}",
        ha="center",
        va="top",
        fontsize=10,
        weight="bold",
    )
    fig.text(
        0.5,
        1 - 0.36 / fig.get_figheight(),
        f"score {score:g} of upper bound {bound:g}{share}   ·   cell colour and hatching "
        "= mapping (same look ⇔ same origin)",
        ha="center",
        va="top",
        fontsize=7.5,
    )


def _figure(solution: Solution, drawn: list[TensorId], title: str | None) -> Figure:
    graph = solution.graph
    pairs = _pairs(graph, set(drawn))
    layout = _place(graph, drawn, pairs)
    values = sorted(set(pairs.values()), reverse=True)
    strips = any(is_strip(graph.shape(t)) for t in drawn)
    footer = 1.0 + 1.1 * math.ceil((1 + len(values) + strips) / LEGEND_COLUMNS)
    total_w = max(layout.width + 2 * MARGIN, MIN_WIDTH)
    total_h = HEADER + LABEL_HEIGHT + layout.height + footer
    inch = min(INCH_PER_CELL, MAX_INCHES / max(total_w, total_h))
    fig = Figure(figsize=(total_w * inch, total_h * inch), dpi=DPI, facecolor="white")
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    left = (total_w - layout.width) / 2
    ax.set_xlim(-left, total_w - left)
    ax.set_ylim(layout.height + footer, -(HEADER + LABEL_HEIGHT))
    ax.set_aspect("equal")
    ax.axis("off")
    for link in layout.links:
        if link.value is None:
            _draw_edge(ax, link)
        else:
            _draw_pair(ax, link, _pair_colour(link.value, values), solution)
    styles = _Styles.of(solution)
    for tensor, box in layout.tensors.items():
        _draw_tensor(ax, graph, box, solution.layout(tensor), styles)
    _header(fig, solution, title)
    _legend(fig, values, strips)
    return fig


# ----- the entry point -------------------------------------------------------------------
def draw(
    solution: Solution,
    path: str | os.PathLike[str],
    tensors: Iterable[TensorId] | None = None,
    title: str | None = None,
) -> Path:
    """Write a PNG of ``solution`` (all tensors, or only ``tensors``) to ``path``.

    Tensors of more than 256 elements are drawn as heat strips (see the module docstring).
    The file is replaced atomically: it is either the complete picture or untouched.
    Raises SolverError for a tensor that is not in the solution's graph.
    """
    graph = solution.graph
    drawn = _known(graph, graph.tensors() if tensors is None else tensors)
    target = Path(path)
    with style.context("default"), matplotlib.rc_context(RC):
        fig = _figure(solution, drawn, title)
        _write_atomically(fig, target)
    return target


def _write_atomically(fig: Figure, target: Path) -> None:
    """Render into a temporary file beside ``target`` and rename it over ``target``."""
    handle, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            fig.savefig(stream, format="png", dpi=DPI, metadata={"Software": None})
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
