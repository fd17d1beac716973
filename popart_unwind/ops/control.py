"""Op family: control flow — Call, Loop, If and Scan, the ops that run subgraphs.

Each op type is an op class (its index maps between op and subgraph inputs and outputs, as
PopART's ``CallOp``/``LoopOp``/``IfOp``/``ScanOp`` hold them; how a transform keeps it in
step when a subgraph loses an input or output; how its inputs type the subgraph's inputs)
and an OpDef (shape rule, side effects, layout rule). Implicit inputs (outer-scope values an
ONNX body reads) come last on both sides; their number is the attribute
``num_implicit_inputs`` (absent: none).

An op running a subgraph has side effects exactly when some op of the subgraph has, so
``OpDef.side_effects`` holds a predicate here.

Layouts: PopART copies each op input into the subgraph's input tensor and each subgraph
output out to the op's output (``CallOpx``; Loop also copies each carried output back to the
next iteration's input). A copy between equal layouts moves nothing; so every copy becomes a
ValuedPair (``UnwindValuations.call_copy``) and each op output a new Sink tied to the
subgraph output(s) it receives — the planner lays call outputs out like producer-less
tensors. Subgraph inputs are Sinks of their own graph, planned once for all call sites.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popart_unwind.errors import IrError, ShapeError, ShapeUndecided
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, ONNX_DOMAIN, Op, SubgraphOp, register_op_class
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.exchange import read_need
from popart_unwind.machine.interface import ExchangeNeed, TileMachine
from popart_unwind.ops.common import constant_value, normalize_axis
from popart_unwind.ops.layout_rule import CalleeLayouts, InputTiles, LayoutRule, UnwindEmitter
from popart_unwind.ops.registry import REGISTRY, OpDef, OutputType, register
from popart_unwind.ops.views import passed_on
from popart_unwind.rewrite import Rewriter


def body_has_side_effects(op: Op) -> bool:
    """True if any op of a called graph (or of the graphs those call) has side effects."""
    return any(REGISTRY.has_side_effects(inner) for graph in op.called_graphs()
               for inner in graph.ops)


# -- shape rules ----------------------------------------------------------------------
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


def _typed(tensor: Tensor) -> OutputType:
    return tensor.dtype, tensor.shape


def _body_outputs(op: Op, body: Graph, at_least: int) -> list[Tensor]:
    outputs = body.outputs
    if len(outputs) < at_least:
        raise ShapeError(f"op {op.debug_name()}: graph {body.id!r} has {len(outputs)} "
                         f"output(s), at least {at_least} expected")
    return outputs


# -- Call ---------------------------------------------------------------------------------
def _infer_call(op: Op) -> list[OutputType]:
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
    if not (passed_on(cond_out) is body.inputs[1]
            or (held is not None and bool(np.asarray(held).reshape(-1)[0]))):
        return None
    return int(np.asarray(m).reshape(-1)[0])


def _infer_loop(op: Op) -> list[OutputType]:
    body = op.called_graphs()[0]
    carried = _explicit(op, 2)
    outputs = _body_outputs(op, body, 1 + carried)
    results: list[OutputType] = []
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
def _infer_if(op: Op) -> list[OutputType]:
    cond = op.input(0)
    if cond.shape is not None and int(np.prod(cond.shape)) != 1:
        raise ShapeError(f"op {op.debug_name()}: the condition must hold one element, got "
                         f"shape {cond.shape}")
    then_graph, else_graph = op.called_graphs()
    results: list[OutputType] = []
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


def _infer_scan(op: Op) -> list[OutputType]:
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
    results: list[OutputType] = [_typed(op.input(j)) for j in range(states)]
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


# -- the op classes: index maps, and keeping call sites in step -------------------------
class CallSite(SubgraphOp):
    """An op running subgraphs, positional by default: op input i is subgraph input i, op
    output j subgraph output j + ``OUTPUT_OFFSET``. It states how a transform keeps it in
    step when a subgraph loses an input or an output, and how its inputs type the
    subgraph's inputs before the subgraph is inferred."""

    def callee_input_type(self, graph: Graph, graph_in: int) -> OutputType | None:
        """The (dtype, shape) the op gives subgraph input ``graph_in``, or None."""
        op_in = self.subgraph_in_to_op_in_index(graph, graph_in)
        return None if op_in is None else _typed(self.input(op_in))

    def drop_subgraph_input(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        """Subgraph input ``index`` is gone: drop the op input feeding it and move every
        later input down by one."""
        _shift_inputs_down(self, index, rewriter)

    def drop_subgraph_output(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        """Subgraph output ``index`` is gone: drop the op output it gave (unused) and move
        every later output down by one."""
        _shift_outputs_down(self, index - self.OUTPUT_OFFSET, rewriter)


class CallOp(CallSite):
    """PopART's ``CallOp``: op input i is subgraph input i, op output j subgraph output j."""

    CALLED_GRAPH_ATTRIBUTES = ("callee",)


class LoopOp(CallSite):
    """PopART's ``LoopOp`` (ONNX Loop): inputs (M, cond, carried...), body inputs
    (iteration, cond, carried...), body outputs (cond, carried..., scan...).

    Op input i maps to body input i (the trip count M feeds the iteration counter); op
    output j is body output j + 1, since body output 0 is the continue condition. Body
    inputs 0 and 1 and body output 0 belong to the loop itself: they are fed without an op
    input (ONNX makes M and cond optional) and are never removed.
    """

    CALLED_GRAPH_ATTRIBUTES = ("body",)
    OUTPUT_OFFSET = 1
    FIXED_INPUTS = 2

    def stacked_output(self, op_out: int) -> bool:
        """Outputs after the loop-carried values (inputs 2..) are scan outputs."""
        return op_out >= self._explicit_inputs() - 2

    def fixed_subgraph_input(self, graph: Graph, graph_in: int) -> bool:
        return graph_in < self.FIXED_INPUTS

    def same_every_run(self, graph: Graph, graph_in: int) -> bool:
        """Only the implicit inputs (outer-scope values) stay the same per iteration."""
        op_in = self.subgraph_in_to_op_in_index(graph, graph_in)
        return op_in is not None and op_in >= self._explicit_inputs()

    def fixed_subgraph_output(self, graph: Graph, graph_out: int) -> bool:
        return graph_out < self.OUTPUT_OFFSET

    def callee_input_type(self, graph: Graph, graph_in: int) -> OutputType | None:
        """The iteration number (int64) and the condition (bool) are scalars."""
        if graph_in == 0:
            return "int64", ()
        if graph_in == 1:
            return "bool", ()
        return super().callee_input_type(graph, graph_in)


class IfOp(CallSite):
    """PopART's ``IfOp``: input 0 is the condition; each branch has explicit index maps.

    Attributes ``then_inputs``/``else_inputs`` map op input index -> branch input index and
    ``then_outputs``/``else_outputs`` map op output index -> branch output index (PopART's
    ``BranchInfo``), stored as sorted lists of pairs so they serialise deterministically.
    """

    CALLED_GRAPH_ATTRIBUTES = ("then_branch", "else_branch")

    def _maps(self, graph: Graph) -> tuple[dict[int, int], dict[int, int]]:
        self._check_called(graph)
        prefix = "then" if graph.id == self.attributes["then_branch"] else "else"
        return (dict(self.attributes[f"{prefix}_inputs"]),
                dict(self.attributes[f"{prefix}_outputs"]))

    def op_in_to_subgraph_in_index(self, graph: Graph, op_in: int) -> int | None:
        return self._maps(graph)[0].get(op_in)

    def subgraph_in_to_op_in_index(self, graph: Graph, graph_in: int) -> int | None:
        inverse = {b: a for a, b in self._maps(graph)[0].items()}
        return inverse.get(graph_in)

    def op_out_to_subgraph_out_index(self, graph: Graph, op_out: int) -> int | None:
        return self._maps(graph)[1].get(op_out)

    def subgraph_out_to_op_out_index(self, graph: Graph, graph_out: int) -> int | None:
        inverse = {b: a for a, b in self._maps(graph)[1].items()}
        return inverse.get(graph_out)

    def feeds_no_subgraph(self, op_in: int) -> bool:
        """Input 0 is the condition, which no branch reads."""
        return op_in == 0

    def _branches(self, graph: Graph) -> list[str]:
        """Which of the branches are ``graph`` (both, when one graph serves as both)."""
        return [p for p in ("then", "else") if self.attributes[f"{p}_branch"] == graph.id]

    def drop_subgraph_input(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        """Rewrite the branch's input map; drop an op input only when no branch reads it
        any more (never the condition)."""
        affected: list[int] = []
        for prefix in self._branches(graph):
            pairs = self.attributes[f"{prefix}_inputs"]
            affected += [op_in for op_in, branch_in in pairs if branch_in == index]
            rewriter.set_attribute(self, f"{prefix}_inputs", sorted(
                [op_in, branch_in - (branch_in > index)]
                for op_in, branch_in in pairs if branch_in != index))
        still_read = {op_in for prefix in ("then", "else")
                      for op_in, _ in self.attributes[f"{prefix}_inputs"]}
        for op_in in sorted(set(affected) - still_read - {0}, reverse=True):
            _shift_inputs_down(self, op_in, rewriter)
            for prefix in ("then", "else"):
                rewriter.set_attribute(self, f"{prefix}_inputs", [
                    [i - (i > op_in), b] for i, b in self.attributes[f"{prefix}_inputs"]])

    def drop_subgraph_output(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        """An If output exists only while both branches produce it, so when one branch
        loses it the op output goes, and with it the other branch's pair."""
        op_out = self.subgraph_out_to_op_out_index(graph, index)
        for prefix in self._branches(graph):
            rewriter.set_attribute(self, f"{prefix}_outputs", sorted(
                [o, b - (b > index)]
                for o, b in self.attributes[f"{prefix}_outputs"] if b != index))
        if op_out is None:
            return
        _shift_outputs_down(self, op_out, rewriter)
        for prefix in ("then", "else"):
            rewriter.set_attribute(self, f"{prefix}_outputs", [
                [o - (o > op_out), b] for o, b in self.attributes[f"{prefix}_outputs"]
                if o != op_out])


class ScanOp(CallSite):
    """ONNX Scan (PopART's ``ScanOp``): op and body inputs are N state variables, M scan
    inputs (attribute ``num_scan_inputs``), then implicit inputs; op and body outputs are N
    final states then K scan outputs. Indices map one to one; scan inputs and outputs differ
    in shape from their body counterparts by the scanned axis.
    """

    CALLED_GRAPH_ATTRIBUTES = ("body",)

    def _num_states(self) -> int:
        return self._explicit_inputs() - int(self.attributes.get("num_scan_inputs", 0))

    def stacked_input(self, op_in: int) -> bool:
        return self._num_states() <= op_in < self._explicit_inputs()

    def stacked_output(self, op_out: int) -> bool:
        return op_out >= self._num_states()

    def same_every_run(self, graph: Graph, graph_in: int) -> bool:
        """Only the implicit inputs (outer-scope values) stay the same per iteration."""
        op_in = self.subgraph_in_to_op_in_index(graph, graph_in)
        return op_in is not None and op_in >= self._explicit_inputs()

    def callee_input_type(self, graph: Graph, graph_in: int) -> OutputType | None:
        """A scan input's body counterpart is one slice: the scanned axis removed."""
        op_in = self.subgraph_in_to_op_in_index(graph, graph_in)
        if op_in is not None and self.input(op_in).shape is not None:
            states, scans, axes = _scan_layout(self)
            if states <= op_in < states + scans:
                outer = self.input(op_in)
                axis = normalize_axis(self, axes[op_in - states], len(outer.shape))
                return outer.dtype, outer.shape[:axis] + outer.shape[axis + 1:]
        return super().callee_input_type(graph, graph_in)

    def drop_subgraph_input(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        raise IrError(f"cannot keep Scan {self.debug_name()} in step with its body: removing "
                      f"an input would move the boundary between states and scan inputs")

    def drop_subgraph_output(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        raise IrError(f"cannot keep Scan {self.debug_name()} in step with its body: removing "
                      f"an output would move the boundary between states and scan outputs")


def _shift_inputs_down(op: Op, removed: int, rewriter: Rewriter) -> None:
    """Drop op input ``removed`` (if connected) and move every later input down by one."""
    rewriter.set_input(op, removed, None)
    for index in [i for i in op.input_map() if i > removed]:
        rewriter.move_input(op, index, index - 1)


def _shift_outputs_down(op: Op, removed: int, rewriter: Rewriter) -> None:
    """Drop op output ``removed`` (and its tensor) and move every later output down by one."""
    if op.has_output(removed):
        rewriter.remove_output(op, removed)
    for index in [j for j in op.output_map() if j > removed]:
        rewriter.move_output(op, index, index - 1)


def seed_callee_inputs(op: CallSite, rewriter: Rewriter | None = None) -> bool:
    """Give subgraph inputs without a shape the type the op gives them
    (``callee_input_type``), through ``rewriter`` (or one of its own); True if any input
    changed."""
    rewriter = rewriter if rewriter is not None else Rewriter(REGISTRY)
    before = rewriter.changes
    for graph in op.called_graphs():
        for graph_in, tensor in enumerate(graph.inputs):
            if tensor.shape is not None:
                continue
            try:
                typed = op.callee_input_type(graph, graph_in)
            except ShapeUndecided:
                typed = None
            if typed is not None and typed[1] is not None:
                rewriter.set_type(tensor, *typed)
    return rewriter.changes != before


# -- layouts ----------------------------------------------------------------------------
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
    """Call, Loop, If, Scan: copies in and out tied by ValuedPairs; outputs are new Sinks."""

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


_RULE = SubgraphRule()
for _domain, _name, _class, _infer in ((GRAPHCORE_DOMAIN, "Call", CallOp, _infer_call),
                                       (ONNX_DOMAIN, "Loop", LoopOp, _infer_loop),
                                       (ONNX_DOMAIN, "If", IfOp, _infer_if),
                                       (ONNX_DOMAIN, "Scan", ScanOp, _infer_scan)):
    register_op_class(_domain, _name, _class)
    register(OpDef(_name, domain=_domain, infer=_infer, side_effects=body_has_side_effects,
                   layout=_RULE))
