"""Liveness per tile: the most bytes each tile holds at once over the schedule.

The cost walk (``cost/walk.py``, through ``cost/memory.py``) tells a
:class:`LivenessTracker` what each op does to memory, in schedule order, one graph at a
time (callees first):

- a producer-less tensor (weight, optimizer state, constant, input) is live for the whole
  program: its bytes go to ``always_live``;
- an op's new result is a buffer, live from the op that produces it to its last reader
  (a graph output to the end of its graph);
- a view's result (an op whose layout rule aliases its outputs) holds no memory of its own:
  it keeps the buffers it views live as long as it is;
- at each op, the live buffers plus, for an op that runs subgraphs, the most its callees
  ever hold at once, are one step; each tile's peak is the most over the steps.

The fullest tile (the highest peak of all) is found as the walk goes: at each step of a
graph no op calls, if some tile now holds more than any tile has before, the step is kept
(its op, the tile, a shallow copy of what is live). That costs one argmax per step and a
copy of the live set each time the record rises; the breakdown is of that one moment.

Each tile's peak is taken on its own (the busiest moment of one tile need not be another's),
so adding a callee's per-tile peak to the caller's live bytes at the call site is exact per
tile. A view keeps the whole of each buffer it views live, even when it views only a slice
(Poplar frees a variable's elements separately): an over-estimate there. A result computed
in place (the cost walk decides: ``cost/walk.py``) is held as a view of the input it
overwrites. docs/ipu-model.md says what else the figure leaves out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.ir.tensor import qualified_id

#: (graph id, tensor id), as the walk keys tensors.
Key = tuple[str, str]


#: How many of the fullest tile's largest holdings are named.
FULLEST_TILE_TOP = 5


@dataclasses.dataclass(frozen=True)
class FullestTile:
    """The tile whose liveness peak is the program's highest, and what fills it then.

    ``op`` is the op at whose step the peak is first reached (None when no op runs: the
    peak is the always-live bytes alone); ``largest`` names the biggest holdings on the
    tile at that step, (name, bytes on this tile), most first: tensors as
    ``graph::tensor`` (the main graph's without prefix), and a subgraph the op runs as
    ``<graph> (subgraph peak)`` — its own peak on this tile, not broken down further."""

    tile: int
    bytes: int
    always_live_bytes: int
    op: str | None
    graph: str
    largest: tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class TileLiveness:
    """Per tile: bytes live for the whole program, and the most bytes live at once."""

    always_live: np.ndarray
    peak: np.ndarray
    fullest: FullestTile | None = None
    #: The least busiest-tile peak any placement of the same buffers could have: the most
    #: bytes live at once on all tiles together (always-live bytes included), spread
    #: evenly. A floor for layouts, not a reachable figure (grains, plans and the layouts
    #: Poplar gives computed tensors are ignored).
    peak_floor: int = 0

    @property
    def transient(self) -> np.ndarray:
        """The peak above the always-live bytes (activations and temporaries)."""
        return self.peak - self.always_live


class LivenessTracker:
    """Per-tile byte vectors added as buffers become live and subtracted as they die."""

    def __init__(self, num_tiles: int) -> None:
        self.num_tiles = num_tiles
        self.always_live = np.zeros(num_tiles, np.int64)
        self.graph_peaks: dict[str, np.ndarray] = {}
        self._graph: str | None = None
        self._live = np.zeros(num_tiles, np.int64)
        self._peak = np.zeros(num_tiles, np.int64)
        # Per graph, the most bytes its own buffers and its callees' hold at once on all
        # tiles together (a callee's most at its call site: all within one moment).
        self.graph_totals: dict[str, int] = {}
        self._total = 0
        self._buffers_of: dict[Key, tuple[Key, ...]] = {}  # tensor -> the buffers it holds
        self._references: dict[Key, int] = {}  # buffer -> live tensors holding it
        self._bytes: dict[Key, np.ndarray] = {}  # buffer -> bytes per tile
        self._on_always_live: set[Key] = set()  # views holding always-live memory too
        # The fullest moment so far (root graphs only, see ``watch``): the total of its
        # tile, and what was live then (references to the arrays, which are never changed
        # in place, so a shallow copy of the dict is the snapshot).
        self._roots: frozenset[str] = frozenset()
        self._always_live_of: dict[Key, np.ndarray] = {}
        self._best = -1
        self._best_moment: tuple[int, str, str, dict[Key, np.ndarray],
                                 dict[str, np.ndarray]] | None = None

    # -- what the walk says ---------------------------------------------------------------
    def add_always_live(self, bytes_per_tile: np.ndarray, tensor: Key | None = None) -> None:
        """A producer-less tensor's bytes: live for the whole program. To find the fullest
        moment the walk needs them all before the first step of a root graph."""
        array = self._checked(bytes_per_tile)
        self.always_live += array
        if tensor is not None:
            self._always_live_of[tensor] = array

    def watch(self, roots: Iterable[str]) -> None:
        """The graphs no op calls: their steps are the program's moments, where the
        fullest tile is looked for (a callee's steps count at its call sites)."""
        self._roots = frozenset(roots)

    def begin_graph(self, graph_id: str) -> None:
        if self._graph is not None:
            raise PlanError(f"liveness: graph {graph_id!r} begins inside graph "
                            f"{self._graph!r} (graphs are walked one at a time)")
        self._graph = graph_id
        self._live[:] = 0
        self._peak[:] = 0
        self._total = 0
        self._buffers_of.clear()
        self._references.clear()
        self._bytes.clear()
        self._on_always_live.clear()

    def create(self, tensor: Key, bytes_per_tile: np.ndarray) -> None:
        """``tensor`` is new memory, live from now."""
        self._bytes[tensor] = self._checked(bytes_per_tile)
        self._references[tensor] = 1
        self._buffers_of[tensor] = (tensor,)
        self._live += self._bytes[tensor]

    def view(self, tensor: Key, viewed: Iterable[Key]) -> None:
        """``tensor`` shares the memory of ``viewed`` (a view; producer-less tensors hold
        always-live memory, which no view extends)."""
        viewed = list(viewed)
        buffers = tuple(dict.fromkeys(b for v in viewed for b in self._buffers_of.get(v, ())))
        self._buffers_of[tensor] = buffers
        if any(v not in self._buffers_of or v in self._on_always_live for v in viewed):
            self._on_always_live.add(tensor)
        for buffer in buffers:
            self._references[buffer] += 1

    def overwritable(self, tensor: Key) -> bool:
        """Whether an op reading ``tensor`` last may overwrite it: it holds memory of its
        own, none of it always live (a view of a weight, or of a weight's in-place update,
        is the weight's memory), and no other live tensor holds any of it (no live view of
        it, nor it of a live tensor)."""
        buffers = self._buffers_of.get(tensor, ())
        return bool(buffers) and tensor not in self._on_always_live and all(
            self._references.get(buffer, 0) == 1 for buffer in buffers)

    def step(self, callees: Iterable[str] = (), op: str = "") -> None:
        """One op (named ``op``) runs: what is live now, plus the most any of its callees
        holds at once (If runs one branch: the per-tile most over them), counts towards
        each tile's peak."""
        now = self._live
        called = {graph_id: self.callee_peak(graph_id) for graph_id in callees}
        self._total = max(self._total, int(now.sum()) + max(
            (self.graph_totals[graph_id] for graph_id in called), default=0))
        if called:
            now = now + np.maximum.reduce(list(called.values()))
        np.maximum(self._peak, now, out=self._peak)
        if self._graph in self._roots:
            self._consider(now, op, called)

    def _consider(self, now: np.ndarray, op: str, called: dict[str, np.ndarray]) -> None:
        """Keep this step if one of its tiles holds more than any tile has before (the
        first such step and the lowest such tile win ties: deterministic)."""
        total = now + self.always_live
        tile = int(np.argmax(total)) if total.size else 0
        if total.size and int(total[tile]) > self._best:
            self._best = int(total[tile])
            assert self._graph is not None
            self._best_moment = (tile, op, self._graph, dict(self._bytes), called)

    def release(self, tensor: Key) -> None:
        """``tensor``'s last reader has run: its buffers die when no live view holds them."""
        self._on_always_live.discard(tensor)
        for buffer in self._buffers_of.pop(tensor, ()):
            self._references[buffer] -= 1
            if self._references[buffer] == 0:
                del self._references[buffer]
                self._live -= self._bytes.pop(buffer)

    def end_graph(self) -> None:
        """The graph's last op has run (its outputs were live to here)."""
        if self._graph is None:
            raise PlanError("liveness: a graph ends that never began")
        self.graph_peaks[self._graph] = self._peak.copy()
        self.graph_totals[self._graph] = self._total
        self._graph = None

    # -- results --------------------------------------------------------------------------
    def callee_peak(self, graph_id: str) -> np.ndarray:
        """The most a graph's own buffers (not its always-live inputs) hold at once."""
        try:
            return self.graph_peaks[graph_id]
        except KeyError:
            raise PlanError(f"liveness: graph {graph_id!r} is called before it was walked "
                            f"(callees are walked first)") from None

    def result(self, roots: Iterable[str]) -> TileLiveness:
        """The program's liveness: always-live bytes plus, per tile, the most any graph no
        op calls (the main graph) holds at once, its callees at their call sites included."""
        roots = list(roots)
        transient = np.zeros(self.num_tiles, np.int64)
        for graph_id in roots:
            np.maximum(transient, self.callee_peak(graph_id), out=transient)
        peak = self.always_live + transient
        together = int(self.always_live.sum()) + max(
            (self.graph_totals.get(graph_id, 0) for graph_id in roots), default=0)
        return TileLiveness(always_live=self.always_live.copy(), peak=peak,
                            fullest=self._fullest(peak),
                            peak_floor=-(-together // max(self.num_tiles, 1)))

    def _fullest(self, peak: np.ndarray) -> FullestTile | None:
        """The fullest tile's facts from the kept moment (or, if no root step ever ran,
        the tile with the most always-live bytes)."""
        if not peak.size:
            return None
        holdings: dict[str, int] = {}
        if self._best_moment is None or self._best < int(peak.max()):
            tile, op, graph, live, called = int(np.argmax(peak)), None, "", {}, {}
        else:
            tile, op, graph, live, called = self._best_moment
        for source in (self._always_live_of, live):
            for (graph_id, tensor_id), array in source.items():
                holdings[qualified_id(graph_id, tensor_id)] = int(array[tile])
        if called:  # the branch holding most on this tile (If runs one)
            graph_id = max(called, key=lambda g: (int(called[g][tile]), g))
            holdings[f"{graph_id} (subgraph peak)"] = int(called[graph_id][tile])
        ranked = sorted(((name, held) for name, held in holdings.items() if held > 0),
                        key=lambda item: (-item[1], item[0]))
        return FullestTile(tile=tile, bytes=int(peak[tile]),
                           always_live_bytes=int(self.always_live[tile]), op=op, graph=graph,
                           largest=tuple(ranked[:FULLEST_TILE_TOP]))

    def _checked(self, bytes_per_tile: np.ndarray) -> np.ndarray:
        array = np.asarray(bytes_per_tile, np.int64).reshape(-1)
        if array.size != self.num_tiles:
            raise PlanError(f"liveness: bytes for {array.size} tiles, the target has "
                            f"{self.num_tiles}")
        return array
