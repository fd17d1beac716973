"""ONNX function ops expanded into the nodes of their function body, before import.

Many ONNX ops (Attention, RMSNormalization, RotaryEmbedding, GroupNormalization,
SoftmaxCrossEntropyLoss, MeanVarianceNormalization, the window functions, ...) are defined
by ONNX as a function: a body of simpler ONNX ops, stated in the op's schema for the opset
it applies from (``OpSchema.function_opset_versions``), or built by the schema for a given
node and input types (``context_dependent_function_opset_versions``). A node whose op type
the registry does not know is replaced here by that body, so the import sees only ops with
rules: Attention's MatMuls are MatMuls the planner lays out.

What an expansion does, for a node of op type T at the model's opset N for T's domain:

- the body is the one for the newest function version <= N (a context-dependent body is
  built from the node and its input types, which must be known: ONNX's shape inference,
  else the types the model declares); a schema with no body, an empty body, a body onnx
  cannot build, or one using a domain the model does not import leaves the node as it is
  (the import then refuses it, naming T);
- the body's formal inputs and outputs become the node's actual ones (a missing optional
  input stays empty; a missing optional output becomes an internal value), every other
  value and every node is renamed under a stem derived from the node's name (``att/...``),
  unique in the model; the same rules apply inside subgraphs of the body;
- an attribute referring to one of T's (``ref_attr_name``) takes the node's value, else
  the body's default, else the schema's default, else is dropped (the inner op's default);
- the body's nodes keep the opset the body was written for (its ``opset_import``), which
  may be older than the model's: they are typed at that version, as ONNX defines them;
- the node's placement attributes (``__ipu_number``, ...) are copied to every body node
  (but ``Constant`` nodes, which become tensors);
- a body node that is itself an expandable function op is expanded in turn, with the types
  ONNX's inference of the body gives, up to :data:`MAX_DEPTH` levels (deeper is an
  UnsupportedModelError naming the chain of ops); if an op without rules remains after
  that, the node is left as it is;
- nodes of If, Loop and Scan bodies are expanded in place the same way;
- the model's own functions are inlined before (``onnx.inliner``), except those written
  for another opset than the model's, which the inliner leaves as calls: those calls are
  expanded here the same way (their nodes typed at the function's own opsets).

Names are derived from the model alone, so the same model gives the same expansion.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from popart_unwind.errors import UnsupportedModelError
from popart_unwind.frontends.onnx_checks import all_nodes
from popart_unwind.ir.op import ONNX_DOMAIN, PLACEMENT_ATTRIBUTES, OpType
from popart_unwind.ops.coverage import type_label
from popart_unwind.ops.registry import REGISTRY

if TYPE_CHECKING:
    import onnx

#: How many levels of function calls inside function bodies are expanded.
MAX_DEPTH = 8
_PLACEMENT_NAMES = frozenset(PLACEMENT_ATTRIBUTES.values())


@dataclasses.dataclass
class Expansion:
    """The expanded model and what the expansion did.

    ``opsets`` gives, by node name, the opsets (by domain) a body node was written for,
    where they differ from the model's; ``expanded`` counts the expanded nodes by op type;
    ``unbuilt`` says, by op type label, why nodes with a function body were left as they
    are (for the import's refusal).
    """

    model: onnx.ModelProto
    opsets: dict[str, dict[str, int]]
    expanded: dict[str, int]
    unbuilt: dict[str, str] = dataclasses.field(default_factory=dict)


def expand_functions(proto: onnx.ModelProto, opsets: Mapping[str, int],
                     knows: Callable[[OpType], bool] | None = None) -> Expansion:
    """``proto`` with every node of an op type ``knows`` rejects (by default: not in the
    registry) replaced by the nodes of its ONNX function body; ``opsets`` are the model's
    opset imports by domain (``ai.onnx`` for the default one). The model is changed in
    place only where a node is expanded."""
    expander = _Expander(proto, dict(opsets), knows or _registered)
    if any(expander.expandable(node, expander.opsets) for node in all_nodes(proto.graph)):
        expander.graph(proto.graph, _Types.of_graph(proto.graph, None))
    return Expansion(proto, expander.node_opsets, dict(sorted(expander.counts.items())),
                     dict(sorted(expander.unbuilt.items())))


def _registered(op_type: OpType) -> bool:
    return REGISTRY.lookup(op_type) is not None or (
        op_type.domain == ONNX_DOMAIN and op_type.name == "Constant")


def _schema_domain(domain: str) -> str:
    return "" if domain in ("", ONNX_DOMAIN) else domain


def _model_domain(domain: str) -> str:
    return domain or ONNX_DOMAIN


class _Types:
    """Value types (TypeProtos) visible in one graph: its own, then the enclosing ones."""

    def __init__(self, own: dict[str, onnx.TypeProto], parent: _Types | None) -> None:
        self.own, self.parent = own, parent

    @classmethod
    def of_graph(cls, graph: onnx.GraphProto, parent: _Types | None) -> _Types:
        import onnx

        own: dict[str, onnx.TypeProto] = {}
        tensors = [(tensor.name, tensor) for tensor in graph.initializer]
        tensors += [(node.output[0], attr.t) for node in graph.node
                    if node.op_type == "Constant" and node.domain in ("", ONNX_DOMAIN)
                    and len(node.output) == 1 for attr in node.attribute
                    if attr.name == "value"]
        for name, tensor in tensors:
            own[name] = onnx.helper.make_tensor_type_proto(
                tensor.data_type, [int(d) for d in tensor.dims])
        for value in (*graph.input, *graph.value_info, *graph.output):
            if value.type.WhichOneof("value") is not None and (
                    value.name not in own or not _known_type(own[value.name])):
                own[value.name] = value.type
        return cls(own, parent)

    def get(self, name: str) -> onnx.TypeProto | None:
        scope: _Types | None = self
        while scope is not None:
            if name in scope.own:
                return scope.own[name]
            scope = scope.parent
        return None


def _known_type(type_proto: onnx.TypeProto | None) -> bool:
    """A tensor type with an element type and a rank: what a body builder may read."""
    if type_proto is None or type_proto.WhichOneof("value") != "tensor_type":
        return False
    tensor = type_proto.tensor_type
    return bool(tensor.elem_type) and tensor.HasField("shape")


class _Expander:
    def __init__(self, proto: onnx.ModelProto, opsets: dict[str, int],
                 knows: Callable[[OpType], bool]) -> None:
        self.proto = proto
        self.opsets = opsets
        self.knows = knows
        self.node_opsets: dict[str, dict[str, int]] = {}
        self.counts: dict[str, int] = {}
        #: Why a node of the model left unexpanded could not be expanded, by op type label.
        self.unbuilt: dict[str, str] = {}
        #: The model's own functions that ``onnx.inliner`` left (written for other opsets).
        self.local = {(f.domain, f.name, f.overload): f for f in proto.functions}

    @functools.cached_property
    def used(self) -> set[str]:
        """Every value and node name of the model (read once a node is expanded)."""
        return _names_in(self.proto.graph)

    @functools.cached_property
    def stems(self) -> set[str]:
        """Every prefix of a used name that ends in "/": the stems taken."""
        return {name[:i + 1] for name in self.used for i, c in enumerate(name) if c == "/"}

    # -- which nodes ------------------------------------------------------------------------
    def expandable(self, node: onnx.NodeProto, opsets: Mapping[str, int]) -> bool:
        domain = _model_domain(node.domain)
        if domain not in opsets:
            return False
        if self.knows(OpType(domain, node.op_type, opsets[domain])):
            return False
        return self.local_function(node) is not None or self.schema(node, opsets) is not None

    def local_function(self, node: onnx.NodeProto) -> onnx.FunctionProto | None:
        return self.local.get((node.domain, node.op_type, node.overload))

    def schema(self, node: onnx.NodeProto, opsets: Mapping[str, int]) -> onnx.defs.OpSchema | None:
        """The node's schema at its opset, if it states a function body for it."""
        import onnx.defs

        domain = _model_domain(node.domain)
        try:
            schema = onnx.defs.get_schema(node.op_type, opsets[domain], _schema_domain(domain))
        except onnx.defs.SchemaError:
            return None
        version = opsets[domain]
        if any(v <= version for v in (*schema.function_opset_versions,
                                      *schema.context_dependent_function_opset_versions)):
            return schema
        return None

    # -- walking graphs ---------------------------------------------------------------------
    def graph(self, graph: onnx.GraphProto, types: _Types) -> None:
        """Expand the graph's nodes (and its subgraphs' nodes) in place."""
        nodes = list(graph.node)
        result: list[onnx.NodeProto] = []
        for node in nodes:
            self.subgraphs(node, types)
            result.extend(self.node(node, types, self.opsets, (), graph.value_info))
        if [id(n) for n in result] != [id(n) for n in nodes]:
            copies = [_copy_node(n) for n in result]
            del graph.node[:]
            graph.node.extend(copies)

    def subgraphs(self, node: onnx.NodeProto, types: _Types) -> None:
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                self.graph(sub, _Types.of_graph(sub, types))

    def node(self, node: onnx.NodeProto, types: _Types, opsets: Mapping[str, int],
             chain: tuple[str, ...], value_info: Any) -> list[onnx.NodeProto]:
        """The node itself, or the nodes it expands into (recursively); the types ONNX
        gives the new values are added to ``value_info``."""
        infos: dict[str, onnx.ValueInfoProto] = {}
        nodes = self.expansion(node, types, opsets, chain, infos)
        value_info.extend(infos[name] for name in sorted(infos))
        return nodes

    def expansion(self, node: onnx.NodeProto, types: _Types, opsets: Mapping[str, int],
                  chain: tuple[str, ...], infos: dict[str, onnx.ValueInfoProto]
                  ) -> list[onnx.NodeProto]:
        if not self.expandable(node, opsets):
            return [node]
        chain = (*chain, node.op_type)
        if len(chain) > MAX_DEPTH:
            raise UnsupportedModelError(
                f"the ONNX function body of {chain[0]} calls functions more than "
                f"{MAX_DEPTH} levels deep ({' -> '.join(chain)}); it cannot be expanded")
        counts = dict(self.counts)
        expanded = self.expanded_body(node, types, opsets, chain, infos)
        if isinstance(expanded, str):
            self.counts = counts  # nested expansions of a body not used are not counted
            if len(chain) == 1:
                domain = _model_domain(node.domain)
                self.unbuilt.setdefault(
                    type_label(OpType(domain, node.op_type, opsets[domain])), expanded)
            return [node]
        self.counts[node.op_type] = self.counts.get(node.op_type, 0) + 1
        return expanded

    def expanded_body(self, node: onnx.NodeProto, types: _Types, opsets: Mapping[str, int],
                      chain: tuple[str, ...], infos: dict[str, onnx.ValueInfoProto]
                      ) -> list[onnx.NodeProto] | str:
        """The nodes the node expands into, or why it cannot be expanded."""
        body = self.body(node, types, opsets)
        if isinstance(body, str):
            return body
        function, body_opsets = body
        schema = None if self.local_function(node) is not None else self.schema(node, opsets)
        nodes = _instantiate(function, node, self.stem(node), schema, self.fresh)
        if nodes is None:
            return "its body computes no value for one of the node's outputs"
        inner = _body_types(nodes, node, types, function)
        found = dict(inner.new_infos())
        expanded: list[onnx.NodeProto] = []
        for inner_node in nodes:
            expanded.extend(self.expansion(inner_node, inner, body_opsets, chain, found))
        unknown = sorted({label for n in expanded for label in self.unknown_in(n, body_opsets)})
        if unknown:
            return f"its body uses {', '.join(unknown)}, which the tool does not know"
        differing = {d: v for d, v in body_opsets.items() if self.opsets.get(d) != v}
        for inner_node in expanded:
            if differing and inner_node.name not in self.node_opsets:
                self.node_opsets[inner_node.name] = dict(differing)
        infos.update(found)
        return expanded

    def unknown_in(self, node: onnx.NodeProto, opsets: Mapping[str, int]) -> Iterator[str]:
        """The op types without rules of the node and its subgraphs (a domain the model
        does not import is left for the import to refuse)."""
        domain = _model_domain(node.domain)
        op_type = OpType(domain, node.op_type, opsets.get(domain, 1))
        if domain in opsets and not self.knows(op_type):
            yield type_label(op_type)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                for inner in sub.node:
                    yield from self.unknown_in(inner, opsets)

    # -- bodies -----------------------------------------------------------------------------
    def body(self, node: onnx.NodeProto, types: _Types, opsets: Mapping[str, int]
             ) -> tuple[onnx.FunctionProto, dict[str, int]] | str:
        """The function body for the node's opset and the opsets it imports (by domain),
        or why there is none to use."""
        import onnx

        local = self.local_function(node)
        if local is not None:
            return self.checked(local)
        schema = self.schema(node, opsets)
        if schema is None:
            return "it has no function body at the model's opset"
        version = opsets[_model_domain(node.domain)]
        plain = [v for v in schema.function_opset_versions if v <= version]
        built = [v for v in schema.context_dependent_function_opset_versions if v <= version]
        chosen = max(plain + built)
        function = onnx.FunctionProto()
        try:
            if chosen in plain:
                function.ParseFromString(schema.get_function_with_opset_version(chosen))
            else:
                input_types = [types.get(name) if name else None for name in node.input]
                unknown = list(dict.fromkeys(
                    name for name, t in zip(node.input, input_types, strict=True)
                    if name and not _known_type(t)))
                if unknown:  # the builder reads types the model does not give
                    return (f"its body is built for its input types, and the element type "
                            f"or rank of {', '.join(repr(n) for n in unknown)} is unknown")
                serialized = [(t or onnx.TypeProto()).SerializeToString() for t in input_types]
                function.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                    chosen, node.SerializeToString(), serialized))
        except Exception as error:  # onnx raises assorted C++ errors when it cannot build
            first = str(error).strip().splitlines()[0] if str(error).strip() else "no reason"
            return f"onnx cannot build its body ({first})"
        return self.checked(function)

    def checked(self, function: onnx.FunctionProto
                ) -> tuple[onnx.FunctionProto, dict[str, int]] | str:
        """The body and its opsets by domain, or why it cannot be used (it is empty, or uses
        a domain the model does not import)."""
        if not function.node:
            return "onnx builds an empty body for it"
        body_opsets = {_model_domain(i.domain): int(i.version) for i in function.opset_import}
        missing = sorted(domain for domain in body_opsets if domain not in self.opsets)
        if missing:
            return f"its body uses domain {', '.join(missing)}, which the model does not import"
        return function, body_opsets

    # -- names ------------------------------------------------------------------------------
    def stem(self, node: onnx.NodeProto) -> str:
        """A prefix for the node's body, from its name (or op type), unused in the model."""
        base = node.name or f"{node.op_type}_{node.output[0] if node.output else ''}"
        stem, suffix = base, 1
        while f"{stem}/" in self.stems:
            stem, suffix = f"{base}__{suffix}", suffix + 1
        self.stems.add(f"{stem}/")
        return stem

    def fresh(self, name: str) -> str:
        """``name``, or ``name`` with a suffix, not used in the model yet."""
        unique, suffix = name, 1
        while unique in self.used:
            unique, suffix = f"{name}__{suffix}", suffix + 1
        self.used.add(unique)
        self.stems.update(unique[:i + 1] for i, c in enumerate(unique) if c == "/")
        return unique


