"""ONNX's backend node tests as a judge of the importer's shapes and types.

The ``onnx`` package ships its node tests as generators: each case is a small model and
the arrays a reference run gives. The expected outputs' shapes and element types are the
truth the importer's shape rules are checked against, in three views of each model:

- ``given``: the model as generated (declared output shapes included);
- ``undeclared``: every declared shape of graph outputs and value infos removed, element
  types kept (the importer must find the shapes itself);
- ``rules``: the undeclared model with ONNX's own shape inference unavailable
  (``onnx.shape_inference.infer_shapes`` patched to raise), so our shape rules alone.

Shared by ``tests/frontends/test_onnx_conformance.py`` and
``benchmarks/onnx_conformance.py`` so that both judge by the same code.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np

from popart_unwind.errors import ModelImportError, PopartUnwindError, UnsupportedModelError
from popart_unwind.ir import Ir
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX

if TYPE_CHECKING:
    import onnx

VIEWS = ("given", "undeclared", "rules")

#: Outcomes of importing one case in one view.
OK, WRONG, UNKNOWN = "ok", "wrong", "unknown"
REFUSED_OP, REFUSED_TYPE, REFUSED_OTHER = "refused-op", "refused-type", "refused-other"
INTERNAL, CRASH, TIMEOUT = "internal", "crash", "timeout"
IMPORT_OUTCOMES = (OK, WRONG, UNKNOWN, REFUSED_OP, REFUSED_TYPE, REFUSED_OTHER, INTERNAL,
                   CRASH, TIMEOUT)
#: Outcomes that are defects of ours rather than limits of what is modelled.
DEFECTS = (WRONG, INTERNAL, CRASH)
PLANNED = "planned"

#: The importer's message when a shape rule contradicts a shape the model declares (or
#: ONNX's inference seeded): the rule disagrees with ONNX, so the outcome is ``wrong``.
_RULE_CONTRADICTS = re.compile(r"the shape rule gives .*, but the tensor is ")
_UNMODELLED_TYPE = re.compile(r"has ONNX element type \w+, which the IR does not model")
_UNKNOWN_OP_TYPES = "has op types the tool does not know"
_EXPANDED = re.compile(r"_expanded.*$")
#: How the importer names a ModelProto in its messages (dropped: the case is named anyway).
_MODEL_NAMED = re.compile(r"(cannot import )?ONNX model <ModelProto '[^']*'>:? ")


@dataclass(frozen=True)
class ConformanceCase:
    """One node test: its name, main op type, model and expected outputs (first data set)."""

    name: str
    op_type: str
    model: onnx.ModelProto
    expected: tuple[Any, ...]


@dataclass(frozen=True)
class Outcome:
    """What importing (or planning) one case gave: an outcome and, for errors, the first
    line of the message."""

    outcome: str
    detail: str = ""


_COLLECTED: list[Any] | None = None


def onnx_node_tests() -> list[Any]:
    """ONNX's node test cases, collected once per process (the generators run only once:
    a second collection would return the first one's list anyway)."""
    global _COLLECTED
    if _COLLECTED is None:
        from onnx.backend.test.case.node import collect_testcases

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # the generators overflow casts on purpose
            _COLLECTED = list(collect_testcases(None))
    return _COLLECTED


def conformance_cases(pattern: str | None = None) -> list[ConformanceCase]:
    """The node tests whose name matches ``pattern`` (a regular expression searched in the
    name; all if None), sorted by name."""
    tests = sorted(onnx_node_tests(), key=lambda test: test.name)
    op_of = {test.name: _single_op_type(test.model) for test in tests}
    matcher = re.compile(pattern) if pattern else None
    return [ConformanceCase(test.name, main_op_type(test.name, op_of), test.model,
                            tuple(test.data_sets[0][1]))
            for test in tests if matcher is None or matcher.search(test.name)]


def main_op_type(name: str, op_of: dict[str, str | None]) -> str:
    """The op a case tests: its node's type; for an expanded function (many nodes), the type
    of the unexpanded case of the same name, else a name derived from the case's."""
    own = op_of.get(name)
    base = _EXPANDED.sub("", name)
    if base != name and op_of.get(base):
        return str(op_of[base])
    if own:
        return own
    return base.removeprefix("test_").split("_")[0]


def _single_op_type(model: onnx.ModelProto) -> str | None:
    nodes = model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else None


# -- the views ---------------------------------------------------------------------------------
def without_declared_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs and value infos (in every graph, subgraphs
    included) declare element types but no shapes."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _strip_graph(copy.graph)
    return copy


def _strip_graph(graph: onnx.GraphProto) -> None:
    for value in [*graph.output, *graph.value_info]:
        _strip_type(value.type)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _strip_graph(attribute.g)
            for subgraph in attribute.graphs:
                _strip_graph(subgraph)


