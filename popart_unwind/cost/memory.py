"""The memory side of the cost walk: what each op holds on each tile.

The walk says what happens (a buffer is made, viewed, released; an op runs) and this
keeps the books: liveness over the schedule (``cost/liveness.py``), each tile's largest
single op's data (the resident figure), which tensors are parameters' memory, and the
buffers live for the whole program that ops make — a pipeline's stashes and its gradient
accumulators, counted per IPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np

from popart_unwind.cost.liveness import Key, LivenessTracker
from popart_unwind.cost.placement import Placement


class Residency:
    """Per machine tile: the bytes live over the schedule and the largest op's data."""

    def __init__(self, placement: Placement,
                 throughout: Mapping[Key, np.ndarray] | None = None) -> None:
        tiles = placement.machine_tiles
        self.liveness = LivenessTracker(tiles)
        #: Each tile's most bytes of one op's live data (operands and new results).
        self.op_peak = np.zeros(tiles, np.int64)
        #: Whether a tensor is held in the always-live term (a parameter, or a view of
        #: parameters) rather than as an op's live data.
        self.from_parameters: dict[Key, bool] = {}
        self._on_tiles: dict[Key, np.ndarray] = {}  # bytes per tile of live activations
        self.stash_bytes = [0] * placement.num_ipus
        self.accumulator_bytes = [0] * placement.num_ipus
        self._accumulated: set[Key] = set()
        #: Buffers live for the whole program that ops make (stashes, accumulators):
        #: known beforehand (a second walk) or found as this walk meets them.
        self.throughout = dict(throughout or {})
        self.found_throughout: dict[Key, np.ndarray] = {}

    def start(self, roots: list[str]) -> None:
        """Before the first op: the buffers known to live throughout, and the graphs whose
        steps are the program's moments."""
        for name, placed in self.throughout.items():
            self.liveness.add_always_live(placed, name)
        self.liveness.watch(roots)

    def new_buffer(self, name: Key, placed: np.ndarray) -> None:
        """An op's result that is new memory, live from now."""
        self._on_tiles[name] = placed
        self.liveness.create(name, placed)

    def stash(self, ipu: int, name: Key, placed: np.ndarray) -> None:
        """A stash buffer, live throughout, on ``ipu``."""
        self._held_throughout(name, placed)
        self.from_parameters[name] = True
        self.stash_bytes[ipu] += int(placed.sum())

    def accumulator(self, ipu: int, name: Key, placed: Callable[[], np.ndarray]) -> None:
        """A weight's gradient accumulator (once per weight), live throughout, on
        ``ipu``; ``placed`` gives its bytes per tile."""
        if name in self._accumulated:
            return
        self._accumulated.add(name)
        held = placed()
        self._held_throughout(name, held)
        self.accumulator_bytes[ipu] += int(held.sum())

    def _held_throughout(self, name: Key, placed: np.ndarray) -> None:
        if name not in self.throughout:
            self.liveness.add_always_live(placed, name)
            self.found_throughout[name] = placed

    def op_data(self, tensors: Iterable[tuple[Key, Callable[[], np.ndarray]]]) -> None:
        """Raise each tile's resident peak to one op's live data: ``tensors`` are (name,
        its bytes per tile when not yet known)."""
        live = np.zeros(self.op_peak.size, np.int64)
        for name, placed in tensors:
            if name not in self._on_tiles:
                self._on_tiles[name] = placed()
            live += self._on_tiles[name]
        np.maximum(self.op_peak, live, out=self.op_peak)

    def released(self, name: Key) -> None:
        """No later op reads ``name``."""
        self._on_tiles.pop(name, None)
        self.liveness.release(name)
