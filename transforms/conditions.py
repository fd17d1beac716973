"""The IR conditions that transforms assume, guarantee and preserve (after PopART's
transform notes).

A condition is a property of the whole IR that either holds or does not. Transforms declare
which conditions they need beforehand (assumptions), which they establish (guarantees) and
which they never break (preserved); :func:`check_condition` tells whether one holds by
listing every violation, so a checker can hold a transform to its declaration.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from popart_unwind.ops import REGISTRY, OpRegistry
from popart_unwind.ops.ipu_copy import is_ipu_copy

if TYPE_CHECKING:
    from popart_unwind.ir import Ir, Op


class Condition(enum.Enum):
    """One IR property; each member's value says what it means.

    The first seven are PopART's. ``SHAPES_KNOWN`` is ours: the layout planner
    needs every tensor's shape, so transforms state whether they establish or keep it.
    """

    NO_INPLACE = "No graph holds an op that works in place on one of its inputs."
    NO_IPU_COPY = "No graph holds an IpuCopy op."
    NO_IMPLICIT_COPY = ("No op (other than an IpuCopy) sits on a different IPU (virtual "
                        "graph) from the tensors it consumes.")
    VGRAPH = "Every op of the main graph has a virtual graph id."
    PSTAGE = "Every op of the main graph has a pipeline stage."
    EPHASE = "Every op of the main graph has an execution phase."
    BPHASE = "Every op of the main graph has a batch-serialized phase."
    SHAPES_KNOWN = "Every tensor of every graph has a known shape."


#: The placement attribute each placement condition requires (``OpSettings`` field names).
PLACEMENT_FIELD = {
    Condition.VGRAPH: "vgraph_id",
    Condition.PSTAGE: "pipeline_stage",
    Condition.EPHASE: "execution_phase",
    Condition.BPHASE: "batch_serialized_phase",
}

def is_inplace(op: Op, registry: OpRegistry = REGISTRY) -> bool:
    """Whether ``op`` modifies an input: PopART names such ops ``...Inplace``; an OpDef may
    also say so with an ``inplace`` flag (none of ours does yet, hence the lookup's default).
    """
    if op.type.name.endswith("Inplace"):
        return True
    return bool(getattr(registry.lookup(op), "inplace", False))


def check_condition(ir: Ir, condition: Condition,
                    registry: OpRegistry = REGISTRY) -> list[str]:
    """Every violation of ``condition`` in ``ir`` (empty iff it holds), in graph and op order."""
    if condition is Condition.NO_INPLACE:
        return [f"op {op.debug_name()}{_in(op)} works in place"
                for op in ir.all_ops() if is_inplace(op, registry)]
    if condition is Condition.NO_IPU_COPY:
        return [f"op {op.debug_name()}{_in(op)} is an IpuCopy"
                for op in ir.all_ops() if is_ipu_copy(op)]
    if condition is Condition.NO_IMPLICIT_COPY:
        return _implicit_copies(ir)
    if condition is Condition.SHAPES_KNOWN:
        return [f"tensor {tensor.id!r}{_where(graph.id)} has no shape"
                for graph in ir.graphs for tensor in graph.tensors if tensor.shape is None]
    field = PLACEMENT_FIELD[condition]
    return [f"op {op.debug_name()} of the main graph has no {field}"
            for op in ir.main_graph.ops if not op.settings.has(field)]


def check_conditions(ir: Ir, registry: OpRegistry = REGISTRY) -> dict[Condition, list[str]]:
    """The violations of every condition, in declaration order."""
    return {condition: check_condition(ir, condition, registry) for condition in Condition}


def _implicit_copies(ir: Ir) -> list[str]:
    """Producer/consumer pairs placed on different virtual graphs.

    Only pairs where both ops have a virtual graph are compared: an op without one is on no
    particular IPU (VGRAPH is the condition that demands one). IpuCopy ops are exempt on
    both sides, since moving data between IPUs is what they are for.
    """
    violations = []
    for op in ir.all_ops():
        if is_ipu_copy(op) or not op.settings.has("vgraph_id"):
            continue
        for index, tensor in op.input_map().items():
            producer = tensor.producer
            if producer is None or is_ipu_copy(producer) \
                    or not producer.settings.has("vgraph_id"):
                continue
            if producer.settings.vgraph_id != op.settings.vgraph_id:
                violations.append(
                    f"op {op.debug_name()}{_in(op)} on virtual graph {op.settings.vgraph_id} "
                    f"reads input {index} ({tensor.id!r}) from {producer.debug_name()} on "
                    f"virtual graph {producer.settings.vgraph_id}")
    return violations


def _in(op: Op) -> str:
    return _where(op.graph.id)


def _where(graph_id: str) -> str:
    return f" (graph {graph_id!r})" if graph_id else ""