def _instantiate(function: onnx.FunctionProto, node: onnx.NodeProto, stem: str,
                 schema: onnx.defs.OpSchema | None,
                 fresh: Callable[[str], str]) -> list[onnx.NodeProto] | None:
    """The body's nodes with the node's inputs, outputs and attributes in place of the
    formal ones; None if a formal output of the node is computed by no body node."""
    import onnx

    names: dict[str, str] = {}
    for index, formal in enumerate(function.input):
        names[formal] = node.input[index] if index < len(node.input) else ""
    identities: list[onnx.NodeProto] = []
    produced = {out for body_node in function.node for out in body_node.output if out}
    for index, formal in enumerate(function.output):
        actual = node.output[index] if index < len(node.output) else ""
        if not actual:
            continue
        if formal in names and formal not in produced:  # an input passed straight through
            identities.append(onnx.helper.make_node(
                "Identity", [names[formal]], [actual], name=fresh(f"{stem}/{formal}")))
            continue
        if formal not in produced:
            return None
        names[formal] = actual

    def rename(name: str) -> str:
        if not name:
            return ""
        if name not in names:
            names[name] = fresh(f"{stem}/{name}")
        return names[name]

    attributes = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in function.attribute_proto}
    if schema is not None:
        for name, attr in schema.attributes.items():
            if name not in defaults and attr.default_value.name:
                defaults[name] = attr.default_value
    placement = [a for a in node.attribute if a.name in _PLACEMENT_NAMES]
    nodes = []
    for index, body_node in enumerate(function.node):
        copy = _renamed(body_node, rename, attributes, defaults)
        copy.name = fresh(f"{stem}/{body_node.name or f'{body_node.op_type}_{index}'}")
        present = {a.name for a in copy.attribute}
        if copy.op_type != "Constant" or copy.domain not in ("", ONNX_DOMAIN):
            copy.attribute.extend(a for a in placement if a.name not in present)
        nodes.append(copy)
    return nodes + identities


