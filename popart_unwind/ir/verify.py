"""Structural invariants of an IR, checked on request (tests turn it on everywhere).

Each failure raises ``IrError`` naming the graph, op or tensor and what was expected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from popart_unwind.errors import IrError
from popart_unwind.ir.op import SubgraphOp
from popart_unwind.ir.tensor import TensorType

if TYPE_CHECKING:
    from popart_unwind.ir.graph import Graph
    from popart_unwind.ir.ir import Ir


def verify_ir(ir: Ir, require_shapes: bool = True) -> None:
    for graph in ir.graphs:
        _verify_links(graph)
        _verify_boundaries(graph)
        _verify_tensors(graph, require_shapes)
        graph.schedule()  # raises on a cycle
        for op in graph.ops:
            if isinstance(op, SubgraphOp):
                _verify_call_site(op)


def _where(graph: Graph) -> str:
    return f"graph {graph.id!r}" if graph.id else "the main graph"


def _verify_links(graph: Graph) -> None:
    """Producers and consumers agree with op inputs and outputs, within one graph."""
    for op in graph.ops:
        for index, tensor in op.input_map().items():
            if tensor.graph is not graph or graph.tensor(tensor.id) is not tensor:
                raise IrError(f"op {op.debug_name()} input {index} ({tensor.id!r}) is not a "
                              f"tensor of {_where(graph)}")
            if op not in tensor.consumers:
                raise IrError(f"tensor {tensor.id!r} does not list consumer {op.debug_name()}")
        for index, tensor in op.output_map().items():
            if tensor.producer is not op:
                raise IrError(f"tensor {tensor.id!r} (output {index} of {op.debug_name()}) "
                              f"names another producer")
    for tensor in graph.tensors:
        if tensor.producer is not None and tensor.producer.graph is not graph:
            raise IrError(f"tensor {tensor.id!r} is produced in another graph")
        uses = sum(1 for op in tensor.consumers for t in op.inputs if t is tensor)
        if uses != tensor.num_uses():
            raise IrError(f"tensor {tensor.id!r} counts {tensor.num_uses()} uses, has {uses}")


def _verify_boundaries(graph: Graph) -> None:
    for tensor_id in graph.input_ids:
        tensor = graph.tensor(tensor_id)
        if tensor.producer is not None:
            raise IrError(f"graph input {tensor_id!r} of {_where(graph)} has producer "
                          f"{tensor.producer.debug_name()}; graph inputs have none")
    if len(set(graph.input_ids)) != len(graph.input_ids):
        raise IrError(f"{_where(graph)} lists an input twice")
    for tensor_id in graph.output_ids:
        graph.tensor(tensor_id)


def _verify_tensors(graph: Graph, require_shapes: bool) -> None:
    for tensor in graph.tensors:
        if require_shapes and tensor.shape is None:
            raise IrError(f"tensor {tensor.id!r} of {_where(graph)} has no shape")
        holds_data = tensor.tensor_type in (TensorType.CONST, TensorType.VARIABLE)
        if tensor.tensor_type is TensorType.CONST and tensor.data is None:
            raise IrError(f"constant {tensor.id!r} has no data")
        if holds_data and tensor.producer is not None:
            raise IrError(f"{tensor.tensor_type.value} tensor {tensor.id!r} has producer "
                          f"{tensor.producer.debug_name()}")
        if tensor.data is not None and tensor.shape is not None \
                and tuple(tensor.data.shape) != tensor.shape:
            raise IrError(f"tensor {tensor.id!r}: data shape {tensor.data.shape} differs from "
                          f"its shape {tensor.shape}")
        if tensor.tensor_type is TensorType.ACT_GRAD and tensor.producer is None \
                and not tensor.is_graph_input():
            raise IrError(f"tensor {tensor.id!r} of {_where(graph)} has no producer and is "
                          f"not a graph input, constant, variable or stream")


def _verify_call_site(op: SubgraphOp) -> None:
    """Every mapped index exists on both sides, and mapped tensors agree in shape."""
    for callee in op.called_graphs():
        for op_in, tensor in op.input_map().items():
            graph_in = op.op_in_to_subgraph_in_index(callee, op_in)
            if graph_in is None:
                continue
            if graph_in >= len(callee.input_ids):
                raise IrError(f"op {op.debug_name()} input {op_in} maps to input {graph_in} "
                              f"of graph {callee.id!r}, which has {len(callee.input_ids)}")
            if not op.stacked_input(op_in):
                _same_shape(op, tensor, callee.inputs[graph_in])
        for op_out, tensor in op.output_map().items():
            graph_out = op.op_out_to_subgraph_out_index(callee, op_out)
            if graph_out is None or graph_out >= len(callee.output_ids):
                raise IrError(f"op {op.debug_name()} output {op_out} has no counterpart "
                              f"among the {len(callee.output_ids)} outputs of {callee.id!r}")
            if not op.stacked_output(op_out):
                _same_shape(op, tensor, callee.outputs[graph_out])


def _same_shape(op: SubgraphOp, outer, inner) -> None:
    if outer.shape is not None and inner.shape is not None and outer.shape != inner.shape:
        raise IrError(f"op {op.debug_name()}: {outer.id!r} {outer.shape} and subgraph "
                      f"tensor {inner.id!r} {inner.shape} differ in shape")
