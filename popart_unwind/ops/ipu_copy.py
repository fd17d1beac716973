"""IpuCopy (``ai.graphcore``): tensors sent from their IPU to another over the IPU-Links.

The op sits on its source IPU (``OpSettings.vgraph_id``, as PopART's InterIpuCopy places
its ``IpuCopyOp``); attribute ``destIpu`` names the IPU its results live on. InterIpuCopy
makes copies of one tensor; MergeCopies joins several into one op, result ``j`` the copy of
input ``j``. Its rules:

- shape: result ``j`` is input ``j``, same dtype and shape;
- layout: PopART's ``IpuCopyOpx`` copies with ``poputil::copyToIpu``, which gives the
  destination the source's tile mapping on the destination IPU. Tiles are named alike on
  every IPU (each IPU is one of Poplar's virtual graphs), so the result's layout *is* the
  input's. The planner ties them as a view does: what the readers on the destination IPU
  want reaches the source's layout. PopART's creator search does not pass through the
  copy (the Opx creates no input), which the baseline keeps;
- memory: the result is new memory on the destination IPU (no alias of the source);
- cost: no exchange within an IPU; every tensor crosses the IPU-Links whole, all of them
  after one synchronisation, priced by ``TileMachine.ipu_copy_cycles`` (``link_bytes``).
"""

from __future__ import annotations

import numpy as np

from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.machine.interface import TileMachine
from popart_unwind.memory import Chain
from popart_unwind.ops.layout_rule import InputTiles, OpWork, UnwindEmitter, known_shape
from popart_unwind.ops.registry import InferredOutputs, OpDef, register
from popart_unwind.ops.views import (
    CopiedViewRule,
    Step,
    chain_of,
    flat_layout,
    input_layout,
)

IPU_COPY = "IpuCopy"
#: The attribute naming the IPU an IpuCopy's result lives on (PopART's ``destIpu``).
DESTINATION_IPU = "destIpu"


def is_ipu_copy(op: Op) -> bool:
    """Whether ``op`` copies a tensor to another IPU."""
    return op.type.name == IPU_COPY


def destination_ipu(op: Op) -> int:
    """The IPU ``op`` (an IpuCopy) copies to."""
    return int(op.attributes[DESTINATION_IPU])


def _infer_ipu_copy(op: Op) -> InferredOutputs:
    return [(tensor.dtype, known_shape(op, tensor)) for tensor in op.inputs]


class IpuCopyRule(CopiedViewRule):
    """Each result has its input's layout on the destination IPU (module docstring)."""

    kind = "ipu_copy"

    def steps(self, op: Op, out_index: int) -> list[Step]:
        return []

    def view_chain(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        if in_index != out_index or not op.has_input(in_index) \
                or not op.has_output(out_index):
            return None
        return chain_of(known_shape(op, op.input(in_index)), [])

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        for index, out in op.output_map().items():
            emitter.define(out, emitter.graph.identity(emitter.tensor(op.input(index)),
                                                       name=out.id))

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        return [flat_layout(input_layout(op, input_tiles, index)) for index in op.output_map()]

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """Nothing computed; the link transfer is priced apart (``link_bytes``)."""
        return OpWork(0, 0)

    def link_bytes(self, op: Op, target: TileMachine) -> int:
        """Bytes the copy sends over the IPU-Links: every tensor whole."""
        return sum(int(np.prod(known_shape(op, tensor), dtype=np.int64))
                   * target.dtype_size(tensor.dtype) for tensor in op.inputs)


IPU_COPY_RULE = IpuCopyRule()
register(OpDef(IPU_COPY, domain=GRAPHCORE_DOMAIN, infer=_infer_ipu_copy, side_effects=False,
               layout=IPU_COPY_RULE))


# -- which IPU a tensor lives on -----------------------------------------------------------
def op_ipu(op: Op) -> int:
    """The IPU ``op`` runs on: its virtual graph id (0 when it has none)."""
    return op.settings.vgraph_id if op.settings.has("vgraph_id") else 0


def tensor_ipu(tensor: Tensor, schedule_position: dict[int, int] | None = None) -> int:
    """The IPU a main-graph tensor lives on: an IpuCopy's result on its destination, any
    other op's result on its op's IPU, a producer-less tensor on the IPU of its first
    reader in ``schedule_position`` order (op id order without it), as InterIpuCopy
    leaves it (every other reader then reads a copy)."""
    producer = tensor.producer
    if producer is not None:
        return destination_ipu(producer) if producer.type.name == IPU_COPY \
            else op_ipu(producer)
    readers = tensor.consumers
    if not readers:
        return 0
    order = schedule_position or {}
    first = min(readers, key=lambda op: (order.get(op.id, op.id), op.id))
    return op_ipu(first)


def shared_constant(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a constant every IPU reading it holds itself (InterIpuCopy
    copies none): a producer-less Const."""
    return tensor.producer is None and tensor.tensor_type is TensorType.CONST


def constant_reader_ipus(ir: Ir) -> dict[tuple[str, str], tuple[int, ...]]:
    """(graph id, tensor id) -> the IPUs reading each main-graph constant read on more
    than one IPU (each holds it)."""
    main = ir.main_graph
    found = {}
    for tensor in main.producerless_tensors():
        if shared_constant(tensor):
            ipus = sorted({destination_ipu(r) if r.type.name == IPU_COPY else op_ipu(r)
                           for r in tensor.consumers})
            if len(ipus) > 1:
                found[(main.id, tensor.id)] = tuple(ipus)
    return found


def tensor_ipus(ir: Ir) -> dict[tuple[str, str], int]:
    """(graph id, tensor id) -> IPU of every tensor that is not on IPU 0. A subgraph's
    tensors live on the IPU of the ops calling it (one IPU: InterIpuCopy's premise)."""
    main = ir.main_graph
    position = {op.id: k for k, op in enumerate(main.schedule())}
    placed: dict[tuple[str, str], int] = {}
    for tensor in main.tensors:
        ipu = tensor_ipu(tensor, position)
        if ipu:
            placed[(main.id, tensor.id)] = ipu
    for graph in ir.callees_first()[::-1]:
        if graph is main:
            continue
        callers = {op_ipu(op) if op.graph is main else _graph_ipu(placed, op)
                   for op in ir.all_ops() if graph in op.called_graphs()}
        ipu = min(callers) if callers else 0
        if ipu:
            placed.update({(graph.id, t.id): ipu for t in graph.tensors})
    return placed


def _graph_ipu(placed: dict[tuple[str, str], int], op: Op) -> int:
    tensors = [*op.inputs, *op.outputs]
    return placed.get((op.graph.id, tensors[0].id), 0) if tensors else 0
