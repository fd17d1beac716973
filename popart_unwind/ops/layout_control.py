"""Layout rule of the ops that run subgraphs: Call, Loop and If.

PopART copies each op input into the subgraph's input tensor and each subgraph output
out to the op's output (``CallOpx``; Loop also copies each carried output back to the next
iteration's input). A copy between equal layouts moves nothing; so every copy becomes a
ValuedPair (``UnwindValuations.call_copy``) and each op output a new Sink tied to the
subgraph output(s) it receives — the planner lays call outputs out like producer-less
tensors. Subgraph inputs are Sinks of their own graph, planned once for all call sites.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from popart_unwind.ops.layout import (
    ExchangeNeed,
    LayoutRule,
    TileTarget,
    UnwindEmitter,
    read_need,
    tile_array_of,
)

if TYPE_CHECKING:
    from popart_unwind.ir.graph import Graph
    from popart_unwind.ir.op import Op
    from popart_unwind.ir.tensor import Tensor


def _same_shape(a: Tensor, b: Tensor) -> bool:
    return a.shape is not None and a.shape == b.shape


def copies_in(op: Op) -> list[tuple[int, Tensor, Tensor]]:
    """(op input index, op input, subgraph input) of every copy into a called graph."""
    found = []
    for graph in op.called_graphs():
        for index, tensor in op.input_map().items():
            inner = op.op_in_to_subgraph_in_index(graph, index)
            if inner is not None and inner < len(graph.input_ids) \
                    and _same_shape(tensor, graph.inputs[inner]):
                found.append((index, tensor, graph.inputs[inner]))
    return found


def copies_out(op: Op, index: int) -> list[Tensor]:
    """The subgraph outputs copied to op output ``index`` (one per called graph at most)."""
    found = []
    for graph in op.called_graphs():
        inner = op.op_out_to_subgraph_out_index(graph, index)
        if inner is not None and inner < len(graph.output_ids) \
                and _same_shape(graph.outputs[inner], op.output(index)):
            found.append(graph.outputs[inner])
    return found


def loop_feedback(op: Op) -> list[tuple[Tensor, Tensor]]:
    """(body output, body input) of each copy a Loop makes between iterations: the
    condition (output 0 -> input 1) and each carried value (output 1 + j -> input 2 + j)."""
    if op.type.name != "Loop":
        return []
    body: Graph = op.called_graphs()[0]
    slots = max(op.input_map(), default=-1) + 1
    carried = slots - 2 - int(op.attributes.get("num_implicit_inputs", 0))
    pairs = []
    for out, inp in [(0, 1), *((1 + j, 2 + j) for j in range(max(carried, 0)))]:
        if out < len(body.output_ids) and inp < len(body.input_ids) \
                and _same_shape(body.outputs[out], body.inputs[inp]):
            pairs.append((body.outputs[out], body.inputs[inp]))
    return pairs


class SubgraphRule(LayoutRule):
    """Call, Loop, If: copies in and out tied by ValuedPairs; outputs are new Sinks."""

    kind = "subgraph"

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        graph, value = emitter.graph, emitter.valuations.call_copy
        ins = copies_in(op)
        sources, first = [], {}
        for index in op.output_map():
            found = copies_out(op, index)
            if found:
                first[index] = found
                sources.append(emitter.tensor(found[0]))
        made = graph.call([emitter.tensor(outer) for _, outer, _ in ins],
                          [emitter.tensor(inner) for _, _, inner in ins], sources, value)
        sinks = iter(made)
        for index, tensor in op.output_map().items():
            if index in first:
                sink = next(sinks)
                emitter.define(tensor, sink)
                for other in first[index][1:]:  # If: the other branch's output too
                    graph.valued_pair(emitter.tensor(other), sink, value)
            else:
                emitter.sink(tensor)
        for body_out, body_in in loop_feedback(op):
            graph.valued_pair(emitter.tensor(body_out), emitter.tensor(body_in), value)

    def output_tiles(self, op: Op, input_tiles: list[np.ndarray | None],
                     target: TileTarget) -> list[np.ndarray]:
        """Planned call outputs keep their mappings; others are mapped linearly."""
        result = []
        for tensor in op.outputs:
            planned = _planned(tensor)
            result.append(planned if planned is not None
                          else target.linear_tiles(tensor.shape, tensor.dtype))
        return result

    def exchange(self, op: Op, input_tiles: list[np.ndarray | None],
                 output_tiles: list[np.ndarray], target: TileTarget) -> ExchangeNeed:
        """The copies in: each subgraph input element is received unless its tile holds
        the op input element already (copies out are the caller's to count, per site)."""
        need = ExchangeNeed.none(target.num_tiles)
        for index, outer, inner in copies_in(op):
            held = input_tiles[index] if index < len(input_tiles) else None
            planned = _planned(inner)
            if held is None or planned is None:
                continue
            need = need + read_need(planned, None, np.asarray(held),
                                    target.dtype_size(outer.dtype), target.num_tiles)
        return need

    def agreement(self, op: Op, input_tiles: list[np.ndarray | None], target: TileTarget,
                  valuations: Any) -> tuple[float, float]:
        """The copy-in pairs, and the copy-out pairs whose subgraph output is planned
        (producer-less); copies of computed subgraph outputs are scored per call site
        by the caller, which knows their layouts."""
        score = bound = 0.0
        value = valuations.call_copy
        for index, _, inner in copies_in(op):
            bound += value * inner.nelms()
            held = input_tiles[index] if index < len(input_tiles) else None
            planned = _planned(inner)
            if held is not None and planned is not None:
                score += value * int(np.count_nonzero(np.asarray(held).reshape(-1) == planned))
        for index, tensor in op.output_map().items():
            for inner in copies_out(op, index):
                if inner.producer is not None:
                    continue
                bound += value * tensor.nelms()
                a, b = _planned(inner), _planned(tensor)
                if a is not None and b is not None:
                    score += value * int(np.count_nonzero(a == b))
        return score, bound


def _planned(tensor: Tensor) -> np.ndarray | None:
    """A tensor's planned mapping as flat tiles, if it has a complete one."""
    if tensor.tile_mapping is None or tensor.shape is None:
        return None
    tiles = tile_array_of(tensor.tile_mapping, tensor.nelms())
    return None if (tiles < 0).any() else tiles


SUBGRAPH = SubgraphRule()