def _renamed(body_node: onnx.NodeProto, rename: Callable[[str], str],
             attributes: Mapping[str, onnx.AttributeProto],
             defaults: Mapping[str, onnx.AttributeProto]) -> onnx.NodeProto:
    """A copy of a body node with its values renamed and its attribute references
    resolved (inside its subgraphs too)."""
    import onnx

    copy = onnx.NodeProto()
    copy.CopyFrom(body_node)
    copy.input[:] = [rename(n) for n in body_node.input]
    copy.output[:] = [rename(n) for n in body_node.output]
    del copy.attribute[:]
    for attr in body_node.attribute:
        if attr.ref_attr_name:
            source = attributes.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
            if source is None:
                continue  # the inner op's own default applies
            resolved = onnx.AttributeProto()
            resolved.CopyFrom(source)
            resolved.name = attr.name
            copy.attribute.append(resolved)
            continue
        resolved = onnx.AttributeProto()
        resolved.CopyFrom(attr)
        if resolved.HasField("g"):
            _rename_graph(resolved.g, rename, attributes, defaults)
        for sub in resolved.graphs:
            _rename_graph(sub, rename, attributes, defaults)
        copy.attribute.append(resolved)
    return copy


def _rename_graph(graph: onnx.GraphProto, rename: Callable[[str], str],
                  attributes: Mapping[str, onnx.AttributeProto],
                  defaults: Mapping[str, onnx.AttributeProto]) -> None:
    """A subgraph of a body node, renamed in place like the body around it."""
    for value in (*graph.input, *graph.output, *graph.value_info):
        value.name = rename(value.name)
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
    nodes = [_renamed(n, rename, attributes, defaults) for n in graph.node]
    for inner in nodes:
        if inner.name:
            inner.name = rename(inner.name)
    del graph.node[:]
    graph.node.extend(nodes)


