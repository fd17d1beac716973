"""SubgraphOutline: a sequence of ops repeated in the main graph becomes one subgraph,
called where each copy stood.

After PopART's SubgraphOutline (``subgraphoutline.cpp``, with ``enableOutlining``): on the
IPU, every op is code on every tile it uses, so a model's twelve identical layers cost
twelve copies of that code; outlined, the layer's code exists once and each call copies
its inputs in and its outputs out (PopART's ``CallOp``). The planner then lays out the
subgraph's inputs once for all call sites, and each call's copies are tied to them
(docs/planner.md, "Calls").

How the sequences are found (PopART uses its own repeated-substring outliner over the
schedule; this is a simpler search with the same test of equal ops):

- each op of the main graph's schedule gets an equivalence class: its type, attributes,
  input and output types and placement; an op that cannot be outlined gets a class of its
  own (below);
- repeated runs of classes are read off a suffix array of the schedule. A run is a match
  when it occurs at least twice without overlap, every occurrence is wired the same way
  (each input read from the same op of the run, or from outside at the same place) and the
  run's ops are worth at least ``SessionOptions.outline_threshold`` together (PopART's
  ``outlineThreshold``, weighed with each op's ``OpDef.outline_value``: PopART's high
  value for a matmul or convolution, its low value for anything else);
- the match saving the most (value times occurrences beyond the first; then the longest,
  then the earliest) is outlined first, and the search repeats on what is left.

Each call takes the place of the run it replaces in the schedule: the main graph's ops are
given schedule priorities that keep the order from before the transform.

An op is not outlined when it runs a subgraph (outlining is one level deep here, PopART
nests), has side effects, draws random numbers, works in place, or gives a main graph
output (the loss, and the weight updates, which PopART can outline as calls that modify
their inputs; kept in the main graph here, the liveness sees each update write into its
weight).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from popart_unwind.ir.names import CONSTANT_PREFIX, TRANSFORM_PREFIX, reserved_id
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, OpType
from popart_unwind.rewrite.constant_pool import is_constant

from .base import Transform
from .conditions import Condition, is_inplace
from .registry import SUBGRAPH_OUTLINE, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Ir, Op, Tensor
    from popart_unwind.ops import OpRegistry
    from popart_unwind.rewrite import Rewriter

CALL = OpType(GRAPHCORE_DOMAIN, "Call", 1)
#: Subgraphs made here are named this, then a number.
OUTLINED_GRAPH_STEM = "outlined_"


@dataclasses.dataclass(frozen=True)
class Match:
    """A run of ``length`` ops of the schedule, occurring at each of ``starts``."""

    starts: tuple[int, ...]
    length: int
    value: float

    @property
    def saving(self) -> float:
        return self.value * (len(self.starts) - 1)


@register
@dataclasses.dataclass(frozen=True)
class SubgraphOutline(Transform):
    """Outline the main graph's repeated sequences of ops as called subgraphs (module
    docstring). Reads ``SessionOptions.enable_outlining``; off, it changes nothing.

    Assumes shapes are known (subgraph inputs are typed from the tensors they receive).
    Preserves every condition: a run's ops share one placement, which its calls inherit;
    no op in place or IpuCopy is made.
    """

    id = 9
    name = SUBGRAPH_OUTLINE
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = frozenset(Condition)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        if not ir.options.enable_outlining:
            return False
        main = ir.main_graph
        position = {op.id: k for k, op in enumerate(main.schedule())}
        outlined = 0
        while True:
            ops = sorted(main.ops, key=lambda op: position[op.id])
            match = best_match(ops, self.op_registry, ir.options.outline_threshold)
            if match is None:
                break
            _outline(ir, ops, match, rewriter, position)
            outlined += 1
        if outlined:
            for op in main.ops:  # each call where its run stood, the rest as they were
                rewriter.set_schedule_priority(op, float(-position[op.id]))
        return bool(outlined)


def outlinable(op: Op, registry: OpRegistry) -> bool:
    """Whether ``op`` may move into an outlined subgraph (module docstring)."""
    return not (op.called_graphs() or registry.has_side_effects(op)
                or registry.draws_random(op) or is_inplace(op, registry)
                or any(t.is_graph_output() for t in op.outputs))


def equivalence_classes(ops: Sequence[Op], registry: OpRegistry) -> list[int]:
    """One integer per op: equal for ops that compute the same function of inputs of the
    same types, in the same place; unique for an op that cannot be outlined."""
    classes: dict[tuple, int] = {}
    result = []
    for op in ops:
        if not outlinable(op, registry):
            key: tuple = ("alone", op.id)
        else:
            key = (op.type.domain, op.type.name, op.type.version,
                   repr(sorted(op.attributes.items())),
                   tuple((i, t.dtype, t.shape, _digest(t))
                         for i, t in sorted(op.input_map().items())),
                   tuple((i, t.dtype, t.shape) for i, t in sorted(op.output_map().items())),
                   tuple(sorted(op.settings.placement().items())))
        result.append(classes.setdefault(key, len(classes)))
    return result


def _digest(tensor: Tensor) -> str:
    """A constant's value (its ops' class holds it: the subgraph gets a copy); "" else."""
    if not is_constant(tensor):
        return ""
    return hashlib.sha256(np.ascontiguousarray(tensor.data).tobytes()).hexdigest()


def best_match(ops: Sequence[Op], registry: OpRegistry, threshold: float) -> Match | None:
    """The match worth outlining first among ``ops`` (a schedule), or None."""
    classes = equivalence_classes(ops, registry)
    values = np.cumsum([0.0, *(registry.outline_value(op) for op in ops)])
    best: Match | None = None
    for length, starts in repeats(classes):
        for size in _lengths(starts, length):
            chosen = _apart(starts, size)
            value = float(values[chosen[0] + size] - values[chosen[0]])
            if len(chosen) < 2 or value < threshold:
                continue
            candidate = Match(tuple(chosen), size, value)
            if best is not None and _rank(candidate) <= _rank(best):
                continue
            wired = _same_wiring(ops, candidate)
            if wired is not None and (best is None or _rank(wired) > _rank(best)):
                best = wired
    return best


def _rank(match: Match) -> tuple[float, int, int]:
    return match.saving, match.length, -match.starts[0]


def _lengths(starts: list[int], longest: int) -> list[int]:
    """Run lengths worth trying for runs sharing ``longest`` ops at ``starts``: the whole,
    and each distance between neighbouring starts that fits in it (so that a layer's
    copies, one after another, are cut where the next begins)."""
    gaps = {b - a for a, b in itertools.pairwise(starts) if b - a <= longest}
    return sorted(gaps | {longest}, reverse=True)


def _apart(starts: list[int], size: int) -> list[int]:
    """The earliest starts whose runs of ``size`` do not overlap."""
    chosen: list[int] = []
    for start in starts:
        if not chosen or start >= chosen[-1] + size:
            chosen.append(start)
    return chosen


def _same_wiring(ops: Sequence[Op], match: Match) -> Match | None:
    """``match`` narrowed to its largest set of occurrences wired alike and placed on one
    IPU (at least two), or None."""
    groups: dict[tuple, list[int]] = {}
    index = {op.id: k for k, op in enumerate(ops)}
    for start in match.starts:
        run = ops[start:start + match.length]
        if len({tuple(sorted(op.settings.placement().items())) for op in run}) != 1:
            continue
        groups.setdefault(_wiring(run, index, start), []).append(start)
    largest = max(groups.values(), key=len, default=[])
    if len(largest) < 2:
        return None
    return Match(tuple(largest), match.length, match.value)


def _wiring(run: Sequence[Op], index: dict[int, int], start: int) -> tuple:
    """How the ops of ``run`` read their inputs: from an op of the run (its offset and
    output) or from outside (the order in which the run first reads that tensor)."""
    outside: dict[str, int] = {}
    wiring = []
    for offset, op in enumerate(run):
        for slot, tensor in sorted(op.input_map().items()):
            producer = tensor.producer
            if is_constant(tensor):  # equal in every occurrence (the op's class says so)
                wiring.append((offset, slot, "constant"))
            elif producer is not None and start <= index.get(producer.id, -1) < start + len(run):
                wiring.append((offset, slot, "run", index[producer.id] - start,
                               _output_index(producer, tensor)))
            else:
                wiring.append((offset, slot, "outside",
                               outside.setdefault(tensor.id, len(outside))))
    return tuple(wiring)


def _output_index(op: Op, tensor: Tensor) -> int:
    return next(i for i, out in op.output_map().items() if out is tensor)


def _outside_inputs(run: Sequence[Op]) -> list[Tensor]:
    """The tensors the run reads from outside, in the order it first reads them
    (constants aside: the subgraph holds its own copies)."""
    inside = {t.id for op in run for t in op.outputs}
    found: dict[str, Tensor] = {}
    for op in run:
        for _, tensor in sorted(op.input_map().items()):
            if tensor.id not in inside and not is_constant(tensor):
                found.setdefault(tensor.id, tensor)
    return list(found.values())


def _results(ops: Sequence[Op], match: Match) -> list[tuple[int, int]]:
    """(offset, output index) of every result some occurrence hands on beyond its run."""
    needed = set()
    for start in match.starts:
        run = ops[start:start + match.length]
        members = {op.id for op in run}
        for offset, op in enumerate(run):
            for slot, tensor in op.output_map().items():
                if any(reader.id not in members for reader in tensor.consumers):
                    needed.add((offset, slot))
    return sorted(needed)


def _outline(ir: Ir, ops: Sequence[Op], match: Match, rewriter: Rewriter,
             position: dict[int, int]) -> None:
    """Build the subgraph from the first occurrence, then call it at every one."""
    template = ops[match.starts[0]:match.starts[0] + match.length]
    results = _results(ops, match)
    graph_id = _free_graph_id(ir)
    callee = rewriter.create_graph(ir, graph_id)
    inner: dict[str, Tensor] = {}
    for tensor in _outside_inputs(template):
        inner[tensor.id] = rewriter.add_graph_input(
            callee, reserved_id(callee, TRANSFORM_PREFIX, tensor.id), tensor.dtype,
            tensor.shape)
    for op in template:
        for tensor in op.inputs:
            if is_constant(tensor) and tensor.id not in inner:
                inner[tensor.id] = rewriter.constant(callee, tensor.data, dtype=tensor.dtype,
                                                     stem=tensor.id.removeprefix(CONSTANT_PREFIX))
    clones = []
    for op in template:
        inputs = [inner[op.input(i).id] if op.has_input(i) else None
                  for i in range(max(op.input_map(), default=-1) + 1)]
        clone = rewriter.create_op(callee, op.type, inputs, dict(op.attributes), like=op,
                                   num_outputs=max(op.output_map(), default=-1) + 1)
        rewriter.set_op_name(clone, op.settings.name or f"{op.type.name}{op.id}")
        for slot, tensor in op.output_map().items():
            inner[tensor.id] = clone.output(slot)
        clones.append(clone)
    for offset, slot in results:
        rewriter.add_graph_output(callee, clones[offset].output(slot))
    for number, start in enumerate(match.starts):
        run = ops[start:start + match.length]
        call = rewriter.create_op(ir.main_graph, CALL, _outside_inputs(run),
                                  {"callee": graph_id}, like=run[0],
                                  num_outputs=len(results))
        rewriter.set_op_name(call, f"{graph_id}/call{number}")
        position[call.id] = position[run[0].id]
        for output, (offset, slot) in enumerate(results):
            rewriter.replace_all_uses(run[offset].output(slot), call.output(output))
        read = {t.id: t for op in run for t in op.inputs if is_constant(t)}
        for op in reversed(run):
            rewriter.erase_op(op)
        for tensor in read.values():  # a constant only the run read goes with it
            if not tensor.num_uses() and not tensor.is_graph_output():
                rewriter.remove_tensor(tensor)


def _free_graph_id(ir: Ir) -> str:
    number = 0
    while ir.has_graph(f"{OUTLINED_GRAPH_STEM}{number}"):
        number += 1
    return f"{OUTLINED_GRAPH_STEM}{number}"


# -- repeats: a suffix array and its longest common prefixes ------------------------------
def suffix_array(tokens: Sequence[int]) -> np.ndarray:
    """The starts of ``tokens``' suffixes in sorted order (prefix doubling)."""
    count = len(tokens)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    rank = np.unique(np.asarray(tokens, dtype=np.int64), return_inverse=True)[1]
    rank = rank.astype(np.int64)
    order = np.argsort(rank, kind="stable")
    step = 1
    while step < count:
        second = np.full(count, -1, dtype=np.int64)
        second[:count - step] = rank[step:]
        order = np.lexsort((second, rank))
        changes = ((rank[order][1:] != rank[order][:-1])
                   | (second[order][1:] != second[order][:-1]))
        rank = np.empty(count, dtype=np.int64)
        rank[order] = np.concatenate(([0], np.cumsum(changes)))
        if rank[order[-1]] == count - 1:
            break
        step *= 2
    return order


