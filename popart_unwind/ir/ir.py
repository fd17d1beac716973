"""The whole program, modelled on PopART's ``Ir``: graphs by id, a main graph, options."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popart_unwind.doors import entry_point
from popart_unwind.errors import IrError
from popart_unwind.ir.graph import Graph
from popart_unwind.options import SessionOptions

#: How far a copy's ids for new ops start past the original's (``Ir.copy``).
COPY_OP_ID_GAP = 1 << 40

if TYPE_CHECKING:
    import onnx

    from popart_unwind.ir.serialize import DataChoice

MAIN_GRAPH_ID = ""


class Ir:
    """Owns every graph; op ids are unique across the whole IR, as in PopART."""

    def __init__(self, options: SessionOptions | None = None) -> None:
        self.options = options or SessionOptions()
        self._graphs: dict[str, Graph] = {MAIN_GRAPH_ID: Graph(self, MAIN_GRAPH_ID)}
        self._op_counter = 0
        self.metadata: dict[str, str] = {}  # where the model came from, for reports
        #: The main graph's tensor the backward pass starts from, in a training step
        #: (PopART's ``finalLossId``); None for a graph that trains nothing.
        self.final_loss_id: str | None = None

    @property
    def main_graph(self) -> Graph:
        return self._graphs[MAIN_GRAPH_ID]

    def graph(self, graph_id: str) -> Graph:
        try:
            return self._graphs[graph_id]
        except KeyError:
            raise IrError(f"no graph with id {graph_id!r}") from None

    def has_graph(self, graph_id: str) -> bool:
        return graph_id in self._graphs

    @property
    def graphs(self) -> list[Graph]:
        """The main graph first, then subgraphs in id order."""
        return [self._graphs[g] for g in sorted(self._graphs)]

    def create_graph(self, graph_id: str) -> Graph:
        if not graph_id:
            raise IrError("subgraph ids must be non-empty (\"\" is the main graph)")
        if graph_id in self._graphs:
            raise IrError(f"graph {graph_id!r} already exists")
        graph = Graph(self, graph_id)
        self._graphs[graph_id] = graph
        return graph

    def remove_graph(self, graph_id: str) -> None:
        if graph_id == MAIN_GRAPH_ID:
            raise IrError("the main graph cannot be removed")
        callers = [op for g in self.graphs for op in g.ops
                   if graph_id in (c.id for c in op.called_graphs())]
        if callers:
            raise IrError(f"graph {graph_id!r} is still called by {callers[0].debug_name()}")
        del self._graphs[self.graph(graph_id).id]

    def callees_first(self) -> list[Graph]:
        """Every graph once, each after the graphs it calls (then in ``graphs`` order):
        the order analyses that need a callee's results at its call sites walk in."""
        order: list[Graph] = []
        state: dict[str, str] = {}

        def visit(graph: Graph) -> None:
            if state.get(graph.id) == "done":
                return
            if state.get(graph.id) == "open":
                raise IrError(f"graph {graph.id!r} calls itself; recursion is not supported")
            state[graph.id] = "open"
            for op in graph.schedule():
                for callee in op.called_graphs():
                    visit(callee)
            state[graph.id] = "done"
            order.append(graph)

        for graph in self.graphs:
            visit(graph)
        return order

    def all_ops(self) -> list:
        return [op for graph in self.graphs for op in graph.ops]

    def _next_op_id(self) -> int:
        self._op_counter += 1
        return self._op_counter - 1

    # -- checking and serialising --------------------------------------------------------
    def verify(self, require_shapes: bool = True) -> None:
        """Raise ``IrError`` naming the first broken invariant (see ``ir.verify``)."""
        from popart_unwind.ir.verify import verify_ir

        verify_ir(self, require_shapes=require_shapes)

    def to_json(self, include_data: DataChoice = False) -> str:
        """Stable JSON: equal IRs give byte-identical text (see ``ir.serialize``);
        ``include_data``: every tensor's data in full, none, or a predicate's choice."""
        from popart_unwind.ir.serialize import ir_to_json

        return ir_to_json(self, include_data=include_data)

    def copy(self, exact: bool = False) -> Ir:
        """A copy of the whole IR (graphs, ops and their ids, placement, the loss, options,
        metadata) sharing each tensor's data array with this one: transforms replace a
        tensor's data, never change it in place, so two placements of one model (ours and
        the PopART baseline's) need the weights once. Ops created in the copy afterwards
        take ids from ``COPY_OP_ID_GAP`` on past this IR's. With ``exact`` they take the
        ids this IR would give them, and each graph keeps its tensors in the order this
        one made them (the stable JSON lists them by id), so that transforming and
        planning the copy gives what this IR would: the model as imported, kept for the
        memory search instead of importing it again."""
        held = {(graph.id, tensor.id): tensor.data for graph in self.graphs
                for tensor in graph.tensors if tensor.data is not None}
        for graph_id, tensor_id in held:  # no digest of every weight for a copy
            self.graph(graph_id).tensor(tensor_id).data = None
        try:
            text = self.to_json()
        finally:
            for (graph_id, tensor_id), data in held.items():
                self.graph(graph_id).tensor(tensor_id).data = data
        other = Ir.from_json(text)
        for (graph_id, tensor_id), data in held.items():
            other.graph(graph_id).tensor(tensor_id).data = data
        other.options, other.metadata = self.options, dict(self.metadata)
        # ops made later in the copy never share an id with ops made later in this IR,
        # so that reports pairing the two IRs' ops by id pair only ops both have
        other._op_counter = self._op_counter + COPY_OP_ID_GAP
        if exact:
            other._op_counter = self._op_counter
            for graph in self.graphs:
                copied = other.graph(graph.id)
                copied._tensors = {t.id: copied._tensors[t.id] for t in graph.tensors}
        return other

    @classmethod
    def from_json(cls, text: str) -> Ir:
        from popart_unwind.ir.serialize import ir_from_json

        return ir_from_json(text)

    # -- front ends (doors they provide: ``popart_unwind.doors``) ---------------------------
    @classmethod
    def from_onnx(cls, model: str | Path | bytes | onnx.ModelProto,
                  options: SessionOptions | None = None, **import_options: Any) -> Ir:
        """Import an ONNX model (a path, with external data beside it, bytes or a
        ModelProto); ``import_options``: ``input_shapes``, ``dims``, ``base_dir`` (see the
        importer)."""
        return entry_point("onnx")(model, options=options, **import_options)

    @classmethod
    def from_torch(cls, module: Any, example_args: tuple, training: bool = False,
                   options: SessionOptions | None = None,
                   blocks: Mapping[str, int] | None = None, optimizer: Any = None,
                   **training_options: Any) -> Ir:
        """Import a PyTorch module through ``torch.export`` (needs the ``torch`` extra).

        With ``training=True`` the graph is one training step: forward, loss, backward
        and an SGD update of every parameter, or, given ``optimizer`` (a
        ``popart_unwind.training.optimizers.Optimizer``), that optimizer's updates and
        states built in the IR. ``blocks`` ({submodule name: IPU}) places the forward pass
        on IPUs as PopTorch's ``BeginBlock`` does (docs/multi-ipu.md).
        """
        return entry_point("torch")(module, example_args, training=training, options=options,
                                    blocks=blocks, optimizer=optimizer, **training_options)