class _BodyTypes(_Types):
    """Types inside one expanded body: ONNX's inference of the body alone, at the body's
    own opsets, from the node's input types; the values it typed that are new."""

    def new_infos(self) -> dict[str, onnx.ValueInfoProto]:
        import onnx

        return {name: onnx.helper.make_value_info(name, t) for name, t in self.own.items()
                if self.parent is None or self.parent.get(name) is None}


def _body_types(nodes: list[onnx.NodeProto], node: onnx.NodeProto, types: _Types,
                function: onnx.FunctionProto) -> _BodyTypes:
    """The types ONNX's shape inference gives the body's values (none where it fails)."""
    import onnx
    import onnx.shape_inference

    inputs = [onnx.helper.make_value_info(name, types.get(name))
              for name in dict.fromkeys(n for n in node.input if n)
              if types.get(name) is not None]
    outputs = [onnx.helper.make_value_info(name, onnx.TypeProto())
               for name in node.output if name]
    graph = onnx.helper.make_graph(nodes, "body", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=list(function.opset_import))
    own: dict[str, onnx.TypeProto] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False,
                                                     strict_mode=False, data_prop=True)
    except Exception:  # ONNX's inference is only a seed
        return _BodyTypes(own, types)
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        if value.type.WhichOneof("value") is not None and value.name not in node.input:
            own[value.name] = value.type
    return _BodyTypes(own, types)


def _copy_node(node: onnx.NodeProto) -> onnx.NodeProto:
    import onnx

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _names_in(graph: onnx.GraphProto) -> set[str]:
    """Every value and node name of the graph and its subgraphs."""
    names: set[str] = set()
    for value in (*graph.input, *graph.output, *graph.value_info):
        names.add(value.name)
    names.update(tensor.name for tensor in graph.initializer)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                names |= _names_in(sub)
    names.discard("")
    return names
