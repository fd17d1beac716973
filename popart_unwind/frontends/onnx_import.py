"""The ONNX front end: a model file or ModelProto becomes an :class:`Ir`, as PopART imports.

Mapping (see docs/ir.md): graph inputs that are not initializers are Stream inputs of the
main graph; float initializers are Variables (weights), other initializers and ``Constant``
nodes are Const tensors; nodes become ops typed (domain, name, opset version of the model);
Loop/If/Scan bodies become subgraphs whose outer-scope reads are made explicit (PopART's
implicit inputs, appended after the explicit ones on the op and on the subgraph). A node
whose op type the registry does not know but ONNX defines by a function body is first
replaced by that body (``frontends/onnx_functions.py``). Op types the registry does not
know are refused (``frontends/onnx_checks.py``) unless
``allow_unknown_ops`` is set; then they stay opaque, keeping the shapes ONNX's own inference
gave them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path, PureWindowsPath
from typing import TYPE_CHECKING, Any

import numpy as np

from popart_unwind.errors import DynamicShapeError, IrError, ModelImportError, ShapeError
from popart_unwind.frontends.input_file import describe_unreadable, require_regular_file
from popart_unwind.frontends.onnx_checks import check_op_types, check_versions
from popart_unwind.frontends.onnx_dims import fix_input_shapes
from popart_unwind.frontends.onnx_functions import expand_functions
from popart_unwind.frontends.onnx_lazy import (
    DataSpan,
    WireFormatError,
    mapped_array,
    read_without_large_data,
)
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX, popart_element_type_note
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import ONNX_DOMAIN, PLACEMENT_ATTRIBUTES, OpSettings, OpType
from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.ops.shape_folding import fold_shape_computations
from popart_unwind.ops.shape_inference import infer_shapes
from popart_unwind.options import SessionOptions

if TYPE_CHECKING:
    import onnx

#: Initializers of these types are weights (VARIABLE); the float8 ones are PopART's float8
#: weights (PopXL makes them variables); training gives them no gradient (the IR does not
#: differentiate float8, as PopART trains no float8 op).
FLOAT_DTYPES = ("float8_e4m3fnuz", "float8_e5m2fnuz", "float16", "bfloat16", "float32",
                "float64")
#: ONNX attributes placing a node, by the OpSettings field they set.
_PLACEMENT = {onnx_name: field for field, onnx_name in PLACEMENT_ATTRIBUTES.items()}


def import_onnx(model: str | Path | bytes | onnx.ModelProto,
                options: SessionOptions | None = None, *,
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                dims: Mapping[str, int] | None = None,
                base_dir: str | Path | None = None,
                allow_unknown_ops: bool | None = None) -> Ir:
    """Import ``model`` (a path, serialized bytes or a ModelProto) into a new Ir.

    ``input_shapes`` fixes dimensions the model leaves symbolic (PopART's
    ``InputShapeInfo``), input by input; ``dims`` fixes them by name (an exporter's
    ``dim_param``, e.g. ``{"batch": 2, "sequence": 128}``) in every input that has them.
    Shape computations the model does at run time are then folded
    (``ops/shape_folding.py``); a dimension left symbolic is refused with a
    DynamicShapeError (a shape that depends on what an input holds is kept unknown, as
    ONNX's inference keeps it, and refused by InferShapes before planning). ``base_dir`` is where a
    ModelProto's external data lives (a path's own folder is used otherwise). Raises
    ModelImportError with one line saying what is wrong; UnsupportedModelError for an IR
    version or opset the installed onnx does not know, no default-domain opset import, or
    op types the registry does not know and ONNX gives no function body for (those with one
    are imported as the ops of their body, ``onnx_functions``) — unless
    ``allow_unknown_ops`` (default: the session option) imports those as opaque barriers,
    warning with an UnknownOpsWarning that lists them.
    """
    proto, folder, source, spans = _load(model, base_dir)
    if allow_unknown_ops is None:
        allow_unknown_ops = (options or SessionOptions()).allow_unknown_ops
    opsets = check_versions(proto, source)
    try:
        proto, initializers = _prepare(proto, input_shapes or {}, dims or {})
        expansion = expand_functions(proto, opsets)
        check_op_types(proto, opsets, source, allow_unknown_ops, expansion.opsets,
                       expansion.unbuilt)
        ir = Ir(options)
        ir.metadata.update(_metadata(proto, source))
        if expansion.expanded:
            ir.metadata["expanded_functions"] = ",".join(
                f"{name}:{count}" for name, count in expansion.expanded.items())
        _Importer(ir, proto, folder, initializers, spans, expansion.opsets).run()
        infer_shapes(ir, trust_seeded=True)
        fold_shape_computations(ir)
    except ModelImportError:
        raise
    except (IrError, ShapeError) as error:
        raise ModelImportError(f"cannot import ONNX model {source}: {error}") from None
    return ir


# -- reading the model ------------------------------------------------------------------------
def _load(model: Any, base_dir: str | Path | None
          ) -> tuple[onnx.ModelProto, Path | None, str, dict[str, DataSpan]]:
    """The message, the folder of its external data, how to name it, and where the raw data
    of the main graph's large initializers lies in the file (``onnx_lazy``: a model file's
    large weights are never read in)."""
    import onnx
    from google.protobuf.message import DecodeError

    spans: dict[str, DataSpan] = {}
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        source = f"<ModelProto {model.graph.name!r}>"
        folder = Path(base_dir) if base_dir is not None else None
    elif isinstance(model, bytes):
        try:
            proto = onnx.load_model_from_string(model)
        except (DecodeError, ValueError) as error:
            raise ModelImportError(f"cannot read ONNX model from bytes: {error}") from None
        source, folder = "<bytes>", Path(base_dir) if base_dir is not None else None
    elif isinstance(model, str | Path):
        path = Path(model)
        require_regular_file(path, "ONNX model")
        try:
            proto, spans = load_light(path)
        except Exception as error:  # protobuf and onnx raise assorted types here
            first = str(error).strip().splitlines()[0] if str(error).strip() else "not ONNX"
            raise ModelImportError(f"cannot read ONNX model {path}: {first}") from None
        source = str(path)
        folder = Path(base_dir) if base_dir is not None else path.parent
    else:
        raise ModelImportError(f"cannot import a {type(model).__name__}: expected a path, "
                               f"bytes or an onnx.ModelProto")
    if proto.ir_version == 0 or not proto.HasField("graph"):
        raise ModelImportError(f"cannot read ONNX model {source}: it has no IR version or no "
                               f"graph (not an ONNX model?)")
    for tensor, _ in _tensors_of(proto.graph):
        if _is_external(tensor):
            _external_path(tensor, folder)  # refuse unsafe locations before anything else
    return proto, folder, source, spans


def load_light(path: Path) -> tuple[onnx.ModelProto, dict[str, DataSpan]]:
    """The model read without its large initializers' data, and where that lies; a file
    the wire-format scan cannot follow is read whole by ONNX (whose error then says what is
    wrong)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        light, spans = read_without_large_data(path)
        return onnx.load_model_from_string(light), spans
    except (WireFormatError, DecodeError):
        return onnx.load(str(path), load_external_data=False), {}


