"""IR ops, modelled on PopART's ``Op``: a typed node with indexed inputs and outputs.

An op's identity is its ``OpType`` (domain, name, opset version), its attributes and its
settings (name, scope and the placement attributes of PopART: virtual graph, pipeline stage,
execution phase, batch-serialized phase, each with PopART's "unused" sentinel). Inputs and
outputs are maps from index to tensor, so optional inputs may be absent.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from popart_unwind.doors import load_above
from popart_unwind.errors import IrError

if TYPE_CHECKING:
    from popart_unwind.ir.graph import Graph
    from popart_unwind.ir.tensor import Tensor

ONNX_DOMAIN = "ai.onnx"
#: The ai.onnx opset of the graphs built here (by the Builder, or from a PyTorch program).
DEFAULT_ONNX_OPSET = 18
#: The domain of the ops PopART adds itself (Call, Init, ...); ours follow its naming.
GRAPHCORE_DOMAIN = "ai.graphcore"

# PopART's sentinels for "not set" (popart/names.hpp).
UNUSED_VGRAPH_ID = -1
UNUSED_PIPELINE_STAGE = -1
UNUSED_EXECUTION_PHASE = -2
UNUSED_BATCH_SERIALIZED_PHASE = -2

#: ONNX node attributes that carry placement, as PopART spells them.
PLACEMENT_ATTRIBUTES = {
    "vgraph_id": "__ipu_number",
    "pipeline_stage": "__pipeline_stage",
    "execution_phase": "__execution_phase",
}
PLACEMENT_FIELDS = ("vgraph_id", "pipeline_stage", "execution_phase", "batch_serialized_phase")


@dataclasses.dataclass(frozen=True, order=True)
class OpType:
    """An op's identity, as PopART's ``OperatorIdentifier``: domain, type name, version."""

    domain: str
    name: str
    version: int = 1

    def __str__(self) -> str:
        return f"{self.domain}.{self.name}:{self.version}"


@dataclasses.dataclass
class OpSettings:
    """PopART's ``Op::Settings``: naming and placement, with PopART's unused sentinels."""

    name: str = ""
    scope: str = ""
    vgraph_id: int = UNUSED_VGRAPH_ID
    pipeline_stage: int = UNUSED_PIPELINE_STAGE
    execution_phase: int = UNUSED_EXECUTION_PHASE
    batch_serialized_phase: int = UNUSED_BATCH_SERIALIZED_PHASE
    #: The id of the op this one recomputes (PopART's ``RecomputeType::Recomputed`` and
    #: the original it was cloned from, its ``recomputeMap``); -1 for every other op.
    recomputed_from: int = -1
    #: Of the ops ready to run, those of higher priority run first (PopART's
    #: ``schedulePriority``); 0 for every op a transform does not hurry.
    schedule_priority: float = 0.0
    #: A piece of a serialized fully connected layer (SerializeMatMuls): the id of the
    #: layer's forward op, the piece's index and the pass's axes in the layer's cube; the
    #: pieces of one index form a layer of their own. None for every other op.
    serialized: tuple[int, int, str] | None = None

    def placement(self) -> dict[str, int]:
        return {field: getattr(self, field) for field in PLACEMENT_FIELDS}

    def has(self, field: str) -> bool:
        """Whether placement attribute ``field`` is set (differs from its unused sentinel)."""
        return getattr(self, field) != OpSettings.__dataclass_fields__[field].default


class Op:
    """One op of a graph. Create ops through :meth:`Graph.create_op`, never directly."""

    #: The attribute naming each called graph, for ops that call subgraphs.
    CALLED_GRAPH_ATTRIBUTES: tuple[str, ...] = ()

    def __init__(self, graph: Graph, op_id: int, op_type: OpType,
                 attributes: dict[str, Any], settings: OpSettings) -> None:
        self.graph = graph
        self.id = op_id
        self.type = op_type
        self.attributes = attributes
        self.settings = settings
        # by index, kept in index order (``place``) so that reading them needs no sort:
        # an op with k inputs is read many times by every walk
        self._inputs: dict[int, Tensor] = {}
        self._outputs: dict[int, Tensor] = {}

    # -- reading -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.settings.name

    def input(self, index: int) -> Tensor:
        try:
            return self._inputs[index]
        except KeyError:
            raise IrError(f"op {self.debug_name()} has no input at index {index}") from None

    def output(self, index: int) -> Tensor:
        try:
            return self._outputs[index]
        except KeyError:
            raise IrError(f"op {self.debug_name()} has no output at index {index}") from None

    def has_input(self, index: int) -> bool:
        return index in self._inputs

    def has_output(self, index: int) -> bool:
        return index in self._outputs

    @property
    def inputs(self) -> list[Tensor]:
        """Connected inputs in index order (absent optional inputs skipped)."""
        return list(self._inputs.values())

    @property
    def outputs(self) -> list[Tensor]:
        return list(self._outputs.values())

    def input_map(self) -> dict[int, Tensor]:
        return dict(self._inputs)

    def output_map(self) -> dict[int, Tensor]:
        return dict(self._outputs)

    def is_type(self, name: str, domain: str | None = None) -> bool:
        return self.type.name == name and (domain is None or self.type.domain == domain)

    def called_graphs(self) -> list[Graph]:
        """The subgraphs this op runs (PopART's ``Op::getCalledGraphs``)."""
        ir = self.graph.ir
        return [ir.graph(self.attributes[key]) for key in self.CALLED_GRAPH_ATTRIBUTES]

    def debug_name(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"{self.type.name}#{self.id}{label}"

    def __repr__(self) -> str:
        ins = ", ".join(t.id for t in self.inputs)
        outs = ", ".join(t.id for t in self.outputs)
        return f"Op({self.debug_name()}: ({ins}) -> ({outs}))"

    # -- placement -----------------------------------------------------------------------
    def inherit_placement_attributes(self, neighbour: Op) -> None:
        """Copy the placement attributes a neighbouring op has set (PopART's
        ``inheritPlacementAttributes``), so transforms keep VGRAPH/PSTAGE/EPHASE/BPHASE true.
        """
        for field in PLACEMENT_FIELDS:
            if neighbour.settings.has(field):
                setattr(self.settings, field, getattr(neighbour.settings, field))


class SubgraphOp(Op):
    """An op that runs subgraphs, with PopART's maps between its indices and theirs (the
    op types' own classes are their families', ``popart_unwind.ops.control``).

    By default op input i is subgraph input i and op output j is subgraph output
    j + ``OUTPUT_OFFSET`` (the leading subgraph outputs no op output receives, such as a
    Loop body's continue condition). Each map returns ``None`` where an index has no
    counterpart.
    """

    OUTPUT_OFFSET = 0

    def op_in_to_subgraph_in_index(self, graph: Graph, op_in: int) -> int | None:
        self._check_called(graph)
        return op_in if op_in < len(graph.input_ids) else None

    def subgraph_in_to_op_in_index(self, graph: Graph, graph_in: int) -> int | None:
        self._check_called(graph)
        return graph_in if self.has_input(graph_in) else None

    def op_out_to_subgraph_out_index(self, graph: Graph, op_out: int) -> int | None:
        self._check_called(graph)
        graph_out = op_out + self.OUTPUT_OFFSET
        return graph_out if graph_out < len(graph.output_ids) else None

    def subgraph_out_to_op_out_index(self, graph: Graph, graph_out: int) -> int | None:
        self._check_called(graph)
        op_out = graph_out - self.OUTPUT_OFFSET
        return op_out if op_out >= 0 and self.has_output(op_out) else None

    def stacked_input(self, op_in: int) -> bool:
        """Whether op input ``op_in`` is sliced per iteration (its subgraph counterpart
        lacks the scanned axis), so the two need not agree in shape."""
        return False

    def stacked_output(self, op_out: int) -> bool:
        """Whether op output ``op_out`` stacks the subgraph's per-iteration values."""
        return False

    def feeds_no_subgraph(self, op_in: int) -> bool:
        """Whether op input ``op_in`` is the op's own (an If's condition), not a copy into
        a subgraph."""
        return False

    def fixed_subgraph_input(self, graph: Graph, graph_in: int) -> bool:
        """Whether subgraph input ``graph_in`` belongs to the op itself (a Loop body's
        iteration number and condition): fed even without an op input, never removed."""
        return False

    def fixed_subgraph_output(self, graph: Graph, graph_out: int) -> bool:
        """Whether subgraph output ``graph_out`` belongs to the op itself (a Loop body's
        continue condition): given to no op output, never removed."""
        return False

    def same_every_run(self, graph: Graph, graph_in: int) -> bool:
        """Whether subgraph input ``graph_in`` holds one value on every run of ``graph``
        from this op (a call's or a branch's inputs), rather than one that changes from run
        to run (a loop's counter and carried values, a scan's states and slices)."""
        return True

    def _explicit_inputs(self) -> int:
        """Input slots before the implicit (outer-scope) inputs the importer appends."""
        slots = max(self._inputs, default=-1) + 1
        return slots - int(self.attributes.get("num_implicit_inputs", 0))

    def _check_called(self, graph: Graph) -> None:
        if graph not in self.called_graphs():
            raise IrError(f"op {self.debug_name()} does not call graph {graph.id!r}")


#: Op classes by (domain, type name): an op family registers the class of an op type whose
#: structure the IR must know (an op that runs subgraphs); any other type is a plain Op.
_OP_CLASSES: dict[tuple[str, str], type[Op]] = {}


def place(slots: dict[int, Tensor], index: int, tensor: Tensor) -> None:
    """Put ``tensor`` in an op's ``slots`` at ``index``, keeping them in index order."""
    last = next(reversed(slots), None)
    slots[index] = tensor
    if last is not None and index < last:
        ordered = sorted(slots.items())
        slots.clear()
        slots.update(ordered)


def register_op_class(domain: str, name: str, cls: type[Op]) -> None:
    """Make ``Graph.create_op`` build ops of type ``domain.name`` as ``cls``."""
    key = (domain, name)
    if _OP_CLASSES.get(key, cls) is not cls:
        raise IrError(f"op type {domain}.{name} already has class {_OP_CLASSES[key].__name__}")
    _OP_CLASSES[key] = cls


def op_class(op_type: OpType) -> type[Op]:
    """The class ops of ``op_type`` are built as (the op families register theirs when
    they load, which the first question here makes happen)."""
    load_above()
    return _OP_CLASSES.get((op_type.domain, op_type.name), Op)
