"""Structural checks the registry runs around a transform when checking is on.

Besides the declared conditions, every transform must leave the IR well formed, keep call
sites in step with the subgraphs they call, and introduce no unreachable graph (PopART's
transform notes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from popart_unwind.errors import IrError
from popart_unwind.ir import SubgraphOp

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Ir, Tensor


def structural_violations(ir: Ir) -> list[str]:
    """Why ``ir`` is malformed: the first failed ``verify`` invariant, then call-site problems.

    Shapes are not required here (SHAPES_KNOWN is a condition of its own).
    """
    try:
        ir.verify(require_shapes=False)
    except IrError as error:
        return [str(error)]
    return call_site_violations(ir)


def call_site_violations(ir: Ir) -> list[str]:
    """Every disagreement between a Call/Loop/If op and the graphs it calls.

    Agreement means: each op input except an If's condition feeds some called graph; each
    subgraph input is fed (except a Loop body's iteration number and condition, whose op
    inputs are optional in ONNX); each op output comes from every called graph; mapped
    tensors agree in dtype and shape; and the index maps are inverse to each other.
    """
    violations: list[str] = []
    for op in ir.all_ops():
        if isinstance(op, SubgraphOp):
            violations += _call_site_violations(op)
    return violations


def _call_site_violations(op: SubgraphOp) -> list[str]:
    callees = list({graph.id: graph for graph in op.called_graphs()}.values())
    name = op.debug_name()
    problems = []
    for op_in, tensor in op.input_map().items():
        mapped = [(g, op.op_in_to_subgraph_in_index(g, op_in)) for g in callees]
        mapped = [(g, g_in) for g, g_in in mapped if g_in is not None]
        if not mapped and not op.feeds_no_subgraph(op_in):
            problems.append(f"input {op_in} ({tensor.id!r}) of {name} feeds no input of "
                            f"{_names(callees)}")
        for graph, g_in in mapped:
            if g_in >= len(graph.input_ids):
                problems.append(f"input {op_in} of {name} maps to input {g_in} of graph "
                                f"{graph.id!r}, which has {len(graph.input_ids)} inputs")
            else:
                if not op.stacked_input(op_in):  # a stacked input's callee reads slices
                    problems += _disagreement(name, tensor, graph.inputs[g_in])
                back = op.subgraph_in_to_op_in_index(graph, g_in)
                if back != op_in:
                    problems.append(f"{name}: input {op_in} maps to input {g_in} of "
                                    f"{graph.id!r}, which maps back to {back}")
    for graph in callees:
        for g_in, tensor_id in enumerate(graph.input_ids):
            optional = op.fixed_subgraph_input(graph, g_in)
            if not optional and op.subgraph_in_to_op_in_index(graph, g_in) is None:
                problems.append(f"input {g_in} ({tensor_id!r}) of graph {graph.id!r} is fed "
                                f"by no input of its call site {name}")
    for op_out, tensor in op.output_map().items():
        for graph in callees:
            g_out = op.op_out_to_subgraph_out_index(graph, op_out)
            if g_out is None or g_out >= len(graph.output_ids):
                problems.append(f"output {op_out} ({tensor.id!r}) of {name} has no "
                                f"counterpart among the outputs of graph {graph.id!r}")
                continue
            if not op.stacked_output(op_out):  # a stacked output gathers many runs
                problems += _disagreement(name, tensor, graph.outputs[g_out])
            back = op.subgraph_out_to_op_out_index(graph, g_out)
            if back != op_out:
                problems.append(f"{name}: output {op_out} maps to output {g_out} of "
                                f"{graph.id!r}, which maps back to {back}")
    return problems


def _disagreement(name: str, outer: Tensor, inner: Tensor) -> list[str]:
    """Dtype and shape mismatches, once both are inferred (a tensor created before shape
    inference has a placeholder dtype, so dtypes are compared only with shapes known)."""
    if outer.shape is None or inner.shape is None:
        return []
    if outer.dtype != inner.dtype:
        return [f"{name}: {outer.id!r} is {outer.dtype} but the subgraph tensor "
                f"{inner.id!r} it maps to is {inner.dtype}"]
    if outer.shape != inner.shape:
        return [f"{name}: {outer.id!r} has shape {outer.shape} but the subgraph tensor "
                f"{inner.id!r} it maps to has {inner.shape}"]
    return []


def _names(graphs: list[Graph]) -> str:
    return ", ".join(repr(g.id) for g in graphs) or "no graph"
