"""What an ONNX model must declare before it is imported, so that nothing is planned on a
misreading: an IR version and opsets the installed ``onnx`` package knows, a default-domain
opset import, and op types the registry knows.

An op type the registry does not know (a misspelling, an op of a custom domain) would
otherwise become an opaque barrier whose results are mapped linearly and whose exchange is
not counted: the plan would look better than it runs, and say nothing. So it is an error,
unless the caller asks for such ops to be planned as barriers (``allow_unknown_ops``), in
which case an :class:`~popart_unwind.errors.UnknownOpsWarning` lists them.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from popart_unwind.errors import UnknownOpsWarning, UnsupportedModelError
from popart_unwind.ir.op import ONNX_DOMAIN, OpType
from popart_unwind.ops.coverage import type_label
from popart_unwind.ops.registry import REGISTRY

if TYPE_CHECKING:
    import onnx

#: The oldest ai.onnx opset read: from opset 7 on, elementwise ops broadcast as numpy does,
#: which every shape and layout rule here assumes (before it, Add, Mul, ... broadcast only
#: with a ``broadcast`` attribute along an ``axis``, which the rules do not read).
MIN_ONNX_OPSET = 7
#: The oldest IR version read: opset imports exist from IR version 3 on.
MIN_IR_VERSION = 3
#: How many nodes an error names per op type before it says "and N more".
_NAMED_NODES = 3


def check_versions(proto: onnx.ModelProto, source: str) -> dict[str, int]:
    """The model's opset imports by domain (``ai.onnx`` for the default), after checking
    them and the IR version against what the installed ``onnx`` package supports."""
    import onnx
    import onnx.defs

    if not MIN_IR_VERSION <= proto.ir_version <= onnx.IR_VERSION:
        raise UnsupportedModelError(
            f"ONNX model {source} has IR version {proto.ir_version}; the installed onnx "
            f"{onnx.__version__} reads IR versions {MIN_IR_VERSION} to {onnx.IR_VERSION}")
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = entry.domain or ONNX_DOMAIN
        if domain in opsets:
            raise UnsupportedModelError(f"ONNX model {source} imports domain {domain!r} twice")
        opsets[domain] = int(entry.version)
    if ONNX_DOMAIN not in opsets:
        raise UnsupportedModelError(
            f"ONNX model {source} has no opset import for the default domain (ai.onnx), so "
            f"the meaning of its ops is undefined")
    newest = onnx.defs.onnx_opset_version()
    if not MIN_ONNX_OPSET <= opsets[ONNX_DOMAIN] <= newest:
        raise UnsupportedModelError(
            f"ONNX model {source} imports ai.onnx opset {opsets[ONNX_DOMAIN]}; supported are "
            f"opsets {MIN_ONNX_OPSET} to {newest} (the newest the installed onnx "
            f"{onnx.__version__} knows)")
    for domain, version in sorted(opsets.items()):
        if version < 1:
            raise UnsupportedModelError(
                f"ONNX model {source} imports domain {domain!r} at version {version}; "
                f"versions start at 1")
    return opsets


def check_op_types(proto: onnx.ModelProto, opsets: dict[str, int], source: str,
                   allow_unknown_ops: bool,
                   node_opsets: Mapping[str, Mapping[str, int]] | None = None,
                   unbuilt: Mapping[str, str] | None = None) -> None:
    """Refuse (or, with ``allow_unknown_ops``, warn about) nodes whose op type the registry
    does not know; always refuse a node of a domain the model does not import, and an
    ai.onnx op the model's opset does not define yet. ``node_opsets`` gives the opsets of
    nodes written for others than the model's (the nodes of an expanded function body),
    by node name; ``unbuilt`` why an op type's function body could not be used, by label
    (said with the op type)."""
    unknown: dict[str, list[str]] = defaultdict(list)
    reasons: dict[str, str] = {}
    for node in all_nodes(proto.graph):
        domain = node.domain or ONNX_DOMAIN
        label = node.name or node.op_type
        if domain not in opsets:
            raise UnsupportedModelError(
                f"ONNX model {source}: node {label!r} ({node.op_type}) is of domain "
                f"{domain!r}, which the model does not import")
        own = (node_opsets or {}).get(node.name, opsets)
        op_type = OpType(domain, node.op_type, own.get(domain, opsets[domain]))
        if REGISTRY.lookup(op_type) is None and not _is_constant(op_type):
            unknown[type_label(op_type)].append(label)
            refusal = REGISTRY.refusal(op_type)
            if refusal is not None:
                reasons[type_label(op_type)] = f"; not modelled: it {refusal}"
        elif domain == ONNX_DOMAIN:
            _check_defined_at(op_type, label, source)
    if not unknown:
        return
    listing = "; ".join(_describe(name, nodes, (unbuilt or {}).get(name), reasons.get(name))
                        for name, nodes in sorted(unknown.items()))
    if not allow_unknown_ops:
        raise UnsupportedModelError(
            f"ONNX model {source} has op types the tool does not know: {listing}; check the "
            f"spelling and domain, or plan them as barriers with allow_unknown_ops "
            f"(--allow-unknown-ops)")
    warnings.warn(UnknownOpsWarning(
        f"op types the tool does not know, planned as barriers (results mapped linearly, "
        f"no exchange counted): {listing}"), stacklevel=3)


def _check_defined_at(op_type: OpType, label: str, source: str) -> None:
    """An ai.onnx op the model's opset predates (Gelu before opset 20, say) is invalid."""
    import onnx.defs

    try:
        onnx.defs.get_schema(op_type.name, op_type.version, "")
    except onnx.defs.SchemaError:
        since = _oldest(op_type.name)
        when = f"; it exists from opset {since}" if since is not None else ""
        raise UnsupportedModelError(
            f"ONNX model {source}: node {label!r} is a {op_type.name}, which ai.onnx opset "
            f"{op_type.version} does not define{when}") from None


def _oldest(name: str) -> int | None:
    """The first ai.onnx opset defining ``name``, or None if none does."""
    import onnx.defs

    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history()
                if s.name == name and s.domain == ""]
    return min(versions) if versions else None


def _is_constant(op_type: OpType) -> bool:
    """``Constant`` nodes become constant tensors at import, not ops."""
    return op_type.domain == ONNX_DOMAIN and op_type.name == "Constant"


def _describe(name: str, nodes: list[str], unbuilt: str | None = None,
              reason: str | None = None) -> str:
    named = ", ".join(repr(n) for n in nodes[:_NAMED_NODES])
    more = f" and {len(nodes) - _NAMED_NODES} more" if len(nodes) > _NAMED_NODES else ""
    why = f"; ONNX defines it by a function body, not expanded: {unbuilt}" if unbuilt else ""
    why += reason or ""
    return f"{name} (node{'s' if len(nodes) > 1 else ''} {named}{more}{why})"


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs (Loop, If and Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from all_nodes(sub)
