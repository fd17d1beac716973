"""The input ONNX model annotated with its plan, for tools that read layouts from the model.

The copy is the input model unchanged except for two ``metadata_props`` entries:
``popart_unwind.plan`` (the plan file's content as one line of JSON) and
``popart_unwind.version``. Weights kept in external data files are not copied: the
annotated model refers to the same files, so it must be written into the input model's
folder (anything else is refused before any work is done; docs/cli.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from popart_unwind.errors import ModelImportError
from popart_unwind.report.atomic import OutputError
from popart_unwind.version import __version__

if TYPE_CHECKING:
    import onnx

PLAN_KEY = "popart_unwind.plan"
VERSION_KEY = "popart_unwind.version"


def load_for_annotation(source: Path, destination: Path) -> onnx.ModelProto:
    """The input model without its external data, after checking that an annotated copy
    at ``destination`` would stay valid."""
    import onnx

    if destination.resolve() == source.resolve():
        raise OutputError(f"--onnx-out {destination} is the input model; choose another file")
    try:
        proto = onnx.load(str(source), load_external_data=False)
    except Exception as error:  # protobuf and onnx raise assorted types
        first = (str(error).strip().splitlines() or ["not ONNX"])[0]
        raise ModelImportError(f"cannot read ONNX model {source}: {first}") from None
    external = next((t.name for t in _tensors(proto.graph) if t.data_location == 1), None)
    same_folder = os.path.realpath(destination.parent) == os.path.realpath(source.parent)
    if external is not None and not same_folder:
        raise OutputError(f"model {source} keeps weights (e.g. {external!r}) in external data "
                          f"files; write --onnx-out into its folder {source.parent} so that "
                          f"the annotated copy still finds them")
    return proto


def annotated_bytes(proto: onnx.ModelProto, compact_plan: str) -> bytes:
    """The serialized model with the plan in its metadata (earlier annotations replaced)."""
    import onnx

    annotated = onnx.ModelProto()
    annotated.CopyFrom(proto)
    kept = [(p.key, p.value) for p in annotated.metadata_props
            if p.key not in (PLAN_KEY, VERSION_KEY)]
    del annotated.metadata_props[:]
    for key, value in [*kept, (PLAN_KEY, compact_plan), (VERSION_KEY, __version__)]:
        entry = annotated.metadata_props.add()
        entry.key, entry.value = key, value
    return annotated.SerializeToString(deterministic=True)


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in a graph: initializers and node attributes, subgraphs too."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for sub in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                yield from _tensors(sub)
