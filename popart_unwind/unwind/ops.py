"""The op kinds of the UnwindGraph, each with all of its rules in one place.

For every kind this module says which outputs are *roots* (new origins), what a root's
layout depends on, how each element of a non-root output derives from one input element
(forward edges: a Chain from the input and the output region it covers), and how a layout
wanted at an output unwinds back to an input (unwind routes).

| kind | outputs | forward | unwind (output -> input) |
| --- | --- | --- | --- |
| sink | chosen by the solver | - | - |
| source | root, depends on nothing | - | - |
| barrier | roots, depend on every input | - | - |
| fixed_point | roots, depend on nothing | - | - |
| sum_like_reduce | root, depends on its input | - | - |
| view | one | the op's Chain | the Chain unwound (Expand: lowest index) |
| concat | one | input i fills its slab | sample of slab i |
| sum_like | one | from the first unwind input | to any unwind input |
"""

from __future__ import annotations

from dataclasses import dataclass

from popart_unwind.memory import Chain, Region
from popart_unwind.memory.chain_ops import ChainOp, expanded_axes

ROOT_KINDS = frozenset({"source", "barrier", "fixed_point", "sum_like_reduce"})
DEPENDENT_ROOT_KINDS = frozenset({"barrier", "sum_like_reduce"})
#: Roots whose layouts depend on nothing: depending on them can never close a cycle.
FREE_ROOT_KINDS = ROOT_KINDS - DEPENDENT_ROOT_KINDS


@dataclass(frozen=True)
class Node:
    """An op of the UnwindGraph: its kind, input tensors and attributes."""

    kind: str
    inputs: tuple  # of TensorId
    chain: Chain | None = None  # view ops: input -> output
    axis: int = 0  # concat
    unwind_indices: tuple[int, ...] = ()  # sum_like


@dataclass(frozen=True)
class Edge:
    """Every element of ``region`` (in the output) is the element ``chain`` brings from
    ``src``: the output's layout there is ``chain`` applied to ``src``'s layout."""

    src: object  # TensorId
    chain: Chain
    region: Region


def concat_slab(out_shape: tuple[int, ...], axis: int, start: int, size: int) -> Region:
    lower = [0] * len(out_shape)
    upper = list(out_shape)
    lower[axis], upper[axis] = start, start + size
    return Region.from_bounds(out_shape, lower, upper)


def forward_edges(node: Node, out_shape: tuple[int, ...], in_shapes: list) -> list[Edge]:
    """How each element of a non-root output derives from one input element."""
    if node.kind == "view":
        return [Edge(node.inputs[0], node.chain, Region.full(out_shape))]
    if node.kind == "sum_like":
        first = node.unwind_indices[0]
        return [Edge(node.inputs[first], Chain(out_shape), Region.full(out_shape))]
    if node.kind == "concat":
        edges, start = [], 0
        for tensor, shape in zip(node.inputs, in_shapes, strict=True):
            slab = concat_slab(out_shape, node.axis, start, shape[node.axis])
            edges.append(Edge(tensor, Chain(shape).sett_fill_into(slab), slab))
            start += shape[node.axis]
        return edges
    return []


def unwind_routes(node: Node, out_shape: tuple[int, ...], in_shapes: list) -> list[tuple]:
    """(input tensor, Chain from the output back to that input) for each way a layout
    wanted at the output can be given to an input."""
    if node.kind == "view":
        return [(node.inputs[0], unwind_chain(node.chain))]
    if node.kind == "sum_like":
        return [(node.inputs[i], Chain(out_shape)) for i in node.unwind_indices]
    if node.kind == "concat":
        routes, start = [], 0
        for tensor, shape in zip(node.inputs, in_shapes, strict=True):
            slab = concat_slab(out_shape, node.axis, start, shape[node.axis])
            routes.append((tensor, Chain(out_shape).sett_sample(slab)))
            start += shape[node.axis]
        return routes
    return []


def unwind_chain(chain: Chain) -> Chain:
    """The chain that takes a layout wanted at ``chain``'s output back to its input.

    Each op is inverted, except that an Expand is undone by taking the lowest index of each
    broadcast axis (every copy has one source element; the first is the canonical choice).
    """
    back = Chain(chain.out_shape)
    for op in reversed(chain.ops):
        if op.type == "Expand":
            back.sett_sample(_lowest_copies(op))
        else:
            back.append(*_inverse(op))
    return back


def _lowest_copies(expand: ChainOp) -> Region:
    lower = [0] * len(expand.out_shape)
    upper = list(expand.out_shape)
    for axis in expanded_axes(expand):
        upper[axis] = 1
    return Region.from_bounds(expand.out_shape, lower, upper)


def _inverse(op: ChainOp) -> tuple[str, object]:
    inverse = op.rule.inverse(op)
    return inverse.type, inverse.attr
