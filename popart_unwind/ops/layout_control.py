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

from popart_unwind.machine.exchange import read_need
from popart_unwind.machine.interface import ExchangeNeed, TileMachine
from popart_unwind.ops.layout_rule import CalleeLayouts, InputTiles, LayoutRule, UnwindEmitter

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
    runs_subgraphs = True

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

    def call_cost(self, op: Op, input_tiles: InputTiles, callees: CalleeLayouts,
                  target: TileMachine, valuations: Any
                  ) -> tuple[list[np.ndarray], ExchangeNeed, float, float]:
        """The op's output layouts — planned if the plan has them, else clones of the
        callee's outputs (as PopART's CallOpx makes them), else linear — and its copies in
        and out: (outputs, exchange, score, bound), the copies charged as exchange and
        scored as the planner's call ValuedPairs."""
        outputs = []
        for index, tensor in op.output_map().items():
            tiles = callees.planned(tensor)
            if tiles is None:
                found = copies_out(op, index)
                tiles = callees.tiles(found[0]) if found else target.linear_tiles(
                    tensor.shape, tensor.dtype)
            outputs.append(tiles)
        need = ExchangeNeed.none(target.num_tiles)
        score = bound = 0.0
        value = valuations.call_copy
        for source, destination, size in self._copies(op, input_tiles, outputs, callees,
                                                      target):
            need = need + read_need(destination, None, source, size, target.num_tiles)
            score += value * float(np.count_nonzero(source == destination))
            bound += value * float(source.size)
        return outputs, need, score, bound

    def _copies(self, op: Op, input_tiles: InputTiles, outputs: list[np.ndarray],
                callees: CalleeLayouts, target: TileMachine
                ) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """(source tiles, destination tiles, element bytes) of each copy the op makes: into
        each callee's inputs, out of its outputs, and (Loop) from one iteration's outputs to
        the next one's inputs — the copies the planner ties by call ValuedPairs."""
        copies = []
        for index, outer, inner in copies_in(op):
            copies.append((input_tiles[index], callees.tiles(inner),
                           target.dtype_size(outer.dtype)))
        for position, (index, tensor) in enumerate(op.output_map().items()):
            for inner in copies_out(op, index):
                copies.append((callees.tiles(inner), outputs[position],
                               target.dtype_size(tensor.dtype)))
        for body_out, body_in in loop_feedback(op):
            copies.append((callees.tiles(body_out), callees.tiles(body_in),
                           target.dtype_size(body_in.dtype)))
        return copies


SUBGRAPH = SubgraphRule()