def longest_common_prefixes(tokens: Sequence[int], order: np.ndarray) -> list[int]:
    """Entry i: how many tokens the suffixes at ``order[i - 1]`` and ``order[i]`` share
    (0 for i = 0), by Kasai's method."""
    count = len(tokens)
    rank = [0] * count
    for i, start in enumerate(order.tolist()):
        rank[start] = i
    shared = [0] * count
    common = 0
    for start in range(count):
        if rank[start] == 0:
            common = 0
            continue
        previous = int(order[rank[start] - 1])
        while (start + common < count and previous + common < count
               and tokens[start + common] == tokens[previous + common]):
            common += 1
        shared[rank[start]] = common
        common = max(common - 1, 0)
    return shared


def repeats(tokens: Sequence[int]) -> Iterator[tuple[int, list[int]]]:
    """Each maximal group of suffixes sharing a prefix of at least one token: (the prefix's
    length, the suffixes' starts in increasing order)."""
    order = suffix_array(tokens)
    shared = longest_common_prefixes(tokens, order)
    stack: list[tuple[int, int]] = [(0, 0)]  # (shared length, first index in ``order``)
    starts = order.tolist()
    for i in range(1, len(tokens) + 1):
        here = shared[i] if i < len(tokens) else 0
        left = i - 1
        while here < stack[-1][0]:
            length, left = stack.pop()
            yield length, sorted(starts[left:i])
        if here > stack[-1][0]:
            stack.append((here, left))