def _prepare(proto: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]],
             dims: Mapping[str, int]) -> tuple[onnx.ModelProto, Sequence[onnx.TensorProto]]:
    """Inline local functions, fix the given input shapes and named dimensions
    (``onnx_dims``), seed shapes by ONNX's inference (``_with_inferred_shapes``: the model to
    import, and its main graph's initializers)."""
    import onnx.inliner

    if proto.functions:
        try:
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as error:  # onnx raises assorted C++ errors here
            raise ModelImportError(f"cannot inline the model's local functions: "
                                   f"{str(error).splitlines()[0]}") from None
    initialized = {tensor.name for tensor in proto.graph.initializer}
    inputs = {value.name: value for value in proto.graph.input
              if value.name not in initialized}
    fix_input_shapes(inputs, input_shapes, dims)
    return _with_inferred_shapes(proto)


#: Main-graph initializers larger than this lend ONNX's shape inference their type and dims
#: only (no shape depends on the data of a tensor this large).
INFERENCE_DATA_BYTES = 1 << 16


def _with_inferred_shapes(proto: onnx.ModelProto
                          ) -> tuple[onnx.ModelProto, Sequence[onnx.TensorProto]]:
    """The model with the value infos ONNX's shape inference finds (only a seed: if it
    fails, none), and the main graph's initializers as read. The inference copies the model
    it is given twice (serialized, then parsed back), so it is given a copy whose large
    initializers hold no data, and those are imported from the model as read: 550 MB of
    weights are not held three times over."""
    import onnx.shape_inference

    light = onnx.ModelProto()
    _copy_fields(proto, light, skip="graph")
    _copy_fields(proto.graph, light.graph, skip="initializer")
    for tensor in proto.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL \
                and tensor.ByteSize() > INFERENCE_DATA_BYTES:
            stub = light.graph.initializer.add()
            stub.name, stub.data_type = tensor.name, tensor.data_type
            stub.dims.extend(tensor.dims)
        else:
            light.graph.initializer.append(tensor)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False,
                                                     strict_mode=False, data_prop=True)
    except Exception:  # ONNX's inference is only a seed: go on without it
        inferred = light
    return inferred, proto.graph.initializer


