"""Stable JSON for IRs: equal IRs give byte-identical text, whatever the hash seed.

Graphs are listed main first then by id, ops by id, tensors by id, keys sorted. Tensor data
is summarised by its SHA-256 (and included in base64 only when asked, since real weights run
to hundreds of MB: for every tensor, or for those a predicate picks, such as the constants
of a graph whose weights only matter by shape); numpy attribute values are encoded in full.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from popart_unwind.errors import IrError
from popart_unwind.ir.op import Op, OpSettings, OpType
from popart_unwind.ir.tensor import Tensor, TensorType

if TYPE_CHECKING:
    from popart_unwind.ir.graph import Graph
    from popart_unwind.ir.ir import Ir

#: Whether tensors' data is written in full: every tensor's, none, or as a predicate says.
DataChoice = bool | Callable[[Tensor], bool]

FORMAT_VERSION = 1


#: Elements an array's bytes are read in at a time (``row_blocks``).
BLOCK_ELEMENTS = 1 << 20


def row_blocks(array: np.ndarray):  # type: ignore[no-untyped-def]
    """An array's row-major bytes as consecutive blocks of its first axis, each a few MB:
    a fill folded as a broadcast view (``ConstantOfShape``) is never made whole to be read."""
    array = np.asarray(array)
    if array.ndim == 0 or array.size == 0:
        yield np.ascontiguousarray(array).tobytes()
        return
    step = max(1, BLOCK_ELEMENTS // max(1, array.size // array.shape[0]))
    for begin in range(0, array.shape[0], step):
        yield np.ascontiguousarray(array[begin:begin + step]).tobytes()


def array_digest(array: np.ndarray) -> str:
    array = np.asarray(array)
    digest = hashlib.sha256(f"{array.dtype.str}{tuple(array.shape)}".encode())
    for block in row_blocks(array):
        digest.update(block)
    return digest.hexdigest()


def _encode_array(array: np.ndarray, include_data: bool) -> dict[str, Any]:
    encoded: dict[str, Any] = {"dtype": str(array.dtype), "shape": list(array.shape),
                               "sha256": array_digest(array)}
    if include_data:
        encoded["base64"] = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()
    return encoded


def _decode_array(encoded: dict[str, Any]) -> np.ndarray | None:
    if "base64" not in encoded:
        return None
    raw = base64.b64decode(encoded["base64"])
    return np.frombuffer(raw, dtype=encoded["dtype"]).reshape(encoded["shape"]).copy()


def _encode_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__ndarray__": _encode_array(value, True)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [_encode_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode_value(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise IrError(f"cannot serialise attribute value of type {type(value).__name__}")


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict) and "__ndarray__" in value:
        return _decode_array(value["__ndarray__"])
    if isinstance(value, list):
        return [_decode_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _decode_value(v) for k, v in value.items()}
    return value


def graph_to_dict(graph: Graph, include_data: DataChoice) -> dict[str, Any]:
    tensors = {}
    for tensor in sorted(graph.tensors, key=lambda t: t.id):
        entry: dict[str, Any] = {"dtype": tensor.dtype, "type": tensor.tensor_type.value,
                                 "shape": None if tensor.shape is None else list(tensor.shape)}
        if tensor.data is not None:
            full = include_data(tensor) if callable(include_data) else include_data
            entry["data"] = _encode_array(tensor.data, bool(full))
        if tensor.tile_mapping is not None:
            entry["tile_mapping"] = [[list(iv) for iv in tile] for tile in tensor.tile_mapping]
        tensors[tensor.id] = entry
    ops = []
    for op in graph.ops:
        ops.append({
            "id": op.id,
            "type": [op.type.domain, op.type.name, op.type.version],
            "attributes": _encode_value(op.attributes),
            "settings": {"name": op.settings.name, "scope": op.settings.scope,
                         **op.settings.placement(), **_recomputed(op)},
            "inputs": [[i, t.id] for i, t in op.input_map().items()],
            "outputs": [[i, t.id] for i, t in op.output_map().items()],
        })
    return {"inputs": list(graph.input_ids), "outputs": list(graph.output_ids),
            "tensors": tensors, "ops": ops}


def _recomputed(op: Op) -> dict[str, Any]:
    """What transforms record in an op's settings (the original a recomputing op clones,
    its schedule priority, the serialized layer it is a piece of), each written only when
    set (older files stay byte-identical)."""
    written: dict[str, Any] = {}
    if op.settings.recomputed_from >= 0:
        written["recomputed_from"] = op.settings.recomputed_from
    if op.settings.schedule_priority:
        written["schedule_priority"] = op.settings.schedule_priority
    if op.settings.serialized is not None:
        written["serialized"] = list(op.settings.serialized)
    return written


def _settings(entry: dict[str, Any]) -> OpSettings:
    entry = dict(entry)
    if entry.get("serialized") is not None:
        entry["serialized"] = tuple(entry["serialized"])
    return OpSettings(**entry)


def ir_to_json(ir: Ir, include_data: DataChoice = False) -> str:
    document = {"format": FORMAT_VERSION,
                "graphs": {g.id: graph_to_dict(g, include_data) for g in ir.graphs}}
    if ir.final_loss_id is not None:
        document["final_loss_id"] = ir.final_loss_id
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=True)


def ir_from_json(text: str) -> Ir:
    """Rebuild an IR; tensor data comes back only if it was included."""
    from popart_unwind.ir.ir import Ir

    try:
        document = json.loads(text)
        graphs = document["graphs"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise IrError(f"not an IR JSON document: {error}") from None
    ir = Ir()
    ir.final_loss_id = document.get("final_loss_id")
    for graph_id in sorted(graphs):
        if graph_id:
            ir.create_graph(graph_id)
    all_ops = []
    for graph_id in sorted(graphs):
        graph, body = ir.graph(graph_id), graphs[graph_id]
        inputs = set(body["inputs"])
        produced = {tensor_id for op in body["ops"] for _, tensor_id in op["outputs"]}
        for tensor_id in body["inputs"]:
            entry = body["tensors"][tensor_id]
            graph.add_input(tensor_id, entry["dtype"], entry["shape"],
                            TensorType(entry["type"]))
        for tensor_id, entry in sorted(body["tensors"].items()):
            if tensor_id in inputs or tensor_id in produced:
                continue
            data = _decode_array(entry["data"]) if "data" in entry else None
            graph.add_tensor(tensor_id, entry["dtype"], entry["shape"],
                             TensorType(entry["type"]), data)
        all_ops += [(op["id"], graph, op, body["tensors"]) for op in body["ops"]]
    for op_id, graph, entry, tensors in sorted(all_ops, key=lambda item: item[0]):
        ir._op_counter = op_id
        op = graph.create_op(OpType(*entry["type"]), outputs=[],
                             attributes=_decode_value(entry["attributes"]),
                             settings=_settings(entry["settings"]))
        for index, tensor_id in entry["outputs"]:
            info = tensors[tensor_id]
            graph.create_output(op, index, tensor_id, info["dtype"], info["shape"])
    for op_id, graph, entry, _ in sorted(all_ops, key=lambda item: item[0]):
        op = graph.op(op_id)
        for index, tensor_id in entry["inputs"]:
            graph.connect_input(op, index, tensor_id)
    ir._op_counter = max((item[0] for item in all_ops), default=-1) + 1
    for graph_id in sorted(graphs):
        graph, body = ir.graph(graph_id), graphs[graph_id]
        graph.output_ids = list(body["outputs"])
        for tensor_id, entry in body["tensors"].items():
            if "tile_mapping" in entry:
                graph.tensor(tensor_id).tile_mapping = [
                    [tuple(iv) for iv in tile] for tile in entry["tile_mapping"]]
    return ir
