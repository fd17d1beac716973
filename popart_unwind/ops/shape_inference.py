"""Shape inference over the IR: each op's registered shape rule, applied in schedule order.

This is an interpreter over the IR (``ir.interpreter``) that annotates it (dtype and shape
of every op output), entering called subgraphs before the op that calls them so that
Call/Loop/If/Scan can read their bodies.
Outputs that already carry a shape (seeded by ONNX's own inference) must agree with the rule.
Opaque ops (no ``OpDef``) and rules that cannot decide keep whatever shapes were seeded.
Every dtype and shape is written through a :class:`~popart_unwind.rewrite.Rewriter`, so the
InferShapes transform's record says what it changed; called without one (the front ends
do, at import), the walk makes its own.
"""

from __future__ import annotations

from popart_unwind.errors import ShapeError, ShapeUndecided
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.interpreter import AT_FIRST_CALL, Interpreter
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ops.control import CallSite, seed_callee_inputs
from popart_unwind.ops.registry import REGISTRY, OpRegistry, OutputType
from popart_unwind.rewrite import Rewriter


def run_rule(op: Op, registry: OpRegistry = REGISTRY) -> list[OutputType] | None:
    """The rule's (dtype, shape) per output index, or None if the op is opaque or the rule
    cannot decide (an input's shape is unknown, or it raised ShapeUndecided)."""
    opdef = registry.lookup(op)
    if opdef is None or opdef.infer is None:
        return None
    if any(tensor.shape is None for tensor in op.inputs):
        return None
    try:
        results = list(opdef.infer(op))
    except ShapeUndecided:
        return None
    needed = max(op.output_map(), default=-1) + 1
    if len(results) < needed:
        raise ShapeError(f"the shape rule of {op.type} gives {len(results)} output(s), but op "
                         f"{op.debug_name()} has an output at index {needed - 1}")
    return results


def infer_op(op: Op, registry: OpRegistry = REGISTRY, trust_seeded: bool = False,
             rewriter: Rewriter | None = None) -> bool:
    """Apply ``op``'s shape rule to its outputs (through ``rewriter``, or one of its own);
    True if any output changed.

    With ``trust_seeded`` a rule that fails on an op whose outputs all carry seeded shapes
    keeps them (the importer's first pass: ONNX's inference may know data we do not).
    """
    try:
        results = run_rule(op, registry)
    except ShapeError:
        if trust_seeded and op.outputs and all(t.shape is not None for t in op.outputs):
            return False
        raise
    if results is None:
        return False
    rewriter = rewriter if rewriter is not None else Rewriter(registry)
    before = rewriter.changes
    for index, tensor in op.output_map().items():
        dtype, shape = results[index]
        if tensor.shape is None:
            rewriter.set_type(tensor, dtype, shape)
        elif shape is not None and (tuple(shape) != tensor.shape or dtype != tensor.dtype):
            raise ShapeError(f"op {op.debug_name()} output {index} ({tensor.id!r}): the shape "
                             f"rule gives {dtype} {tuple(shape)}, but the tensor is "
                             f"{tensor.dtype} {tensor.shape}")
    return rewriter.changes != before


class _InferenceWalk(Interpreter):
    """Types every op's outputs with its shape rule, entering each callee at its first call
    site after the call site has typed the callee's inputs (``seed_callee_inputs``)."""

    order = AT_FIRST_CALL

    def __init__(self, registry: OpRegistry, trust_seeded: bool, rewriter: Rewriter) -> None:
        super().__init__()
        self.registry, self.trust_seeded, self.rewriter = registry, trust_seeded, rewriter

    def enter_call(self, op: Op, callee: Graph) -> None:
        if isinstance(op, CallSite):
            seed_callee_inputs(op, self.rewriter)

    def run_op(self, op: Op) -> None:
        infer_op(op, self.registry, self.trust_seeded, self.rewriter)


class _CheckWalk(Interpreter):
    """Holds every op's outputs to its shape rule (after inference)."""

    order = AT_FIRST_CALL

    def __init__(self, registry: OpRegistry) -> None:
        super().__init__()
        self.registry = registry

    def run_op(self, op: Op) -> None:
        results = run_rule(op, self.registry)
        if results is None:
            return
        for index, tensor in op.output_map().items():
            dtype, shape = results[index]
            if shape is None:
                continue
            if tensor.shape is None:
                raise ShapeError(f"op {op.debug_name()} output {index} ({tensor.id!r}) "
                                 f"has no shape; its rule gives {dtype} {tuple(shape)}")
            if tuple(shape) != tensor.shape or dtype != tensor.dtype:
                raise ShapeError(f"op {op.debug_name()} output {index} ({tensor.id!r}) "
                                 f"is {tensor.dtype} {tensor.shape}, but its rule gives "
                                 f"{dtype} {tuple(shape)}")


def infer_shapes(graph_or_ir: Graph | Ir, registry: OpRegistry | None = None,
                 trust_seeded: bool = False, rewriter: Rewriter | None = None) -> bool:
    """Infer every op output's dtype and shape; returns whether anything changed.

    Given an Ir, the main graph is walked first (entering the subgraphs it calls), then any
    graph not reached from it, in id order. Raises ShapeError naming the op on a mismatch.
    Changes go through ``rewriter`` (the InferShapes transform passes the registry's);
    without one the walk makes its own.
    """
    registry = registry or REGISTRY
    rewriter = rewriter if rewriter is not None else Rewriter(registry)
    before = rewriter.changes
    walk = _InferenceWalk(registry, trust_seeded, rewriter)
    if isinstance(graph_or_ir, Ir):
        walk.run(graph_or_ir)
    else:
        walk.run_graph(graph_or_ir)
    return rewriter.changes != before


def check_shapes(ir: Ir, registry: OpRegistry | None = None) -> None:
    """Raise ShapeError at the first op whose outputs disagree with its shape rule, or whose
    output lacks a shape the rule can give (run ``infer_shapes`` first)."""
    _CheckWalk(registry or REGISTRY).run(ir)