def _copy_fields(source: Any, target: Any, skip: str) -> None:
    """Every set field of protobuf message ``source`` but ``skip``, into ``target``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        repeated = (field.is_repeated if hasattr(field, "is_repeated")  # protobuf >= 5.29
                    else field.label == field.LABEL_REPEATED)
        if repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _metadata(proto: onnx.ModelProto, source: str) -> dict[str, str]:
    opsets = ",".join(f"{i.domain or ONNX_DOMAIN}:{i.version}" for i in proto.opset_import)
    producer = f"{proto.producer_name} {proto.producer_version}".strip()
    return {"source": source, "format": "onnx", "producer": producer, "opsets": opsets}


def _tensors_of(graph: onnx.GraphProto):
    """Every TensorProto of a graph and its subgraphs (initializers, attribute tensors)."""
    for tensor in graph.initializer:
        yield tensor, graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t, graph
            yield from ((t, graph) for t in attr.tensors)
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _tensors_of(sub)


def external_locations(graph: onnx.GraphProto) -> set[str]:
    """The locations (relative to the model's folder) of the graph's external data files."""
    return {_external_info(tensor).get("location", "") for tensor, _ in _tensors_of(graph)
            if _is_external(tensor)} - {""}


def _is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == 1  # TensorProto.EXTERNAL


def _external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in tensor.external_data}


def _external_path(tensor: onnx.TensorProto, folder: Path | None) -> Path:
    """The file holding ``tensor``'s data; refuses locations outside the model's folder."""
    location = _external_info(tensor).get("location", "")
    if not location:
        raise ModelImportError(f"tensor {tensor.name!r} has external data without a location")
    if "\0" in location:
        raise ModelImportError(f"tensor {tensor.name!r}: external data location {location!r} "
                               f"holds a NUL byte, which no file name can")
    if os.path.isabs(location) or PureWindowsPath(location).is_absolute() \
            or PureWindowsPath(location).drive or location.startswith(("/", "\\")):
        raise ModelImportError(f"tensor {tensor.name!r}: external data location {location!r} "
                               f"is absolute; only paths inside the model's folder are read")
    if folder is None:
        raise ModelImportError(f"tensor {tensor.name!r} has external data {location!r}, but "
                               f"the model was given in memory; pass base_dir")
    root = os.path.realpath(folder)
    resolved = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, resolved]) != root:
        raise ModelImportError(f"tensor {tensor.name!r}: external data location {location!r} "
                               f"resolves to {resolved}, outside the model's folder {root}")
    return Path(resolved)


def _external_span(tensor: onnx.TensorProto, folder: Path | None, dtype: str) -> DataSpan:
    """Where ``tensor``'s external bytes lie (the length, when not given, is what its type
    and shape need)."""
    path = _external_path(tensor, folder)
    info = _external_info(tensor)
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
    except ValueError as error:
        raise ModelImportError(f"tensor {tensor.name!r}: cannot read external data {path}: "
                               f"{error}") from None
    problem = describe_unreadable(path)
    if problem is not None:  # a FIFO is called one (opening it would block), not "missing"
        words = "is missing" if problem.startswith("no such file") else problem
        raise ModelImportError(f"tensor {tensor.name!r}: external data file {path} {words}")
    if length < 0:
        itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        length = itemsize * int(np.prod([int(d) for d in tensor.dims], dtype=np.int64))
    return DataSpan(path, offset, length)


def _read_span(span: DataSpan, what: str) -> bytes:
    try:
        with open(span.path, "rb") as handle:
            handle.seek(span.offset)
            raw = handle.read(span.length)
    except OSError as error:
        raise ModelImportError(f"{what}: cannot read {span.path}: {error.strerror}") from None
    if len(raw) != span.length:
        raise ModelImportError(f"{what}: {span.path} holds {len(raw)} bytes from offset "
                               f"{span.offset}, {span.length} expected")
    return raw


def _with_raw_data(tensor: onnx.TensorProto, raw: bytes) -> onnx.TensorProto:
    """A copy of ``tensor`` holding ``raw`` as its data."""
    import onnx

    loaded = onnx.TensorProto()
    loaded.CopyFrom(tensor)
    del loaded.external_data[:]
    loaded.data_location = onnx.TensorProto.DEFAULT
    loaded.raw_data = raw
    return loaded


def _dtype(elem_type: int, what: str) -> str:
    try:
        return DTYPE_OF_ONNX[elem_type]
    except KeyError:
        import onnx

        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else str(elem_type)
        raise ModelImportError(f"{what} has ONNX element type {name}, which the IR does not "
                               f"model; {popart_element_type_note(elem_type)}") from None


def _value_info(value: onnx.ValueInfoProto) -> tuple[str | None, tuple[int, ...] | None]:
    """(dtype, shape) of a typed ONNX value; None where unknown: symbolic dims, and negative
    ones, which ONNX's inference writes for a value it cannot size (in a branch that never
    runs on these shapes, say) and no tensor has."""
    if not value.type.HasField("tensor_type"):
        return None, None
    tensor_type = value.type.tensor_type
    dtype = _dtype(tensor_type.elem_type, f"value {value.name!r}") \
        if tensor_type.elem_type else None
    if not tensor_type.HasField("shape"):
        return dtype, None
    dims = tensor_type.shape.dim
    if any(not _static(d) for d in dims):
        return dtype, None
    return dtype, tuple(int(d.dim_value) for d in dims)


def _check_default(value: onnx.ValueInfoProto, initializer: Tensor) -> None:
    """A graph input that shares its name with an initializer: by ONNX's IR the initializer
    is the input's default value, and the import takes that value (a weight or constant,
    not a stream); the input's declared type and the known dimensions of its shape must
    agree with it."""
    dtype = _value_info(value)[0]
    if not value.type.HasField("tensor_type"):
        return
    declared = value.type.tensor_type
    dims = list(declared.shape.dim) if declared.HasField("shape") else None
    shape_agrees = dims is None or (len(dims) == len(initializer.shape) and all(
        not d.HasField("dim_value") or d.dim_value == size
        for d, size in zip(dims, initializer.shape, strict=True)))
    if (dtype is None or dtype == initializer.dtype) and shape_agrees:
        return
    shown = "?" if dims is None else "[" + ", ".join(
        str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
        for d in dims) + "]"
    raise ModelImportError(
        f"graph input {value.name!r} is declared {dtype or '?'} {shown}, but the initializer "
        f"of the same name (its default value, which the import takes) is "
        f"{initializer.dtype} {list(initializer.shape)}; make them agree")


def _static(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """Whether ``dim`` is a size: a value of 0 or more."""
    return dim.HasField("dim_value") and dim.dim_value >= 0


def _negative_dim(value: onnx.ValueInfoProto) -> bool:
    """Whether ``value``'s declared shape has a negative dimension."""
    tensor_type = value.type.tensor_type if value.type.HasField("tensor_type") else None
    return tensor_type is not None and any(
        d.HasField("dim_value") and d.dim_value < 0 for d in tensor_type.shape.dim)


