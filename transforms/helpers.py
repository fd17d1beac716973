"""What every transform needs to keep the IR in order (PopART's transform notes, "things to
consider"): call sites stay in step when a subgraph's inputs or outputs change, and
reachability is one definition. New ops that inherit placement and carry a reserved prefix
are ``Rewriter.create_op``'s; every change here goes through the rewriter passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from popart_unwind.errors import IrError
from popart_unwind.ir import CallOp, IfOp, LoopOp, SubgraphOp

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Ir, Op
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


# -- removing subgraph inputs ------------------------------------------------------------
def remove_subgraph_input(graph: Graph, index: int, rewriter: Rewriter) -> None:
    """Remove input ``index`` of subgraph ``graph`` (it must be unused) and the matching
    input of every call site, renumbering the inputs after it on both sides.

    Call and Loop map indices positionally, so their later inputs move down by one; If
    keeps explicit maps, which are rewritten, and drops an op input only when no branch
    reads it any more. Loop body inputs 0 and 1 (iteration number, condition) are fixed.
    """
    _check_subgraph_index(graph, index, graph.input_ids, "input")
    tensor = graph.inputs[index]
    if tensor.num_uses() or tensor.is_graph_output():
        raise IrError(f"input {index} ({tensor.id!r}) of graph {graph.id!r} is still used; "
                      f"only an unused subgraph input can be removed")
    sites = call_sites(graph)
    for op in sites:
        if isinstance(op, LoopOp) and index < 2:
            raise IrError(f"body input {index} of Loop {op.debug_name()} (iteration number "
                          f"or condition) cannot be removed")
        _check_known_call_site(op)
    rewriter.remove_graph_input(graph, index)
    for op in sites:
        if isinstance(op, IfOp):
            _if_remove_branch_input(op, graph, index, rewriter)
        else:
            _shift_inputs_down(op, index, rewriter)


def _shift_inputs_down(op: Op, removed: int, rewriter: Rewriter) -> None:
    """Drop op input ``removed`` (if connected) and move every later input down by one."""
    rewriter.set_input(op, removed, None)
    for index in [i for i in op.input_map() if i > removed]:
        rewriter.move_input(op, index, index - 1)


def _if_remove_branch_input(op: IfOp, branch: Graph, removed: int,
                            rewriter: Rewriter) -> None:
    affected: list[int] = []
    for prefix in _branch_prefixes(op, branch):
        pairs = op.attributes[f"{prefix}_inputs"]
        affected += [op_in for op_in, branch_in in pairs if branch_in == removed]
        rewriter.set_attribute(op, f"{prefix}_inputs", sorted(
            [op_in, branch_in - (branch_in > removed)]
            for op_in, branch_in in pairs if branch_in != removed))
    still_read = {op_in for prefix in ("then", "else")
                  for op_in, _ in op.attributes[f"{prefix}_inputs"]}
    for op_in in sorted(set(affected) - still_read - {0}, reverse=True):  # 0: condition
        _shift_inputs_down(op, op_in, rewriter)
        for prefix in ("then", "else"):
            rewriter.set_attribute(op, f"{prefix}_inputs", [
                [i - (i > op_in), b] for i, b in op.attributes[f"{prefix}_inputs"]])


# -- removing subgraph outputs -----------------------------------------------------------
def remove_subgraph_output(graph: Graph, index: int, rewriter: Rewriter) -> None:
    """Remove output ``index`` of subgraph ``graph`` and the matching output of every call
    site (which must be unused), renumbering the outputs after it on both sides.

    The tensor itself stays in the subgraph (Prune removes it if nothing else reads it).
    Loop body output 0 (the continue condition) is fixed. For a Loop, removing a carried
    output does not remove its carried input: pair it with :func:`remove_subgraph_input`.
    """
    _check_subgraph_index(graph, index, graph.output_ids, "output")
    sites = call_sites(graph)
    dropped: list[tuple[SubgraphOp, int | None]] = []
    for op in sites:
        _check_known_call_site(op)
        if isinstance(op, LoopOp) and index == 0:
            raise IrError(f"body output 0 of Loop {op.debug_name()} (the continue "
                          f"condition) cannot be removed")
        op_out = op.subgraph_out_to_op_out_index(graph, index)
        if op_out is not None:
            tensor = op.output(op_out)
            if tensor.num_uses() or tensor.is_graph_output():
                raise IrError(f"cannot remove output {index} of graph {graph.id!r}: output "
                              f"{op_out} ({tensor.id!r}) of call site {op.debug_name()} "
                              f"is still used")
        dropped.append((op, op_out))
    rewriter.remove_graph_output(graph, index)
    for op, op_out in dropped:
        if isinstance(op, IfOp):
            _if_remove_branch_output(op, graph, index, op_out, rewriter)
        else:  # Call: op output j is graph output j; Loop: op output j is body output j + 1
            _shift_outputs_down(op, index if isinstance(op, CallOp) else index - 1, rewriter)


def _shift_outputs_down(op: Op, removed: int, rewriter: Rewriter) -> None:
    """Drop op output ``removed`` (and its tensor) and move every later output down by one."""
    if op.has_output(removed):
        rewriter.remove_output(op, removed)
    for index in [j for j in op.output_map() if j > removed]:
        rewriter.move_output(op, index, index - 1)


def _if_remove_branch_output(op: IfOp, branch: Graph, removed: int, op_out: int | None,
                             rewriter: Rewriter) -> None:
    """An If output exists only while both branches produce it, so when one branch loses
    it the op output goes, and with it the other branch's pair."""
    for prefix in _branch_prefixes(op, branch):
        rewriter.set_attribute(op, f"{prefix}_outputs", sorted(
            [o, b - (b > removed)]
            for o, b in op.attributes[f"{prefix}_outputs"] if b != removed))
    if op_out is None:
        return
    _shift_outputs_down(op, op_out, rewriter)
    for prefix in ("then", "else"):
        rewriter.set_attribute(op, f"{prefix}_outputs", [
            [o - (o > op_out), b] for o, b in op.attributes[f"{prefix}_outputs"] if o != op_out])


# -- shared checks -----------------------------------------------------------------------
def _branch_prefixes(op: IfOp, branch: Graph) -> list[str]:
    """Which of the If's branches are ``branch`` (both, when one graph serves as both)."""
    return [p for p in ("then", "else") if op.attributes[f"{p}_branch"] == branch.id]


def _check_subgraph_index(graph: Graph, index: int, ids: list[str], what: str) -> None:
    if graph is graph.ir.main_graph:
        raise IrError(f"the main graph's {what}s are the model's interface; only subgraph "
                      f"{what}s can be removed this way")
    if not 0 <= index < len(ids):
        raise IrError(f"graph {graph.id!r} has {len(ids)} {what}s; there is no {what} {index}")


def _check_known_call_site(op: SubgraphOp) -> None:
    if not isinstance(op, CallOp | LoopOp | IfOp):
        raise IrError(f"cannot keep call site {op.debug_name()} in step: its class "
                      f"{type(op).__name__} is not Call, Loop or If")
