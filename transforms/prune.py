"""Prune: remove the ops, tensors and graphs that nothing needs.

PopART splits this between its ``Prune`` transform and ``Ir::removeIsolatedTensors`` /
``removeIsolatedGraphs``; here it is one transform over the whole IR.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformError
from popart_unwind.ir import TensorType
from popart_unwind.ops import OpRegistry

from .base import ALL_CONDITIONS, Transform
from .conditions import is_inplace
from .helpers import reachable_graphs, unreachable_graphs
from .registry import register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Ir, Op
    from popart_unwind.rewrite import Rewriter


@register
@dataclasses.dataclass(frozen=True)
class Prune(Transform):
    """Keeps exactly what the graph outputs and the side effects depend on.

    In each reachable graph, an op is required if it produces a graph output, has side
    effects (its OpDef says so, it is opaque, it works in place, or a graph it calls has
    such an op), or produces an input of a required op. The rest go, then the tensors
    nobody produces or reads (unused weights and constants: they would get a layout for
    nothing), then the graphs nothing reachable calls any more.

    Kept always: graph inputs and outputs (the main graph's are the model's interface; a
    subgraph's are tied to its call sites) and Stream tensors (host I/O). A main graph left
    with no op at all is an error, as in PopART: the model computes nothing.

    Preserves every condition: it only removes, and no condition can be broken by
    removing ops, tensors or uncalled graphs.
    """

    id = 3
    name = "Prune"
    preserves = ALL_CONDITIONS

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        had_ops = bool(ir.main_graph.ops)
        effects = _SideEffects(self.op_registry)
        changed = False
        for reachable in reachable_graphs(ir):
            changed |= _prune_graph(reachable, effects, rewriter)
        changed |= _remove_unreachable_graphs(ir, rewriter)
        if had_ops and not ir.main_graph.ops:
            raise TransformError("Prune removed every op of the main graph: no graph output "
                                 "or side effect depends on any of them (mark the model's "
                                 "outputs)")
        return changed


class _SideEffects:
    """Whether an op must stay although nothing reads its outputs (memoised per graph)."""

    def __init__(self, registry: OpRegistry) -> None:
        self.registry = registry
        self._graphs: dict[str, bool] = {}

    def of_op(self, op: Op) -> bool:
        return self.registry.has_side_effects(op) or is_inplace(op, self.registry) \
            or any(self.of_graph(callee) for callee in op.called_graphs())

    def of_graph(self, graph: Graph) -> bool:
        if graph.id not in self._graphs:
            self._graphs[graph.id] = False  # a call cycle adds nothing new
            self._graphs[graph.id] = any(self.of_op(op) for op in graph.ops)
        return self._graphs[graph.id]


def _prune_graph(graph: Graph, effects: _SideEffects, rewriter: Rewriter) -> bool:
    front = [t.producer for t in graph.outputs if t.producer is not None]
    front += [op for op in graph.ops if effects.of_op(op)]
    required: set[int] = set()
    while front:
        op = front.pop()
        if op.id in required:
            continue
        required.add(op.id)
        front += [t.producer for t in op.inputs if t.producer is not None]
    dead = [op for op in reversed(graph.schedule()) if op.id not in required]
    for op in dead:  # consumers before producers, so every output is unused when erased
        rewriter.erase_op(op)
    isolated = [t for t in graph.tensors
                if t.producer is None and not t.consumers and not t.is_graph_input()
                and not t.is_graph_output() and t.tensor_type is not TensorType.STREAM]
    for tensor in isolated:
        rewriter.remove_tensor(tensor)
    return bool(dead or isolated)


def _remove_unreachable_graphs(ir: Ir, rewriter: Rewriter) -> bool:
    """Remove the graphs nothing reachable calls. Their outputs and ops go first, so that
    a dead graph calling another dead graph (or itself) no longer counts as its caller."""
    dead = unreachable_graphs(ir)
    for graph in dead:
        for index in reversed(range(len(graph.output_ids))):
            rewriter.remove_graph_output(graph, index)
        for op in reversed(graph.schedule()):
            rewriter.erase_op(op)
    for graph in dead:
        rewriter.remove_graph(graph)
    return bool(dead)
