"""The plan file: every producer-less tensor's tile mapping, how it was decided, and the
cost summary of our plan beside the baselines (docs/cli.md gives the format).

The bytes are deterministic: keys sorted, numbers as Python prints them, no timings, so two
runs on one model give identical files. Nested levels are indented for reading; each list
(shapes, tile mappings) stays on one line, which keeps real-size plans compact.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from math import prod
from typing import Any, BinaryIO

import numpy as np

from popart_unwind.cost.terms import ALWAYS, PIPELINED, SEVERAL_IPUS, summary_keys
from popart_unwind.errors import PlanError
from popart_unwind.ir.tile_mapping import TileIntervals
from popart_unwind.machine import IpuModel
from popart_unwind.report.mapping_text import intervals_ascii, intervals_pieces
from popart_unwind.unwind.solvers import cyclic_gc_paused
from popart_unwind.version import __version__

PLAN_VERSION = 1
#: Keys of each plan's summary (the cost report's figures, ``cost/terms.py``).
SUMMARY_KEYS = summary_keys(ALWAYS)
#: Keys a plan's summary adds on a machine of several IPUs.
IPU_SUMMARY_KEYS = summary_keys(SEVERAL_IPUS)
#: Keys a plan's summary adds when the IPUs run as a pipeline.
PIPELINE_SUMMARY_KEYS = summary_keys(PIPELINED)
#: Fields of each planned op's entry (matmuls and convolutions).
OP_FIELDS = ("type", "graph", "plan", "cycles")
#: Fields of each tensor entry.
TENSOR_FIELDS = ("shape", "dtype", "tile_mapping", "method", "explanation", "graph")


@dataclass(frozen=True)
class TensorDecision:
    """One producer-less tensor's planned layout, as the plan file records it."""

    graph_id: str
    tensor_id: str
    shape: tuple[int, ...]
    dtype: str
    #: Poplar's format: per tile, [begin, end) intervals (nested lists or ``TileIntervals``)
    tile_mapping: Any
    method: str
    explanation: str
    #: The IPU the tensor lives on (its tile mapping names that IPU's tiles).
    ipu: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.graph_id, self.tensor_id)


def tensor_key(graph_id: str, tensor_id: str) -> str:
    """The entry name: the tensor id in the main graph, ``<graph>::<id>`` in a subgraph."""
    return tensor_id if not graph_id else f"{graph_id}::{tensor_id}"


def target_entry(model: IpuModel) -> dict[str, Any]:
    return {"name": "IpuModel", "tiles": model.tiles_per_ipu,
            "bytes_per_tile": model.bytes_per_tile,
            "exchange_bytes_per_cycle": model.exchange_bytes_per_cycle,
            "sync_cycles": model.sync_cycles, "min_bytes_per_tile": model.min_bytes_per_tile,
            "grain_bytes": model.grain_bytes, "vertex_costs": model.vertex_costs,
            "available_memory_proportion": model.available_memory_proportion,
            **({"ipus": model.ipus, "ipu_link_bytes_per_cycle": model.ipu_link_bytes_per_cycle,
                "ipu_copy_sync_cycles": model.ipu_copy_sync_cycles} if model.ipus > 1 else {})}