def _strip_type(type_proto: onnx.TypeProto) -> None:
    """Clear the shape of a tensor type, also inside sequence, optional and map types."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        getattr(type_proto, kind).ClearField("shape")
    elif kind in ("sequence_type", "optional_type"):
        _strip_type(getattr(type_proto, kind).elem_type)
    elif kind == "map_type":
        _strip_type(type_proto.map_type.value_type)


@contextlib.contextmanager
def onnx_inference_unavailable() -> Iterator[None]:
    """ONNX's shape inference raising when called: the importer then goes on with the
    shapes the model declares, and its own rules find the rest."""
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("ONNX shape inference is unavailable in the 'rules' view")

    with mock.patch("onnx.shape_inference.infer_shapes", side_effect=refuse):
        yield


def view_of(case: ConformanceCase, view: str) -> tuple[onnx.ModelProto, Any]:
    """The model of ``case`` in ``view`` and the context to import it in."""
    if view == "given":
        return case.model, contextlib.nullcontext()
    if view == "undeclared":
        return without_declared_shapes(case.model), contextlib.nullcontext()
    if view == "rules":
        return without_declared_shapes(case.model), onnx_inference_unavailable()
    raise ValueError(f"unknown view {view!r}; expected one of {VIEWS}")


# -- judging -----------------------------------------------------------------------------------
def import_case(case: ConformanceCase, view: str) -> tuple[Outcome, Ir | None]:
    """Import ``case`` in ``view`` and judge it; the Ir, when the import succeeded."""
    model, context = view_of(case, view)
    try:
        with context, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ir = Ir.from_onnx(model)
    except PopartUnwindError as error:
        return refusal(error), None
    except Exception as error:  # anything else escaping the importer is a defect
        return Outcome(INTERNAL, describe(error)), None
    try:
        return compare_outputs(ir, case.expected), ir
    except Exception as error:  # a malformed Ir is a defect too
        return Outcome(INTERNAL, describe(error)), None


def refusal(error: PopartUnwindError) -> Outcome:
    """The outcome of an import that raised one of our own errors."""
    message = first_line(error)
    if _RULE_CONTRADICTS.search(message):
        return Outcome(WRONG, message)
    if isinstance(error, UnsupportedModelError) and _UNKNOWN_OP_TYPES in message:
        return Outcome(REFUSED_OP, message)
    if isinstance(error, ModelImportError) and _UNMODELLED_TYPE.search(message):
        return Outcome(REFUSED_TYPE, message)
    return Outcome(REFUSED_OTHER, f"{type(error).__name__}: {message}")


def compare_outputs(ir: Ir, expected: Sequence[Any]) -> Outcome:
    """``ok`` if every main-graph output has the shape and element type of the reference
    output at its position, ``wrong`` naming the first that differs, ``unknown`` if none
    differs but some shape is not known."""
    outputs = ir.main_graph.outputs
    if len(outputs) != len(expected):
        return Outcome(WRONG, f"{len(outputs)} outputs, ONNX's reference has {len(expected)}")
    unknown = []
    for tensor, reference in zip(outputs, expected, strict=True):
        signature = reference_signature(reference)
        if signature is None:
            unknown.append(f"{tensor.id} (a {type(reference).__name__} in the reference)")
            continue
        want_shape, want_dtype = signature
        if tensor.shape is not None and tuple(tensor.shape) != want_shape:
            return Outcome(WRONG, f"output {tensor.id!r}: shape {tuple(tensor.shape)}, "
                                  f"ONNX's {want_shape}")
        if tensor.dtype != want_dtype:
            return Outcome(WRONG, f"output {tensor.id!r}: dtype {tensor.dtype}, "
                                  f"ONNX's {want_dtype}")
        if tensor.shape is None:
            unknown.append(tensor.id)
    if unknown:
        return Outcome(UNKNOWN, "shape unknown: " + ", ".join(unknown))
    return Outcome(OK)


def reference_signature(reference: Any) -> tuple[tuple[int, ...], str] | None:
    """The shape and element type (numpy's name, as the IR names them) of a reference
    output: an array, or a TensorProto (as the tests keep float16 and bfloat16 results);
    None for what is no tensor (sequences, optionals)."""
    import onnx

    if isinstance(reference, np.ndarray | np.generic):
        return tuple(np.shape(reference)), str(np.asarray(reference).dtype)
    if isinstance(reference, onnx.TensorProto):
        name = DTYPE_OF_ONNX.get(reference.data_type)
        return tuple(reference.dims), name or onnx.TensorProto.DataType.Name(
            reference.data_type).lower()
    return None


def plan_case(ir: Ir, tiles: int = 16) -> Outcome:
    """Run the transform pipeline on an imported case and plan it on a small IPU Model:
    ``planned``, or the error's class and the first line of its message."""
    from popart_unwind.transforms import plan_ir, run_pipeline

    from popart_unwind.target import IpuModel, TileTarget

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_pipeline(ir)
            plan_ir(ir, TileTarget(IpuModel(tiles_per_ipu=tiles)))
    except Exception as error:  # every failure is recorded, ours or not
        return Outcome(type(error).__name__, first_line(error))
    return Outcome(PLANNED)


def first_line(error: BaseException) -> str:
    """The first line of the error's message, without the name of the model."""
    text = str(error).strip()
    return _MODEL_NAMED.sub("", text.splitlines()[0]) if text else ""


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {first_line(error)}"
