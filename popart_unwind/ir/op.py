"""IR ops, modelled on PopART's ``Op``: a typed node with indexed inputs and outputs.

An op's identity is its ``OpType`` (domain, name, opset version), its attributes and its
settings (name, scope and the placement attributes of PopART: virtual graph, pipeline stage,
execution phase, batch-serialized phase, each with PopART's "unused" sentinel). Inputs and
outputs are maps from index to tensor, so optional inputs may be absent.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from popart_unwind.errors import IrError

if TYPE_CHECKING:
    from popart_unwind.ir.graph import Graph
    from popart_unwind.ir.tensor import Tensor

ONNX_DOMAIN = "ai.onnx"
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
        return [self._inputs[i] for i in sorted(self._inputs)]

    @property
    def outputs(self) -> list[Tensor]:
        return [self._outputs[i] for i in sorted(self._outputs)]

    def input_map(self) -> dict[int, Tensor]:
        return {i: self._inputs[i] for i in sorted(self._inputs)}

    def output_map(self) -> dict[int, Tensor]:
        return {i: self._outputs[i] for i in sorted(self._outputs)}

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
    """An op that runs subgraphs, with PopART's maps between its indices and theirs.

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

    def _explicit_inputs(self) -> int:
        """Input slots before the implicit (outer-scope) inputs the importer appends."""
        slots = max(self._inputs, default=-1) + 1
        return slots - int(self.attributes.get("num_implicit_inputs", 0))

    def _check_called(self, graph: Graph) -> None:
        if graph not in self.called_graphs():
            raise IrError(f"op {self.debug_name()} does not call graph {graph.id!r}")


class CallOp(SubgraphOp):
    """PopART's ``CallOp``: op input i is subgraph input i, op output j subgraph output j."""

    CALLED_GRAPH_ATTRIBUTES = ("callee",)


class LoopOp(SubgraphOp):
    """PopART's ``LoopOp`` (ONNX Loop): inputs (M, cond, carried...), body inputs
    (iteration, cond, carried...), body outputs (cond, carried..., scan...).

    Op input i maps to body input i (the trip count M feeds the iteration counter); op
    output j is body output j + 1, since body output 0 is the continue condition.
    """

    CALLED_GRAPH_ATTRIBUTES = ("body",)
    OUTPUT_OFFSET = 1

    def stacked_output(self, op_out: int) -> bool:
        """Outputs after the loop-carried values (inputs 2..) are scan outputs."""
        return op_out >= self._explicit_inputs() - 2


class IfOp(SubgraphOp):
    """PopART's ``IfOp``: input 0 is the condition; each branch has explicit index maps.

    Attributes ``then_inputs``/``else_inputs`` map op input index -> branch input index and
    ``then_outputs``/``else_outputs`` map op output index -> branch output index (PopART's
    ``BranchInfo``), stored as sorted lists of pairs so they serialise deterministically.
    """

    CALLED_GRAPH_ATTRIBUTES = ("then_branch", "else_branch")

    def _maps(self, graph: Graph) -> tuple[dict[int, int], dict[int, int]]:
        self._check_called(graph)
        prefix = "then" if graph.id == self.attributes["then_branch"] else "else"
        return (dict(self.attributes[f"{prefix}_inputs"]),
                dict(self.attributes[f"{prefix}_outputs"]))

    def op_in_to_subgraph_in_index(self, graph: Graph, op_in: int) -> int | None:
        return self._maps(graph)[0].get(op_in)

    def subgraph_in_to_op_in_index(self, graph: Graph, graph_in: int) -> int | None:
        inverse = {b: a for a, b in self._maps(graph)[0].items()}
        return inverse.get(graph_in)

    def op_out_to_subgraph_out_index(self, graph: Graph, op_out: int) -> int | None:
        return self._maps(graph)[1].get(op_out)

    def subgraph_out_to_op_out_index(self, graph: Graph, graph_out: int) -> int | None:
        inverse = {b: a for a, b in self._maps(graph)[1].items()}
        return inverse.get(graph_out)


class ScanOp(SubgraphOp):
    """ONNX Scan (PopART's ``ScanOp``): op and body inputs are N state variables, M scan
    inputs (attribute ``num_scan_inputs``), then implicit inputs; op and body outputs are N
    final states then K scan outputs. Indices map one to one; scan inputs and outputs differ
    in shape from their body counterparts by the scanned axis.
    """

    CALLED_GRAPH_ATTRIBUTES = ("body",)

    def _num_states(self) -> int:
        return self._explicit_inputs() - int(self.attributes.get("num_scan_inputs", 0))

    def stacked_input(self, op_in: int) -> bool:
        return self._num_states() <= op_in < self._explicit_inputs()

    def stacked_output(self, op_out: int) -> bool:
        return op_out >= self._num_states()


#: Op classes by type name, for op types whose behaviour the IR itself must know.
OP_CLASSES: dict[tuple[str, str], type[Op]] = {
    (GRAPHCORE_DOMAIN, "Call"): CallOp,
    (ONNX_DOMAIN, "Loop"): LoopOp,
    (ONNX_DOMAIN, "If"): IfOp,
    (ONNX_DOMAIN, "Scan"): ScanOp,
}
