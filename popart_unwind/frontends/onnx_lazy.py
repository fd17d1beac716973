"""Weights left in the model file: large initializers are read only if something reads them.

Planning needs each weight's type and shape, never its values, yet a model read whole holds
every weight in memory, once in the parsed message and again as arrays (VGG-19: 548 MiB).
So a model file is first scanned at the level of protobuf's wire format (each field's key
and length; the payloads of skipped fields are never touched): the main graph's
initializers whose ``raw_data`` is at least ``LAZY_BYTES`` long are parsed without it, and
where each payload lies in the file is kept. Their arrays are then read-only memory maps of
the file (``numpy.memmap``): pages are read from disk when, and only if, something reads
the values. Initializers kept in external data files are mapped the same way.

The scan knows the few fields it walks through (``ModelProto.graph`` = 7,
``GraphProto.initializer`` = 5, ``TensorProto.name`` = 8 and ``raw_data`` = 9, from
onnx.proto); everything else is copied as it is. A file the scan cannot follow is left to
ONNX's own reader, which says what is wrong with it.
"""

from __future__ import annotations

import dataclasses
import mmap
from math import prod
from pathlib import Path

import numpy as np

from popart_unwind.errors import ModelImportError

#: Initializers whose raw data is at least this long stay in the file.
LAZY_BYTES = 1 << 16

_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_NAME = 8
_TENSOR_RAW_DATA = 9
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class WireFormatError(ValueError):
    """The bytes are not protobuf the scan can follow (left to ONNX's reader to explain)."""


@dataclasses.dataclass(frozen=True)
class DataSpan:
    """Where a tensor's raw little-endian bytes lie in a file."""

    path: Path
    offset: int
    length: int


def read_without_large_data(path: Path, min_bytes: int | None = None
                            ) -> tuple[bytes, dict[str, DataSpan]]:
    """The model file's bytes with the ``raw_data`` of each main-graph initializer of at
    least ``min_bytes`` (default ``LAZY_BYTES``) left out, and where each left-out payload
    lies, by tensor name. Raises WireFormatError when the file is not protobuf the scan can
    follow."""
    if min_bytes is None:
        min_bytes = LAZY_BYTES
    with open(path, "rb") as handle:
        if handle.seek(0, 2) == 0:
            return b"", {}
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                spans: dict[str, DataSpan] = {}
                model = bytearray()
                for field, wire, start, end, payload in _fields(view, 0, len(view)):
                    if field == _MODEL_GRAPH and wire == _LENGTH_DELIMITED:
                        graph = _graph_without_large_data(view, payload, end, path,
                                                          min_bytes, spans)
                        _append_message(model, field, graph)
                    else:
                        model += view[start:end]
                return bytes(model), spans
            finally:
                view.release()


def mapped_array(span: DataSpan, dtype: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """A read-only array over ``span`` (ONNX raw data: little-endian, C order)."""
    kind = np.dtype(dtype).newbyteorder("<")
    expected = prod(shape) * kind.itemsize
    if span.length != expected:
        raise ModelImportError(f"{what} holds {span.length} bytes of data; its type and "
                               f"shape {list(shape)} need {expected}")
    try:
        size = span.path.stat().st_size
    except OSError as error:
        raise ModelImportError(f"{what}: cannot read {span.path}: {error.strerror}") from None
    if span.offset + span.length > size:
        raise ModelImportError(f"{what}: {span.path} holds {max(0, size - span.offset)} "
                               f"bytes from offset {span.offset}, {span.length} expected")
    if expected == 0:
        return np.zeros(shape, kind)
    return np.memmap(span.path, dtype=kind, mode="r", offset=span.offset, shape=shape)


# -- the wire format --------------------------------------------------------------------------
def _graph_without_large_data(view: memoryview, begin: int, end: int, path: Path,
                              min_bytes: int, spans: dict[str, DataSpan]) -> bytearray:
    graph = bytearray()
    for field, wire, start, stop, payload in _fields(view, begin, end):
        if field == _GRAPH_INITIALIZER and wire == _LENGTH_DELIMITED:
            _append_message(graph, field, _tensor_without_large_data(
                view, payload, stop, path, min_bytes, spans))
        else:
            graph += view[start:stop]
    return graph


def _tensor_without_large_data(view: memoryview, begin: int, end: int, path: Path,
                               min_bytes: int, spans: dict[str, DataSpan]) -> bytearray:
    tensor = bytearray()
    name: str | None = None
    raw: tuple[int, int] | None = None
    for field, wire, start, stop, payload in _fields(view, begin, end):
        if field == _TENSOR_NAME and wire == _LENGTH_DELIMITED:
            name = bytes(view[payload:stop]).decode("utf-8", errors="replace")
        if field == _TENSOR_RAW_DATA and wire == _LENGTH_DELIMITED \
                and stop - payload >= min_bytes and raw is None:
            raw = (payload, stop - payload)
            continue
        tensor += view[start:stop]
    if raw is not None:
        if name is None or name in spans:  # unnamed or named twice: keep the data
            return bytearray(view[begin:end])
        spans[name] = DataSpan(path, *raw)
    return tensor


def _append_message(out: bytearray, field: int, body: bytearray) -> None:
    out += _varint_bytes(field << 3 | _LENGTH_DELIMITED)
    out += _varint_bytes(len(body))
    out += body


def _fields(view: memoryview, begin: int, end: int):
    """(field number, wire type, field start, field end, payload start) of each field."""
    at = begin
    while at < end:
        start = at
        key, at = _varint(view, at, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise WireFormatError(f"field number 0 at byte {start}")
        if wire == _VARINT:
            _, at = _varint(view, at, end)
            payload = at
        elif wire == _FIXED64:
            payload, at = at, at + 8
        elif wire == _FIXED32:
            payload, at = at, at + 4
        elif wire == _LENGTH_DELIMITED:
            length, payload = _varint(view, at, end)
            at = payload + length
        else:
            raise WireFormatError(f"wire type {wire} at byte {start}")
        if at > end:
            raise WireFormatError(f"field {field} at byte {start} runs past its message")
        yield field, wire, start, at, payload


def _varint(view: memoryview, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end or shift > 63:
            raise WireFormatError(f"a malformed varint before byte {at}")
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