def _symbolic_dims(value: onnx.ValueInfoProto) -> list[str]:
    dims = value.type.tensor_type.shape.dim
    return [d.dim_param or "?" for d in dims if not _static(d)]


def _no_static_type(value: onnx.ValueInfoProto) -> str:
    """Why graph input ``value`` cannot be imported as it is, and how to give its shape (by
    its dimensions' names where it has them)."""
    symbols = _symbolic_dims(value) if value.type.HasField("tensor_type") else []
    named = [symbol for symbol in symbols if symbol != "?"]
    by_name = "".join(f"--dim {symbol}=N " for symbol in dict.fromkeys(named))
    python = (f"dims={{{', '.join(f'{s!r}: N' for s in dict.fromkeys(named))}}} or "
              if named else "")
    return (f"graph input {value.name!r} has no static type (unknown dimensions {symbols}); "
            f"give its shape: {by_name}{'or ' if by_name else ''}--input-shape "
            f"{value.name}=D1,D2,... on the command line, {python}"
            f"input_shapes={{{value.name!r}: [...]}} from Python")


# -- building graphs ----------------------------------------------------------------------------
class _Scope:
    """The graph being built, and the outer-scope values it captured (implicit inputs)."""

    def __init__(self, graph: Graph, parent: _Scope | None) -> None:
        self.graph = graph
        self.parent = parent
        self.implicit: list[str] = []

    def lookup(self, name: str, user: str) -> Tensor:
        if self.graph.has_tensor(name):
            return self.graph.tensor(name)
        if self.parent is None:
            raise ModelImportError(f"{user} reads {name!r}, which nothing in the model defines")
        outer = self.parent.lookup(name, user)
        self.implicit.append(name)
        return self.graph.add_input(name, outer.dtype, outer.shape)


