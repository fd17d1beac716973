"""Turning a solution of the unwinding problem into concrete tiles.

A solution gives every element an origin (a root element, or a sink's own element). The
tiles follow: a Sink element sits on the tile of its origin. Roots are laid out lazily,
only when some element takes its origin there:

- Source: the layout its rule attached (a Poplibs ``create*`` hook's answer);
- FixedPoint output: likewise (the matmul plan's output layout);
- Barrier output: the IR op's rule's ``output_tiles`` (inputs passed lazily, computed only
  if read: a reduction lays its result out from its input's tiles, an unmodelled op maps
  its outputs linearly without reading them). A linear mapping starts where the cost walk's
  rotating mapper will stand at that op (``cost.rotation``), not where the sinks' own
  elements left this planner's rotation: what is tied to the result then lies where the
  walk puts the result;
- SumLikeReduce: the target's broadcast-operand layout over its full tensor's tiles. With
  ``balance_memory`` each element is dealt to any tile reading it, the least loaded first:
  every reader then receives it once, whichever holds it. That holds for one reading op
  only: of a tensor several ops broadcast (a bias shared by convolutions, a norm's scale
  read by the forward pass and by its gradient), whose readers differ from op to op, each
  element is dealt among the tiles reading it in the most of those ops
  (``shared_broadcasts``);
- a Sink's own (uncovered) elements: the target's rotating linear mapper, in flat order;
  a Sink no path covers at all, whose reader gave it a layout of its own (a lookup's
  indices: ``Emitter.own_layouts``), that layout, over the least loaded tiles first;
- a producer-less Sink every element of which takes its tile from statistics (a reduction's
  or a norm's results: a batch norm's running mean and variance beside the batch's), with
  ``spread_statistics``: the statistics' layout moved onto the least loaded tiles. Poplibs
  lays every such result out from tile 0, so the running statistics of every layer would
  stack on the lowest tiles for the whole program; moved, the update that reads them
  receives the batch's statistics once per step instead.

Sinks are realized in dependency order (``unwind.solution.dependency_order``), so every
origin a sink takes lies in something already realized; each sink's tiles come from its
paths (``Solution.paths``: root, canonical chain, covered region), applying the chain to the
root's tiles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.ir.tile_mapping import TileIntervals, held_layout, read_only_tiles, tile_dtype
from popart_unwind.machine.exchange import (
    DENSE_COUNTS_MAX,
    broadcast_index_view,
    most_read_tiles,
)
from popart_unwind.machine.hooks import tile_counts
from popart_unwind.ops.layout_rule import LazyInputTiles, output_layouts
from popart_unwind.unwind import Solution, TensorId, UnwindGraph
from popart_unwind.unwind.solution import Path, dependency_order

from .emit import Emitter

#: Layout-rule kinds whose barrier outputs are statistics (reductions' results, a batch
#: norm's running statistics), laid out as ``popops::reduce`` lays its results out.
STATISTICS_KINDS = frozenset({"reduction", "norm"})


def shared_broadcasts(graph: UnwindGraph) -> dict[TensorId, list[tuple[TensorId, np.ndarray]]]:
    """The SumLikeReduce roots whose broadcast operand, followed back through views, is
    also another op's broadcast operand (each op's root is tied to its view of it): for
    each, every root of that operand with, per root element, the operand element it is
    (the views' chains applied to the operand's flat indices)."""
    views: dict[TensorId, list[tuple[TensorId, list]]] = {}  # operand -> (root, chains)
    for pair in graph.valued_pairs():
        for root, partner in ((pair.a, pair.b), (pair.b, pair.a)):
            if graph.kind(root) != "sum_like_reduce":
                continue
            chains = []
            while graph.kind(partner) == "view":
                chains.append(graph.node(partner).chain)
                partner = graph.node(partner).inputs[0]
            views.setdefault(partner, []).append((root, chains))
    shared: dict[TensorId, list[tuple[TensorId, np.ndarray]]] = {}
    for operand, roots in views.items():
        if len(roots) < 2:
            continue  # one reading op: no indices made (most operands)
        group = []
        for root, chains in roots:
            index = np.arange(graph.numel(operand)).reshape(graph.shape(operand))
            for chain in reversed(chains):
                index = chain.apply(index)
            group.append((root, np.asarray(index).reshape(-1)))
        for root, _ in group:
            shared[root] = group
    return shared


class Realizer:
    """Concrete tiles of the unwind tensors a solution needs, memoised."""

    def __init__(self, emitter: Emitter, solution: Solution, balance_memory: bool = False,
                 ipus: Mapping[tuple[str, str], int] | None = None,
                 spread_statistics: bool = False,
                 rotation_starts: Mapping[tuple[str, int], int] | None = None) -> None:
        self.emitter = emitter
        self.balance_memory = balance_memory
        #: move what statistics alone lay out onto the least loaded tiles (module docstring)
        self.spread_statistics = spread_statistics
        #: (graph id, tensor id) -> IPU of each planned tensor not on IPU 0
        self.ipus = ipus or {}
        #: bytes per tile of each IPU of the sinks realized so far (kept when
        #: ``balance_memory``); tile ids name the same tiles of every IPU
        self.load = np.zeros((emitter.target.num_ipus, emitter.target.num_tiles), np.int64)
        self.graph = emitter.graph
        self.solution = solution
        self.target = emitter.target
        self._tiles: dict[TensorId, np.ndarray | TileIntervals] = {}
        self._own: dict[TensorId, int] = {}  # sink -> number of linearly mapped elements
        self._busy: set[TensorId] = set()
        self._shared_broadcasts = shared_broadcasts(self.graph)
        self._barrier_outputs: dict[int, list[np.ndarray]] = {}
        #: (graph id, op id) -> where the cost walk's linear mapper stands at the op
        self._rotation_starts = rotation_starts or {}

    def realize_sinks(self, progress: Callable[[int, int], None] | None = None
                      ) -> dict[TensorId, np.ndarray]:
        """Every sink's tiles (flat), realized in dependency order."""
        order = [t for t in dependency_order(self.graph, self.solution.sink_paths())
                 if self.graph.kind(t) == "sink"]
        if self.balance_memory or self.spread_statistics:
            # broadcast operands and sinks laid out by their readers (when balancing) or by
            # statistics last, so each sees the load of every other layout (a sink realized
            # early as another's dependency is still counted in the order below)
            last = self._placed_by_load if self.balance_memory else self._statistics_partner
            order.sort(key=last)  # stable: dependency order kept
        for done, sink in enumerate(order, 1):
            tiles = self.tiles(sink)
            if self.balance_memory or self.spread_statistics:
                self.load[self._ipu(sink)] += self._bytes_per_tile(sink, tiles)
            if progress is not None and (done % 64 == 0 or done == len(order)):
                progress(done, len(order))
        return {sink: self._tiles[sink] for sink in order}

    def linear_count(self, sink: TensorId) -> int:
        """How many elements of ``sink`` were mapped linearly (its own origins)."""
        return self._own.get(sink, 0)

    def compact(self) -> None:
        """Keep what is realized in its smaller form from now on (``held_layout``: large
        layouts as intervals, expanded when asked for): the same tiles, in a few bytes per
        run instead of two per element."""
        num_tiles = self.target.num_tiles
        for tensor, tiles in list(self._tiles.items()):
            if isinstance(tiles, np.ndarray):
                self._tiles[tensor] = held_layout(tiles, num_tiles)

    def tiles(self, tensor: TensorId) -> np.ndarray:
        """The flat tiles of ``tensor``, computing (and remembering) them on first use."""
        found = self._tiles.get(tensor)
        if isinstance(found, TileIntervals):
            return read_only_tiles(found, self.graph.numel(tensor), self.target.num_tiles)
        if found is not None:
            return found
        if tensor in self._busy:
            raise PlanError(f"the layout of {tensor!r} depends on itself")
        self._busy.add(tensor)
        try:
            kind = self.graph.kind(tensor)
            if kind in ("source", "fixed_point"):
                tiles = self._root(tensor)
            elif kind == "barrier":
                tiles = self._barrier(tensor)
            elif kind == "sum_like_reduce":
                full = self.graph.node(tensor).inputs[0]
                tiles = None
                if self.balance_memory and tensor in self._shared_broadcasts:
                    tiles = self._dealt_over_shared_readers(tensor)
                if tiles is None:
                    tiles = self.target.broadcast_operand_tiles(
                        self.tiles(full), self.graph.shape(full), self.graph.shape(tensor),
                        preference=self._least_loaded_first(), any_reader=self.balance_memory)
            elif self._statistics_partner(tensor):
                tiles = self._off_statistics_tiles(tensor)
            else:
                tiles = self._from_paths(tensor)
            tiles = np.asarray(tiles).reshape(-1)
            if tiles.size != self.graph.numel(tensor):
                raise PlanError(f"the layout of {self._name(tensor)} has {tiles.size} "
                                f"elements, not {self.graph.numel(tensor)}")
        finally:
            self._busy.discard(tensor)
        tiles.flags.writeable = False  # shared with the plan and its mappings
        self._tiles[tensor] = tiles
        return tiles

    def _readers(self, root: TensorId, full_tiles: np.ndarray) -> np.ndarray | None:
        """Per element of SumLikeReduce ``root``, which tiles read it: [elements, tiles]
        booleans, or None past one table of ``DENSE_COUNTS_MAX`` cells."""
        full = self.graph.node(root).inputs[0]
        count, num_tiles = self.graph.numel(root), self.target.num_tiles
        if count * num_tiles > DENSE_COUNTS_MAX:
            return None
        index = np.asarray(broadcast_index_view(self.graph.shape(root),
                                                self.graph.shape(full))).reshape(-1)
        reads = np.zeros((count, num_tiles), dtype=bool)
        reads[index, np.asarray(full_tiles).reshape(-1)] = True
        return reads

    def _dealt_over_shared_readers(self, root: TensorId) -> np.ndarray | None:
        """``root``'s elements dealt, the least loaded first, among the tiles reading each
        in its own op that read it in the most of the other ops broadcasting the same
        tensor; those ops' full tensors are consulted only where their layouts are known
        without this one (already realized, or a source's or fixed point's). None where a
        table would be too large (the caller deals over its own op's readers)."""
        num_tiles = self.target.num_tiles
        group = self._shared_broadcasts[root]
        own_index = next(index for other, index in group if other == root)
        reads = self._readers(root, self.tiles(self.graph.node(root).inputs[0]))
        base_count = int(max(index.max(initial=-1) for _, index in group)) + 1
        if reads is None or base_count * num_tiles > DENSE_COUNTS_MAX:
            return None
        others = np.zeros((base_count, num_tiles), np.int32)
        for other, index in group:
            full = self.graph.node(other).inputs[0]
            if other == root or not (full in self._tiles or self.graph.kind(full) in (
                    "source", "fixed_point")):
                continue
            other_reads = self._readers(other, self.tiles(full))
            if other_reads is None:
                continue
            seen = np.zeros((base_count, num_tiles), dtype=bool)
            np.logical_or.at(seen, index, other_reads)
            others += seen
        score = np.where(reads, 1 + others[own_index], 0)
        best = score == score.max(axis=1, keepdims=True)
        element, tile = np.nonzero(best & reads)
        return most_read_tiles(tile, element, reads.shape[0], num_tiles,
                               tile_dtype(num_tiles), self._least_loaded_first(),
                               any_reader=True)

    def _placed_by_load(self, sink: TensorId) -> bool:
        return sink in self.emitter.own_layouts or self._statistics_partner(sink) or any(
            path.src != sink and self.graph.kind(path.src) == "sum_like_reduce"
            for path in self.solution.paths(sink))

    def _statistics_partner(self, sink: TensorId) -> bool:
        """Whether ``sink`` is producer-less (live for the whole program) and every element
        of it takes its tile from statistics: a result of a reduction or of a norm's
        statistics, which Poplibs lays out from tile 0 whatever else lies there."""
        if not self.spread_statistics or self.graph.kind(sink) != "sink":
            return False
        owner = self.emitter.owner(sink)
        if owner is None or owner.producer is not None:
            return False
        paths = self.solution.paths(sink)
        return bool(paths) and all(
            path.src != sink and self.graph.kind(path.src) == "barrier"
            and path.src in self.emitter.barriers
            and self.emitter.registry.layout_rule(
                self.emitter.barriers[path.src].op).kind in STATISTICS_KINDS
            for path in paths)

    def _off_statistics_tiles(self, sink: TensorId) -> np.ndarray:
        """``sink``'s layout as its paths give it, each tile renamed by its rank from the
        lowest id: tile 0 becomes the least loaded tile of the sink's IPU, tile 1 the next,
        and so on. Elements that shared a tile still share one (the update reading them
        computes as many vertices), on tiles little else fills."""
        tiles = self._from_paths(sink)
        order = np.argsort(self.load[self._ipu(sink)], kind="stable")
        return order[tiles].astype(tiles.dtype)

    def _least_loaded_first(self, ipu: int | None = None) -> np.ndarray | None:
        """The tiles, the least loaded first and ties the lowest id, when balancing memory;
        else None (each layout's own order). The load of ``ipu``'s tiles, or without one
        (a broadcast operand, which knows no IPU of its own) of every IPU's added up."""
        if not self.balance_memory:
            return None
        load = self.load.sum(axis=0) if ipu is None else self.load[ipu]
        return np.argsort(load, kind="stable")

    def _ipu(self, sink: TensorId) -> int:
        owner = self.emitter.owner(sink)
        return 0 if owner is None else self.ipus.get((owner.graph.id, owner.id), 0)

    def _bytes_per_tile(self, sink: TensorId, tiles: np.ndarray) -> np.ndarray:
        owner = self.emitter.owner(sink)
        size = self.target.dtype_size(owner.dtype if owner is not None else "float32")
        return tile_counts(tiles, self.target.num_tiles).astype(np.int64) * size

    def _name(self, tensor: TensorId) -> str:
        owner = self.emitter.owner(tensor)
        return repr(owner.qualified_id) if owner is not None else repr(tensor)

    def _root(self, tensor: TensorId) -> np.ndarray:
        spec = self.emitter.root_tiles.get(tensor)
        if spec is None:
            raise PlanError(f"{self.graph.kind(tensor)} {tensor!r} carries no layout (a rule "
                            f"made it without the emitter)")
        return spec(self.target) if callable(spec) else spec

    def _barrier(self, tensor: TensorId) -> np.ndarray:
        record = self.emitter.barriers.get(tensor)
        if record is None:
            raise PlanError(f"barrier {tensor!r} has no IR op behind it (a rule made it "
                            f"without the emitter)")
        op = record.op
        outputs = self._barrier_outputs.get(op.id)
        if outputs is None:
            start = self._rotation_starts.get((op.graph.id, op.id))
            target = self.target if start is None else self.target.rotated_to(start)
            inputs = record.inputs  # input index -> unwind tensor, realized when read
            lazy = LazyInputTiles(max(inputs, default=-1) + 1,
                                  lambda i: self.tiles(inputs[i]) if i in inputs else None)
            outputs = output_layouts(self.emitter.registry.layout_rule(op), op, lazy, target)
            self._barrier_outputs[op.id] = outputs
        return outputs[record.position]

    def _moved(self, path: Path) -> np.ndarray:
        """The tiles of ``path``'s root carried through its chain (flat, the whole tensor)."""
        source = self.tiles(path.src).reshape(self.graph.shape(path.src))
        return np.asarray(path.chain.apply(source)).reshape(-1)

    def _from_paths(self, tensor: TensorId) -> np.ndarray:
        shape = self.graph.shape(tensor)
        numel = self.graph.numel(tensor)
        paths = self.solution.paths(tensor)
        if (len(paths) == 1 and paths[0].src != tensor
                and paths[0].regions.total_elms() == numel):
            return self._moved(paths[0])  # the usual case: no masks over millions of elements
        if (len(paths) == 1 and paths[0].src == tensor and numel
                and paths[0].regions.total_elms() == numel):
            # wholly linear (a gradient accumulator as large as GPT-2's embedding): the
            # mapper's answer is the layout, with no mask and no second array
            self._check_own(tensor)
            self._own[tensor] = numel
            own_layout = self.emitter.own_layouts.get(tensor)
            if own_layout is not None:
                return own_layout(self.target, self._least_loaded_first(self._ipu(tensor)))
            return self._linear(tensor, numel)
        result = _Filling(numel, tile_dtype(self.target.num_tiles))
        own = None
        for path in paths:
            if path.src == tensor:
                own = path.regions
                continue
            mask = path.regions.mask().reshape(-1)
            result.put(mask, self._moved(path)[mask])
        if own is not None:
            self._check_own(tensor)
            where = own.mask().reshape(-1)  # a boolean mask: no 64-bit index per element
            count = int(np.count_nonzero(where))
            if count:
                result.put(where, self._linear(tensor, count))
            self._own[tensor] = count
        result = result.array
        missing = np.flatnonzero(result < 0)
        if missing.size:
            raise PlanError(f"element {int(missing[0])} of {self._name(tensor)} (shape "
                            f"{shape}) is on no tile: no path of the solution covers it")
        return result

    def _check_own(self, tensor: TensorId) -> None:
        if self.graph.kind(tensor) != "sink":
            raise PlanError(f"{tensor!r} has elements of its own but is not a sink")

    def _linear(self, tensor: TensorId, count: int) -> np.ndarray:
        """The rotating linear mapper's tiles for ``count`` of a sink's own elements."""
        owner = self.emitter.owner(tensor)
        dtype = owner.dtype if owner is not None else "float32"
        return self.target.linear_tiles((count,), dtype)


