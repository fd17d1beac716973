"""Liveness per tile: the most bytes each tile holds at once over the schedule.

The cost walk (``target/cost.py``) tells a :class:`LivenessTracker` what each op does to
memory, in schedule order, one graph at a time (callees first):

- a producer-less tensor (weight, optimizer state, constant, input) is live for the whole
  program: its bytes go to ``always_live``;
- an op's new result is a buffer, live from the op that produces it to its last reader
  (a graph output to the end of its graph);
- a view's result (an op whose layout rule aliases its outputs) holds no memory of its own:
  it keeps the buffers it views live as long as it is;
- at each op, the live buffers plus, for an op that runs subgraphs, the most its callees
  ever hold at once, are one step; each tile's peak is the most over the steps.

Each tile's peak is taken on its own (the busiest moment of one tile need not be another's),
so adding a callee's per-tile peak to the caller's live bytes at the call site is exact per
tile. A view keeps the whole of each buffer it views live, even when it views only a slice
(Poplar frees a variable's elements separately): an over-estimate there. The IR marks no op
as in place, so every result that is not a view is new memory. docs/ipu-model.md says what
else the figure leaves out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from popart_unwind.errors import PlanError

#: (graph id, tensor id), as the walk keys tensors.
Key = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class TileLiveness:
    """Per tile: bytes live for the whole program, and the most bytes live at once."""

    always_live: np.ndarray
    peak: np.ndarray

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
        self._buffers_of: dict[Key, tuple[Key, ...]] = {}  # tensor -> the buffers it holds
        self._references: dict[Key, int] = {}  # buffer -> live tensors holding it
        self._bytes: dict[Key, np.ndarray] = {}  # buffer -> bytes per tile

    # -- what the walk says ---------------------------------------------------------------
    def add_always_live(self, bytes_per_tile: np.ndarray) -> None:
        """A producer-less tensor's bytes: live for the whole program."""
        self.always_live += self._checked(bytes_per_tile)

    def begin_graph(self, graph_id: str) -> None:
        if self._graph is not None:
            raise PlanError(f"liveness: graph {graph_id!r} begins inside graph "
                            f"{self._graph!r} (graphs are walked one at a time)")
        self._graph = graph_id
        self._live[:] = 0
        self._peak[:] = 0
        self._buffers_of.clear()
        self._references.clear()
        self._bytes.clear()

    def create(self, tensor: Key, bytes_per_tile: np.ndarray) -> None:
        """``tensor`` is new memory, live from now."""
        self._bytes[tensor] = self._checked(bytes_per_tile)
        self._references[tensor] = 1
        self._buffers_of[tensor] = (tensor,)
        self._live += self._bytes[tensor]

    def view(self, tensor: Key, viewed: Iterable[Key]) -> None:
        """``tensor`` shares the memory of ``viewed`` (a view; producer-less tensors hold
        always-live memory, which no view extends)."""
        buffers = tuple(dict.fromkeys(b for v in viewed for b in self._buffers_of.get(v, ())))
        self._buffers_of[tensor] = buffers
        for buffer in buffers:
            self._references[buffer] += 1

    def step(self, callees: Iterable[str] = ()) -> None:
        """One op runs: what is live now, plus the most any of its callees holds at once
        (If runs one branch: the per-tile most over them), counts towards each tile's peak."""
        now = self._live
        peaks = [self.callee_peak(graph_id) for graph_id in callees]
        if peaks:
            now = now + np.maximum.reduce(peaks)
        np.maximum(self._peak, now, out=self._peak)

    def release(self, tensor: Key) -> None:
        """``tensor``'s last reader has run: its buffers die when no live view holds them."""
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
        transient = np.zeros(self.num_tiles, np.int64)
        for graph_id in roots:
            np.maximum(transient, self.callee_peak(graph_id), out=transient)
        return TileLiveness(always_live=self.always_live.copy(),
                            peak=self.always_live + transient)

    def _checked(self, bytes_per_tile: np.ndarray) -> np.ndarray:
        array = np.asarray(bytes_per_tile, np.int64).reshape(-1)
        if array.size != self.num_tiles:
            raise PlanError(f"liveness: bytes for {array.size} tiles, the target has "
                            f"{self.num_tiles}")
        return array
