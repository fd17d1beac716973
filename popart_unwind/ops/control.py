"""Op family: control flow (Call, Loop, If, Scan): shapes come from the called graphs.

The index maps between an op and its subgraphs live on the op classes (``ir.op``); here are
the shape rules, and how op inputs type the subgraph inputs before a subgraph is inferred.
Implicit inputs (outer-scope values an ONNX body reads) come last on both sides; their
number is the attribute ``num_implicit_inputs`` (absent: none).

An op running a subgraph has side effects exactly when some op of the subgraph has.
``OpDef.side_effects`` therefore holds a predicate here; ``side_effects_of`` evaluates it.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op, SubgraphOp
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import constant_value, normalize_axis
from popart_unwind.ops.layout_control import SUBGRAPH
from popart_unwind.ops.registry import REGISTRY, OpDef, OpRegistry, register
from popart_unwind.ops.shape_inference import ShapeUndecided
from popart_unwind.rewrite import Rewriter

Typed = tuple[str, tuple[int, ...] | None]


def side_effects_of(op: Op, registry: OpRegistry = REGISTRY) -> bool:
    """Whether ``op`` has side effects: opaque ops have; a rule may be a predicate."""
    return registry.has_side_effects(op)


def body_has_side_effects(op: Op) -> bool:
    """True if any op of a called graph (or of the graphs those call) has side effects."""
    return any(side_effects_of(inner) for graph in op.called_graphs() for inner in graph.ops)


def _slots(op: Op) -> int:
    """Number of input positions, absent optional inputs included."""
    return max(op.input_map(), default=-1) + 1


def _explicit(op: Op, leading: int) -> int:
    """How many explicit inputs follow the ``leading`` fixed ones (Loop's M and cond)."""
    count = _slots(op) - leading - op.attributes.get("num_implicit_inputs", 0)
    if count < 0:
        raise ShapeError(f"op {op.debug_name()} has fewer inputs than its "
                         f"num_implicit_inputs attribute says")
    return count


def _typed(tensor: Tensor) -> Typed:
    return tensor.dtype, tensor.shape


def _body_outputs(op: Op, body: Graph, at_least: int) -> list[Tensor]:
    outputs = body.outputs
    if len(outputs) < at_least:
        raise ShapeError(f"op {op.debug_name()}: graph {body.id!r} has {len(outputs)} "
                         f"output(s), at least {at_least} expected")
    return outputs


# -- Call ---------------------------------------------------------------------------------
def _infer_call(op: Op) -> list[Typed]:
    callee = op.called_graphs()[0]
    for index, tensor in op.input_map().items():
        if index >= len(callee.input_ids):
            raise ShapeError(f"op {op.debug_name()} input {index} has no counterpart among "
                             f"the {len(callee.input_ids)} inputs of graph {callee.id!r}")
        inner = callee.inputs[index]
        if inner.shape is not None and inner.shape != tensor.shape:
            raise ShapeError(f"op {op.debug_name()}: input {index} {tensor.id!r} "
                             f"{tensor.shape} does not match {inner.id!r} {inner.shape} of "
                             f"graph {callee.id!r}")
    return [_typed(t) for t in callee.outputs]


# -- Loop ---------------------------------------------------------------------------------
def _passes_through(tensor: Tensor, source: Tensor) -> bool:
    while tensor is not source and tensor.producer is not None \
            and tensor.producer.is_type("Identity"):
        tensor = tensor.producer.input(0)
    return tensor is source


def loop_trip_count(op: Op) -> int | None:
    """The number of iterations when it is known before running: a constant M and a
    condition that never changes (passed through, or a constant true)."""
    body = op.called_graphs()[0]
    m = constant_value(op.input(0)) if op.has_input(0) else None
    if m is None or len(body.input_ids) < 2 or not body.output_ids:
        return None
    start = constant_value(op.input(1)) if op.has_input(1) else np.array(True)
    if start is None:
        return None
    if not bool(np.asarray(start).reshape(-1)[0]):
        return 0
    cond_out = body.outputs[0]
    held = constant_value(cond_out)
    if not (_passes_through(cond_out, body.inputs[1])
            or (held is not None and bool(np.asarray(held).reshape(-1)[0]))):
        return None
    return int(np.asarray(m).reshape(-1)[0])


def _infer_loop(op: Op) -> list[Typed]:
    body = op.called_graphs()[0]
    carried = _explicit(op, 2)
    outputs = _body_outputs(op, body, 1 + carried)
    results: list[Typed] = []
    for j in range(carried):
        outer, inner = op.input(2 + j), outputs[1 + j]
        varies = inner.shape is not None and inner.shape != outer.shape
        results.append((outer.dtype, None if varies else outer.shape))
    trips = loop_trip_count(op)
    for inner in outputs[1 + carried:]:
        known = trips is not None and inner.shape is not None
        results.append((inner.dtype, (trips, *inner.shape) if known else None))
    return results


# -- If -----------------------------------------------------------------------------------
def _infer_if(op: Op) -> list[Typed]:
    cond = op.input(0)
    if cond.shape is not None and int(np.prod(cond.shape)) != 1:
        raise ShapeError(f"op {op.debug_name()}: the condition must hold one element, got "
                         f"shape {cond.shape}")
    then_graph, else_graph = op.called_graphs()
    results: list[Typed] = []
    for index in range(max(op.output_map(), default=-1) + 1):
        sides = []
        for graph in (then_graph, else_graph):
            inner = op.op_out_to_subgraph_out_index(graph, index)
            if inner is None or inner >= len(graph.output_ids):
                raise ShapeError(f"op {op.debug_name()} output {index} has no counterpart in "
                                 f"branch {graph.id!r}")
            sides.append(graph.outputs[inner])
        if sides[0].dtype != sides[1].dtype:
            raise ShapeError(f"op {op.debug_name()} output {index}: the branches give "
                             f"{sides[0].dtype} and {sides[1].dtype}")
        same = sides[0].shape == sides[1].shape
        results.append((sides[0].dtype, sides[0].shape if same else None))
    return results


# -- Scan ---------------------------------------------------------------------------------
def _scan_layout(op: Op) -> tuple[int, int, list[int]]:
    """(state count N, scan input count M, scan input axes)."""
    if op.type.version < 9:
        raise ShapeUndecided(f"op {op.debug_name()}: Scan-8's batched form is not modelled")
    scans = op.attributes.get("num_scan_inputs", 0)
    states = _explicit(op, scans)
    axes = list(op.attributes.get("scan_input_axes", [0] * scans))
    if len(axes) != scans:
        raise ShapeError(f"op {op.debug_name()}: {len(axes)} scan_input_axes for {scans} "
                         f"scan inputs")
    return states, scans, axes


def _infer_scan(op: Op) -> list[Typed]:
    body = op.called_graphs()[0]
    states, _scans, in_axes = _scan_layout(op)
    trips = set()
    for m, axis in enumerate(in_axes):
        shape = op.input(states + m).shape
        trips.add(shape[normalize_axis(op, axis, len(shape))])
    if len(trips) > 1:
        raise ShapeError(f"op {op.debug_name()}: scan inputs scan different lengths "
                         f"{sorted(trips)}")
    outputs = _body_outputs(op, body, states)
    results: list[Typed] = [_typed(op.input(j)) for j in range(states)]
    scan_outputs = outputs[states:]
    out_axes = list(op.attributes.get("scan_output_axes", [0] * len(scan_outputs)))
    if len(out_axes) != len(scan_outputs):
        raise ShapeError(f"op {op.debug_name()}: {len(out_axes)} scan_output_axes for "
                         f"{len(scan_outputs)} scan outputs")
    for inner, axis in zip(scan_outputs, out_axes, strict=True):
        if inner.shape is None or not trips:
            results.append((inner.dtype, None))
            continue
        at = normalize_axis(op, axis, len(inner.shape) + 1)
        results.append((inner.dtype, (*inner.shape[:at], *trips, *inner.shape[at:])))
    return results


# -- typing subgraph inputs from the call site ------------------------------------------------
def _callee_input_type(op: SubgraphOp, graph: Graph, graph_in: int) -> Typed | None:
    if op.is_type("Loop") and graph_in < 2:
        return ("int64", ()) if graph_in == 0 else ("bool", ())
    op_in = op.subgraph_in_to_op_in_index(graph, graph_in)
    if op_in is None:
        return None
    outer = op.input(op_in)
    if op.is_type("Scan") and outer.shape is not None:
        states, scans, axes = _scan_layout(op)
        if states <= op_in < states + scans:
            axis = normalize_axis(op, axes[op_in - states], len(outer.shape))
            return outer.dtype, outer.shape[:axis] + outer.shape[axis + 1:]
    return _typed(outer)


def seed_callee_inputs(op: SubgraphOp, rewriter: Rewriter | None = None) -> bool:
    """Give subgraph inputs without a shape the type of what the op passes them (Loop's
    iteration counter and condition, Scan's slices), through ``rewriter`` (or one of its
    own); True if any input changed."""
    rewriter = rewriter if rewriter is not None else Rewriter(REGISTRY)
    before = rewriter.changes
    for graph in op.called_graphs():
        for graph_in, tensor in enumerate(graph.inputs):
            if tensor.shape is not None:
                continue
            try:
                typed = _callee_input_type(op, graph, graph_in)
            except ShapeUndecided:
                typed = None
            if typed is not None and typed[1] is not None:
                rewriter.set_type(tensor, *typed)
    return rewriter.changes != before


# ``side_effects`` holds a predicate for these op types (see the module docstring).
register(OpDef("Call", domain=GRAPHCORE_DOMAIN, infer=_infer_call,
               side_effects=body_has_side_effects,
               layout=SUBGRAPH))
register(OpDef("Loop", infer=_infer_loop, side_effects=body_has_side_effects,
               layout=SUBGRAPH))
register(OpDef("If", infer=_infer_if, side_effects=body_has_side_effects,
               layout=SUBGRAPH))
register(OpDef("Scan", infer=_infer_scan, side_effects=body_has_side_effects,
               layout=SUBGRAPH))