def summary_entry(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary figures with numpy scalars turned into plain numbers."""
    return {key: _plain(summary[key])
            for key in SUMMARY_KEYS + IPU_SUMMARY_KEYS + PIPELINE_SUMMARY_KEYS
            if key in summary}


def op_entries(planned_ops: Iterable[Any]) -> dict[str, Any]:
    """The ``ops`` object: each planned op (``report.session.PlannedOp``) by name (qualified
    by its graph outside the main graph, and by its id where two share a name): its type,
    our plan and its cycles, and each baseline's plan and cycles where it has one."""
    planned_ops = list(planned_ops)
    names = [tensor_key(op.graph_id, op.name) for op in planned_ops]
    uses = Counter(names)
    entries: dict[str, Any] = {}
    for op, name in zip(planned_ops, names, strict=True):
        key = name if uses[name] == 1 else f"{name}#{op.op_id}"
        entry: dict[str, Any] = {"type": op.type, "graph": op.graph_id,
                                 "plan": op.plans.get("ours"),
                                 "cycles": _plain(op.cycles.get("ours"))}
        for plan in sorted(op.plans):
            if plan != "ours":
                entry[plan] = {"plan": op.plans[plan], "cycles": _plain(op.cycles.get(plan))}
        entries[key] = entry
    return entries


def build_plan_document(model: IpuModel, decisions: Iterable[TensorDecision],
                        summaries: Mapping[str, Mapping[str, Any]],
                        source: Mapping[str, str], planner: Mapping[str, Any],
                        ops_without_rule: Mapping[str, int],
                        planned_ops: Iterable[Any] = ()) -> dict[str, Any]:
    """The plan file's content (a dict for ``write_plan`` and ``compact_plan``, each tile
    mapping a ``MappingText``, made into JSON as the plan is written). ``planner``: the
    solver's name and its own figures (objective and upper bound on the unwinding graph);
    ``ops_without_rule``: per op type, how many ops no layout rule models (barriers, no
    exchange counted);
    ``planned_ops``: the matmuls and convolutions with their plans (``op_entries``)."""
    tensors: dict[str, Any] = {}
    for decision in decisions:
        key = tensor_key(decision.graph_id, decision.tensor_id)
        if key in tensors:
            raise PlanError(f"the plan has tensor {key!r} twice")
        tensors[key] = {
            "shape": [int(d) for d in decision.shape],
            "dtype": decision.dtype,
            "tile_mapping": MappingText(decision.tile_mapping),
            "method": decision.method,
            "explanation": decision.explanation,
            "graph": decision.graph_id,
        }
        if model.ipus > 1:
            tensors[key]["ipu"] = decision.ipu
    return {
        "version": PLAN_VERSION,
        "generator": f"popart-unwind {__version__}",
        "model": {key: str(value) for key, value in sorted(source.items())},
        "planner": {key: _plain(value) for key, value in planner.items()},
        "target": target_entry(model),
        "tensors": tensors,
        "ops": op_entries(planned_ops),
        "ops_without_rule": {str(name): int(count)
                             for name, count in sorted(ops_without_rule.items())},
        "summary": {name: summary_entry(values) for name, values in summaries.items()},
    }


_NO_RUNS: list = []


class MappingText:
    """A tensor's tile mapping in the plan document, made into JSON only as the plan is
    written: a ``TileIntervals`` written from its runs by numpy (``intervals_json``),
    other mappings as ``json.dumps`` writes their lists (``lists()``)."""

    __slots__ = ("mapping",)

    def __init__(self, mapping: Any) -> None:
        self.mapping = mapping

    def lists(self) -> list:
        """Poplar's format as JSON lists (``_intervals``)."""
        with cyclic_gc_paused():  # a list per tile: many small lists
            return _intervals(self.mapping)

    def data(self) -> bytes | np.ndarray:
        """The JSON text of ``lists()``, on one line, as ASCII bytes (a numpy array of them
        for a ``TileIntervals``)."""
        if isinstance(self.mapping, TileIntervals):
            return intervals_ascii(self.mapping)
        return json.dumps(self.lists(), separators=(",", ":")).encode("ascii")

    def pieces(self) -> Iterator[bytes | np.ndarray]:
        """``data()`` in pieces that follow one another (a ``TileIntervals``' text a few
        tiles at a time, ``intervals_pieces``), for a writer that takes each as it
        comes."""
        if isinstance(self.mapping, TileIntervals):
            yield from intervals_pieces(self.mapping)
        else:
            yield self.data()


def _intervals(mapping: Any) -> list:
    """Poplar's format as JSON lists: a ``TileIntervals`` converts all its runs at once (one
    list per tile of the target, thousands of tensors)."""
    if isinstance(mapping, TileIntervals):
        # Every tile holding nothing shares one empty list: a small tensor on 1,472 tiles
        # would otherwise take 1,471 lists (the plan of 10,000 small tensors, 1.4 GB). The
        # document is only read (written out as JSON) once built.
        # All runs become [begin, end] lists in one conversion, each tile taking its slice
        # (a generator of each tile's runs as tuples, then lists of them, took twice as
        # long for GPT-2 small's plan).
        lists: list = [_NO_RUNS] * len(mapping)
        rows, owners = mapping.owners()
        pairs = rows.tolist()
        bounds = np.zeros(len(mapping) + 1, np.int64)
        np.cumsum(np.bincount(owners, minlength=len(mapping)), out=bounds[1:])
        ends = bounds[1:].tolist()
        for tile in np.flatnonzero(np.diff(bounds)).tolist():
            lists[tile] = pairs[ends[tile - 1] if tile else 0:ends[tile]]
        return lists
    return [[[int(b), int(e)] for b, e in tile] for tile in mapping]


def dumps_plan(document: Mapping[str, Any]) -> bytes:
    """The plan file's bytes (``write_plan``'s) in one object."""
    pieces: list[bytes] = []
    _write(document, 0, lambda piece: pieces.append(bytes(piece)))
    pieces.append(b"\n")
    return b"".join(pieces)


def write_plan(document: Mapping[str, Any], stream: BinaryIO) -> None:
    """Write the plan file's bytes to ``stream``: objects indented, lists on one line, keys
    sorted. Each piece is written as it is made (a tile mapping's text a few tiles at a
    time), so a real model's 200 MB of tile mappings are never held, joined or copied
    whole."""
    _write(document, 0, stream.write)
    stream.write(b"\n")


def compact_plan(document: Mapping[str, Any]) -> str:
    """The plan as one line of JSON (for the ONNX model's metadata)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False, default=_mapping_lists)


def _mapping_lists(value: Any) -> list:
    """``json.dumps``' answer for a ``MappingText``: its lists."""
    if isinstance(value, MappingText):
        return value.lists()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _write(value: Any, depth: int, put: Callable[[bytes | np.ndarray], object]) -> None:
    """``put`` each piece of ``value``'s UTF-8 text at nesting ``depth`` in turn: a
    non-empty mapping one key a line, indented, keys sorted; anything else as compact JSON
    on one line."""
    if isinstance(value, MappingText):
        for piece in value.pieces():
            put(piece)
    elif isinstance(value, Mapping) and value:
        pad = "  " * (depth + 1)
        put(b"{\n")
        for number, key in enumerate(sorted(value)):
            separator = ",\n" if number else ""
            put(f"{separator}{pad}{json.dumps(str(key), ensure_ascii=False)}: ".encode())
            _write(value[key], depth + 1, put)
        put(("\n" + "  " * depth + "}").encode())
    else:
        put(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                       allow_nan=False).encode())


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def validate_plan(document: Mapping[str, Any]) -> None:
    """Raise PlanError unless ``document`` is a version-1 plan whose every tensor's intervals
    cover each element exactly once, on tiles of the target, and whose ``ops_without_rule``
    maps op types to positive counts."""
    if document.get("version") != PLAN_VERSION:
        raise PlanError(f"plan version {document.get('version')!r}; expected {PLAN_VERSION}")
    for part in ("target", "tensors", "summary"):
        if not isinstance(document.get(part), Mapping):
            raise PlanError(f"the plan has no {part!r} object")
    tiles = document["target"].get("tiles")
    if not isinstance(tiles, int) or tiles < 1:
        raise PlanError(f"the plan's target has no valid tile count: {tiles!r}")
    ipus = document["target"].get("ipus", 1)
    if type(ipus) is not int or ipus < 1:
        raise PlanError(f"the plan's target has no valid IPU count: {ipus!r}")
    fields = TENSOR_FIELDS + (("ipu",) if ipus > 1 else ())
    for key, entry in document["tensors"].items():
        missing = [name for name in fields if name not in entry]
        if missing:
            raise PlanError(f"tensor {key!r} lacks {missing}")
        if ipus > 1 and not (type(entry["ipu"]) is int and 0 <= entry["ipu"] < ipus):
            raise PlanError(f"tensor {key!r} is on IPU {entry['ipu']!r}; the target has "
                            f"IPUs 0 to {ipus - 1}")
        _check_cover(key, entry["tile_mapping"], prod(entry["shape"]), tiles)
    required = SUMMARY_KEYS + (IPU_SUMMARY_KEYS if ipus > 1 else ())
    for name, summary in document["summary"].items():
        missing = [k for k in required if k not in summary]
        if missing:
            raise PlanError(f"summary {name!r} lacks {missing}")
    _check_ops_without_rule(document.get("ops_without_rule"))
    _check_ops(document.get("ops"))