class _Filling:
    """A flat tile array filled path by path, -1 where nothing is yet. It starts in the
    target's tile dtype (int16 for an IPU: a quarter of int64's bytes, and a tensor may have
    tens of millions of elements) and widens only if a layout hands it wider ids, so every
    id is stored exactly as given."""

    def __init__(self, numel: int, dtype: np.dtype) -> None:
        self.array = np.full(numel, -1, dtype=dtype)

    def put(self, where: np.ndarray, tiles: np.ndarray) -> None:
        wider = np.promote_types(self.array.dtype, np.asarray(tiles).dtype)
        if wider != self.array.dtype:
            self.array = self.array.astype(wider)
        self.array[where] = tiles


def validate(tiles: np.ndarray, numel: int, num_tiles: int, what: str) -> None:
    """Each element on exactly one tile with an id in range; PlanError naming ``what``."""
    flat = np.asarray(tiles).reshape(-1)
    if flat.size != numel:
        raise PlanError(f"{what}: the layout has {flat.size} elements, the tensor {numel}")
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= num_tiles):
        bad = int(np.flatnonzero((flat < 0) | (flat >= num_tiles))[0])
        raise PlanError(f"{what}: element {bad} is on tile {int(flat[bad])}, outside "
                        f"[0, {num_tiles})")
