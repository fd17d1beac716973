"""What every transform needs to keep the IR in order (PopART's transform notes, "things to
consider"): call sites stay in step when a subgraph's inputs or outputs change, and
reachability is one definition. New ops that inherit placement and carry a reserved prefix
are ``Rewriter.create_op``'s; every change here goes through the rewriter passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from popart_unwind.errors import IrError
from popart_unwind.ir import SubgraphOp
from popart_unwind.ops.control import CallSite

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Ir
    from popart_unwind.rewrite import Rewriter


def reachable_graphs(ir: Ir) -> list[Graph]:
    """The graphs reachable from the main graph, in ``ir.graphs`` order.

    PopART's definition: an op reaches the graphs it calls; a graph reaches what its ops
    reach. An unreachable graph is dead code.
    """
    seen = {ir.main_graph.id}
    frontier = [ir.main_graph]
    while frontier:
        graph = frontier.pop()
        for op in graph.ops:
            for callee in op.called_graphs():
                if callee.id not in seen:
                    seen.add(callee.id)
                    frontier.append(callee)
    return [graph for graph in ir.graphs if graph.id in seen]


def unreachable_graphs(ir: Ir) -> list[Graph]:
    reachable = {graph.id for graph in reachable_graphs(ir)}
    return [graph for graph in ir.graphs if graph.id not in reachable]


def call_sites(graph: Graph) -> list[SubgraphOp]:
    """Every op (of any graph) that calls ``graph``, in graph then op-id order."""
    return [op for op in graph.ir.all_ops()
            if isinstance(op, SubgraphOp) and any(c is graph for c in op.called_graphs())]


# -- removing subgraph inputs and outputs ------------------------------------------------
def remove_subgraph_input(graph: Graph, index: int, rewriter: Rewriter) -> None:
    """Remove input ``index`` of subgraph ``graph`` (it must be unused) and the matching
    input of every call site, renumbering the inputs after it on both sides (each call
    site's class says how: ``CallSite.drop_subgraph_input``). Inputs that belong to the
    op itself (a Loop body's iteration number and condition) cannot be removed.
    """
    _check_subgraph_index(graph, index, graph.input_ids, "input")
    tensor = graph.inputs[index]
    if tensor.num_uses() or tensor.is_graph_output():
        raise IrError(f"input {index} ({tensor.id!r}) of graph {graph.id!r} is still used; "
                      f"only an unused subgraph input can be removed")
    sites = _editable_sites(graph, index, "input")
    rewriter.remove_graph_input(graph, index)
    for op in sites:
        op.drop_subgraph_input(graph, index, rewriter)


def remove_subgraph_output(graph: Graph, index: int, rewriter: Rewriter) -> None:
    """Remove output ``index`` of subgraph ``graph`` and the matching output of every call
    site (which must be unused), renumbering the outputs after it on both sides
    (``CallSite.drop_subgraph_output``).

    The tensor itself stays in the subgraph (Prune removes it if nothing else reads it).
    Outputs that belong to the op itself (a Loop body's continue condition) cannot be
    removed. For a Loop, removing a carried output does not remove its carried input: pair
    it with :func:`remove_subgraph_input`.
    """
    _check_subgraph_index(graph, index, graph.output_ids, "output")
    sites = _editable_sites(graph, index, "output")
    for op in sites:
        op_out = op.subgraph_out_to_op_out_index(graph, index)
        if op_out is not None:
            tensor = op.output(op_out)
            if tensor.num_uses() or tensor.is_graph_output():
                raise IrError(f"cannot remove output {index} of graph {graph.id!r}: output "
                              f"{op_out} ({tensor.id!r}) of call site {op.debug_name()} "
                              f"is still used")
    rewriter.remove_graph_output(graph, index)
    for op in sites:
        op.drop_subgraph_output(graph, index, rewriter)


# -- shared checks -----------------------------------------------------------------------
def _check_subgraph_index(graph: Graph, index: int, ids: list[str], what: str) -> None:
    if graph is graph.ir.main_graph:
        raise IrError(f"the main graph's {what}s are the model's interface; only subgraph "
                      f"{what}s can be removed this way")
    if not 0 <= index < len(ids):
        raise IrError(f"graph {graph.id!r} has {len(ids)} {what}s; there is no {what} {index}")


def _editable_sites(graph: Graph, index: int, what: str) -> list[CallSite]:
    """The call sites of ``graph``, each of a class that states its call-site edits and
    none owning subgraph ``what`` (input or output) ``index`` itself."""
    sites = call_sites(graph)
    for op in sites:
        if not isinstance(op, CallSite):
            raise IrError(f"cannot keep call site {op.debug_name()} in step: its class "
                          f"{type(op).__name__} states no call-site edits")
        owns = op.fixed_subgraph_input if what == "input" else op.fixed_subgraph_output
        if owns(graph, index):
            raise IrError(f"{what} {index} of graph {graph.id!r} belongs to its call site "
                          f"{op.debug_name()} and cannot be removed")
    return sites