class _Importer:
    def __init__(self, ir: Ir, proto: onnx.ModelProto, folder: Path | None,
                 initializers: Sequence[onnx.TensorProto],
                 spans: Mapping[str, DataSpan],
                 node_opsets: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self.ir = ir
        self.folder = folder
        self.initializers = initializers  # the main graph's, with their data
        self.spans = spans  # where the main graph's large initializers' data lies
        self.opsets = {(i.domain or ONNX_DOMAIN): int(i.version) for i in proto.opset_import}
        #: Nodes of expanded function bodies written for other opsets than the model's.
        self.node_opsets = node_opsets or {}
        self.proto = proto

    def run(self) -> None:
        self.graph(self.proto.graph, _Scope(self.ir.main_graph, None))

    # -- one graph --------------------------------------------------------------------------
    def graph(self, onnx_graph: onnx.GraphProto, scope: _Scope) -> None:
        graph, main = scope.graph, scope.parent is None
        infos = {v.name: v for v in (*onnx_graph.input, *onnx_graph.output,
                                     *onnx_graph.value_info)}
        initialized = set()
        for tensor in self.initializers if main else onnx_graph.initializer:
            self.initializer(graph, tensor, self.spans.get(tensor.name) if main else None)
            initialized.add(tensor.name)
        for value in onnx_graph.input:
            if value.name in initialized:
                _check_default(value, graph.tensor(value.name))
                continue
            dtype, shape = _value_info(value)
            if main and (dtype is None or shape is None):
                raise DynamicShapeError(_no_static_type(value))
            kind = TensorType.STREAM if main else TensorType.ACT_GRAD
            graph.add_input(value.name, dtype or "float32", shape, kind)
        for position, node in enumerate(_topological(onnx_graph)):
            self.node(node, position, scope, infos)
        for value in onnx_graph.output:
            graph.mark_output(scope.lookup(value.name, f"graph {graph.id!r} output"))

    def array(self, tensor: onnx.TensorProto, span: DataSpan | None = None
              ) -> tuple[str, np.ndarray]:
        """The tensor's type and values: a read-only map of the file where its data lies in
        one (``span``, or external data), else an array of the importer's own."""
        from onnx import numpy_helper

        what = f"tensor {tensor.name!r}"
        dtype = _dtype(tensor.data_type, what)
        if span is None and _is_external(tensor):
            span = _external_span(tensor, self.folder, dtype)
        if span is not None and dtype != "bfloat16":
            return dtype, mapped_array(span, dtype, tuple(int(d) for d in tensor.dims), what)
        if span is not None:  # numpy has no bfloat16: read in, converted below
            tensor = _with_raw_data(tensor, _read_span(span, what))
        try:
            array = numpy_helper.to_array(tensor)
        except (ValueError, TypeError) as error:
            raise ModelImportError(f"tensor {tensor.name!r} cannot be read: {error}") from None
        if dtype == "bfloat16":
            array = array.astype(np.float32)  # numpy has no bfloat16; the dtype stays
        if array.flags.c_contiguous and array.flags.owndata:
            return dtype, array  # already the importer's own copy
        return dtype, np.array(array, order="C")  # a copy; keeps 0-d arrays 0-d

    def initializer(self, graph: Graph, tensor: onnx.TensorProto,
                    span: DataSpan | None = None) -> None:
        dtype, data = self.array(tensor, span)
        kind = TensorType.VARIABLE if dtype in FLOAT_DTYPES else TensorType.CONST
        graph.add_tensor(tensor.name, dtype, data.shape, kind, data)

    # -- one node ---------------------------------------------------------------------------
    def node(self, node: onnx.NodeProto, position: int, scope: _Scope,
             infos: dict[str, onnx.ValueInfoProto]) -> None:
        domain = node.domain or ONNX_DOMAIN
        label = f"node {node.name or node.op_type!r} ({node.op_type})"
        if domain == ONNX_DOMAIN and node.op_type == "Constant":
            self.constant(node, scope.graph, label)
            return
        settings = OpSettings(name=node.name)
        attributes: dict[str, Any] = {}
        children: list[tuple[str, _Scope]] = []
        for attr in node.attribute:
            if attr.name in _PLACEMENT:
                setattr(settings, _PLACEMENT[attr.name], _placement(attr, label))
            else:
                attributes[attr.name] = self.attribute(attr, node, position, scope, children)
        inputs: list[Tensor | None] = [None if not name else scope.lookup(name, label)
                                       for name in node.input]
        inputs += self.implicit_inputs(node, scope, children, attributes, label)
        opsets = self.node_opsets.get(node.name, self.opsets)
        op_type = OpType(domain, node.op_type, opsets.get(domain, self.opsets.get(domain, 1)))
        op = scope.graph.create_op(op_type, inputs, outputs=[], attributes=attributes,
                                   settings=settings)
        # A negative dim marks sizes ONNX's inference got wrong for this node (a Split of 5
        # into 4 in a branch that never runs: sizes 2, 2, 2, -1): none of them is kept.
        unsized = any(_negative_dim(infos[name]) for name in node.output if name in infos)
        for index, name in enumerate(node.output):
            if not name:
                continue
            if scope.graph.has_tensor(name):
                raise ModelImportError(f"{label} defines {name!r}, which is already defined")
            dtype, shape = _value_info(infos[name]) if name in infos else (None, None)
            scope.graph.create_output(op, index, name, dtype or "float32",
                                      None if unsized else shape)

    def implicit_inputs(self, node: onnx.NodeProto, scope: _Scope,
                        children: list[tuple[str, _Scope]], attributes: dict[str, Any],
                        label: str) -> list[Tensor]:
        """Outer values the node's subgraphs read, as extra op inputs (index maps kept)."""
        if not children:
            return []
        names: list[str] = []
        for _, child in children:
            names += [n for n in child.implicit if n not in names]
        if node.op_type == "If" and (node.domain or ONNX_DOMAIN) == ONNX_DOMAIN:
            for attr_name, child in children:
                prefix = "then" if attr_name == "then_branch" else "else"
                ids = child.graph.input_ids
                attributes[f"{prefix}_inputs"] = sorted(
                    [1 + names.index(n), ids.index(n)] for n in child.implicit)
                count = len(child.graph.output_ids)
                attributes[f"{prefix}_outputs"] = [[i, i] for i in range(count)]
        else:
            attributes["num_implicit_inputs"] = len(names)
        return [scope.lookup(name, label) for name in names]

    def constant(self, node: onnx.NodeProto, graph: Graph, label: str) -> None:
        import onnx

        if len(node.output) != 1 or len(node.attribute) != 1:
            raise ModelImportError(f"{label} must have one output and one value attribute")
        attr = node.attribute[0]
        if attr.name == "value":
            dtype, data = self.array(attr.t)
        elif attr.name == "sparse_value":
            dtype, data = self.array(_densify(attr.sparse_tensor))
        elif attr.name in ("value_float", "value_floats"):
            dtype, data = "float32", np.asarray(onnx.helper.get_attribute_value(attr),
                                                dtype=np.float32)
        elif attr.name in ("value_int", "value_ints"):
            dtype, data = "int64", np.asarray(onnx.helper.get_attribute_value(attr),
                                              dtype=np.int64)
        else:
            raise ModelImportError(f"{label}: constant attribute {attr.name!r} holds a type "
                                   f"the IR does not model")
        if graph.has_tensor(node.output[0]):
            raise ModelImportError(f"{label} defines {node.output[0]!r}, which is already "
                                   f"defined")
        graph.add_tensor(node.output[0], dtype, data.shape, TensorType.CONST, data)

    def attribute(self, attr: onnx.AttributeProto, node: onnx.NodeProto, position: int,
                  scope: _Scope, children: list[tuple[str, _Scope]]) -> Any:
        """An ONNX attribute as a Python value; graphs are imported, giving their ids."""
        import onnx

        kind = onnx.AttributeProto
        if attr.type == kind.GRAPH:
            return self.subgraph(attr.g, attr.name, node, position, scope, children)
        if attr.type == kind.GRAPHS:
            return [self.subgraph(g, f"{attr.name}{i}", node, position, scope, children)
                    for i, g in enumerate(attr.graphs)]
        if attr.type == kind.TENSOR:
            return self.array(attr.t)[1]
        if attr.type == kind.TENSORS:
            return [self.array(t)[1] for t in attr.tensors]
        if attr.type == kind.SPARSE_TENSOR:
            return self.array(_densify(attr.sparse_tensor))[1]
        if attr.type == kind.STRING:
            return attr.s.decode("utf-8", errors="replace")
        if attr.type == kind.STRINGS:
            return [s.decode("utf-8", errors="replace") for s in attr.strings]
        if attr.type == kind.FLOAT:
            return float(attr.f)
        if attr.type == kind.FLOATS:
            return [float(f) for f in attr.floats]
        if attr.type == kind.INT:
            return int(attr.i)
        if attr.type == kind.INTS:
            return [int(i) for i in attr.ints]
        return str(onnx.helper.get_attribute_value(attr))  # type protos: kept as text

    def subgraph(self, onnx_graph: onnx.GraphProto, attr_name: str, node: onnx.NodeProto,
                 position: int, scope: _Scope, children: list[tuple[str, _Scope]]) -> str:
        """Import a body; its id derives from the node's name (or type and position)."""
        stem = node.name or f"{node.op_type}{position}"
        base = f"{scope.graph.id}/{stem}.{attr_name}" if scope.graph.id else \
            f"{stem}.{attr_name}"
        graph_id, suffix = base, 1
        while self.ir.has_graph(graph_id):
            graph_id, suffix = f"{base}__{suffix}", suffix + 1
        child = _Scope(self.ir.create_graph(graph_id), scope)
        self.graph(onnx_graph, child)
        children.append((attr_name, child))
        return graph_id


#: Placement attributes whose value is an index from 0 (PopART's -1 means "not set", which
#: an ONNX model says by leaving the attribute out).
_COUNTED_FROM_ZERO = ("__ipu_number", "__pipeline_stage")


def _placement(attr: onnx.AttributeProto, label: str) -> int:
    """A placement attribute's value, checked: an integer, an index from 0 where it is one
    (the machine's size is checked once the session knows it, ``placed_options``)."""
    import onnx

    if attr.type != onnx.AttributeProto.INT:
        shown = onnx.helper.get_attribute_value(attr)
        if isinstance(shown, bytes):
            shown = shown.decode("utf-8", errors="replace")
        raise ModelImportError(f"{label}: placement attribute {attr.name} must be an "
                               f"integer, got {shown!r}")
    if attr.name in _COUNTED_FROM_ZERO and attr.i < 0:
        raise ModelImportError(f"{label}: placement attribute {attr.name} must be 0 or more, "
                               f"got {attr.i}")
    return int(attr.i)


def _densify(sparse: onnx.SparseTensorProto) -> onnx.TensorProto:
    """A dense TensorProto of a sparse one (values at linear or coordinate indices)."""
    from onnx import numpy_helper

    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 2:
        dense[tuple(indices.T)] = values
    else:
        dense.reshape(-1)[indices] = values
    return numpy_helper.from_array(dense, sparse.values.name)


def _topological(onnx_graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes in an order where producers come first (file order wherever it is one)."""
    nodes = list(onnx_graph.node)
    producer = {name: i for i, node in enumerate(nodes) for name in node.output if name}
    waiting = [{producer[n] for n in node.input if n in producer} for node in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, deps in enumerate(waiting):
        for dep in sorted(deps):
            users[dep].append(i)
    import heapq

    ready = [i for i, deps in enumerate(waiting) if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for user in users[i]:
            waiting[user].discard(i)
            if not waiting[user]:
                heapq.heappush(ready, user)
    if len(order) != len(nodes):
        stuck = next(nodes[i] for i, deps in enumerate(waiting) if deps)
        raise ModelImportError(f"graph {onnx_graph.name!r} has a cycle through node "
                               f"{stuck.name or stuck.op_type!r}")
    return order
