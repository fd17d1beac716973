"""Which ops of an IR no layout rule models, so that no barrier goes unreported.

An op has no layout rule when the registry gives it the base :class:`LayoutRule` itself
(not a subclass): its type is unknown to the registry (an opaque op), or its family
registers it without a layout (the ``OpDef`` default); or when its family's rule handles
only some forms of the op and this one is not among them (``LayoutRule.models``: a Gather
off axis 0, say). Such an op is a barrier whose outputs are mapped linearly and whose
exchange is not counted, so the plan file, the summary and the report list these ops by
type.
"""

from __future__ import annotations

from collections import Counter

from popart_unwind.ir import Ir
from popart_unwind.ir.op import ONNX_DOMAIN, Op, OpType
from popart_unwind.ops.registry import REGISTRY


def has_layout_rule(op: Op) -> bool:
    """Whether a family's rule models ``op``'s layouts and exchange."""
    return REGISTRY.layout_rule(op).models(op)


def type_label(op_type: OpType) -> str:
    """The op type's name, prefixed ``<domain>::`` outside the default ONNX domain."""
    if op_type.domain == ONNX_DOMAIN:
        return op_type.name
    return f"{op_type.domain}::{op_type.name}"


def ops_without_rule(ir: Ir) -> dict[str, int]:
    """How many ops of each type, over every graph of ``ir``, have no layout rule (keys
    sorted)."""
    counts = Counter(type_label(op.type) for graph in ir.graphs for op in graph.ops
                     if not has_layout_rule(op))
    return dict(sorted(counts.items()))