def _check_ops(ops: Any) -> None:
    """Each planned op names its type, graph, plan (a partition) and cycles."""
    if not isinstance(ops, Mapping):
        raise PlanError(f"the plan's 'ops' is not an object: {ops!r}")
    for name, entry in ops.items():
        missing = [field for field in OP_FIELDS if field not in entry]
        if missing:
            raise PlanError(f"op {name!r} lacks {missing}")
        if not isinstance(entry["plan"], Mapping) or "partition" not in entry["plan"]:
            raise PlanError(f"op {name!r} has no partition in its plan: {entry['plan']!r}")


def _check_ops_without_rule(counts: Any) -> None:
    """Op type names to positive counts (a bool is not a count)."""
    if not isinstance(counts, Mapping):
        raise PlanError(f"the plan's 'ops_without_rule' is not an object: {counts!r}")
    for name, count in counts.items():
        if not isinstance(name, str) or not name:
            raise PlanError(f"'ops_without_rule' has a key that is no op type: {name!r}")
        if type(count) is not int or count < 1:
            raise PlanError(f"'ops_without_rule' counts {count!r} ops of {name!r}; expected "
                            f"a positive integer")


def _check_cover(key: str, mapping: list, numel: int, tiles: int) -> None:
    if len(mapping) > tiles:
        raise PlanError(f"tensor {key!r} maps {len(mapping)} tiles; the target has {tiles}")
    hits = np.zeros(numel, np.int64)
    for tile, intervals in enumerate(mapping):
        for begin, end in intervals:
            if not 0 <= begin <= end <= numel:
                raise PlanError(f"tensor {key!r}: interval [{begin}, {end}) on tile {tile} is "
                                f"outside [0, {numel})")
            hits[begin:end] += 1
    if numel and (hits != 1).any():
        element = int(np.flatnonzero(hits != 1)[0])
        raise PlanError(f"tensor {key!r}: element {element} is on {int(hits[element])} tiles")
