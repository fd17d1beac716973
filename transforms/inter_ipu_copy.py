"""InterIpuCopy: an IpuCopy wherever an op reads a tensor that lives on another IPU.

After PopART's InterIpuCopy (``interipucopy.cpp``). With ops placed on IPUs (every
main-graph op has a virtual graph id), each tensor lives on one IPU (``tensor_ipu``: its
producer's, or for a producer-less tensor its first reader's); an op on another IPU then
reads a copy made by an ``IpuCopy`` placed on the tensor's IPU. One copy serves every reader
on its destination IPU. A weight read on two IPUs (a tied embedding and LM head) is copied
every step, as in PopART.

A constant (a producer-less Const tensor) is not copied: each IPU reading it holds it.
PopART copies a Const read on several IPUs from its first reader's IPU; but the operands
PopART keeps as attributes (a Reshape's shape, a Split's sizes) are Const tensors here,
which an op must read as constants, not as a copy's result. The cost model counts such a
constant's memory on every IPU that reads it.

PopART's copy may carry several tensors from several source IPUs (MergeCopies joins
copies that can run together); here each copy carries one tensor, which changes neither
the bytes over the links nor the layouts.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, OpType
from popart_unwind.ops.ipu_copy import (
    DESTINATION_IPU,
    IPU_COPY,
    is_ipu_copy,
    op_ipu,
    shared_constant,
    tensor_ipu,
)

from .auto_virtual_graph import place_unplaced
from .base import Transform
from .conditions import Condition
from .registry import INTER_IPU_COPY, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op, Tensor
    from popart_unwind.ops import OpRegistry
    from popart_unwind.rewrite import Rewriter

#: The op type of the copies (``ai.graphcore.IpuCopy``).
IPU_COPY_TYPE = OpType(GRAPHCORE_DOMAIN, IPU_COPY, 1)


@register
@dataclasses.dataclass(frozen=True)
class InterIpuCopy(Transform):
    """Insert the IpuCopy ops (module docstring). Does nothing unless
    ``SessionOptions.virtual_graph_mode`` is ``manual`` or ``auto``.

    Every main-graph op must sit on an IPU below ``SessionOptions.ipus``; ops without a
    virtual graph id are placed first (``place_unplaced``: a forward op with the op it
    reads, the backward pass as AutoVirtualGraph places it). Guarantees every op a virtual
    graph id (VGRAPH) and that no op reads a tensor of another IPU (NO_IMPLICIT_COPY);
    keeps shapes known and every other placement.
    """

    id = 11
    name = INTER_IPU_COPY
    assumes = frozenset({Condition.SHAPES_KNOWN})
    guarantees = frozenset({Condition.VGRAPH, Condition.NO_IMPLICIT_COPY})
    preserves = frozenset({Condition.PSTAGE, Condition.EPHASE,
                           Condition.BPHASE, Condition.SHAPES_KNOWN, Condition.NO_INPLACE})

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        if ir.options.virtual_graph_mode == "off":
            return False
        main = ir.main_graph
        complete_placement(main, rewriter, self.op_registry)
        schedule = main.schedule()
        position = {op.id: k for k, op in enumerate(schedule)}
        homes = {tensor.id: tensor_ipu(tensor, position) for tensor in main.tensors}
        copies: dict[tuple[str, int], Tensor] = {}
        for op in schedule:
            if is_ipu_copy(op):
                continue
            here = op_ipu(op)
            for index, tensor in list(op.input_map().items()):
                home = homes[tensor.id]
                if home == here or shared_constant(tensor):
                    continue
                copied = copies.get((tensor.id, here))
                if copied is None:
                    copied = copies[(tensor.id, here)] = _copy(tensor, home, here, op,
                                                               rewriter, position)
                rewriter.set_input(op, index, copied)
        return rewriter.changes > 0


def complete_placement(graph: Graph, rewriter: Rewriter, registry: OpRegistry) -> None:
    """Check every placed op of the main graph ``graph`` against the machine's IPUs, and
    place the ops without a virtual graph (``place_unplaced``) through ``rewriter``."""
    ir = graph.ir
    check_placement(graph, ir.options.ipus)
    schedule = graph.schedule()
    if all(op.settings.has("vgraph_id") for op in schedule):
        return
    loss = ir.final_loss_id
    placement = place_unplaced(graph, graph.tensor(loss) if loss is not None
                               and graph.has_tensor(loss) else None, registry)
    for op in schedule:
        rewriter.set_placement(op, "vgraph_id", placement[op.id])


def check_placement(graph: Graph, ipus: int) -> None:
    """Every op's virtual graph id must name one of the machine's IPUs."""
    for op in graph.ops:
        if op.settings.has("vgraph_id") and not 0 <= op.settings.vgraph_id < ipus:
            raise TransformError(f"op {op.debug_name()} is placed on IPU "
                                 f"{op.settings.vgraph_id}, but the machine has {ipus} "
                                 f"IPU{'s' if ipus > 1 else ''} (0 to {ipus - 1})")


def _copy(tensor: Tensor, source: int, destination: int, reader: Op,
          rewriter: Rewriter, position: dict[int, int]) -> Tensor:
    copy = rewriter.create_op(reader.graph, IPU_COPY_TYPE, [tensor],
                              attributes={DESTINATION_IPU: destination}, like=reader)
    rewriter.set_placement(copy, "vgraph_id", source)
    if reader.settings.has("pipeline_stage"):
        rewriter.set_placement(copy, "pipeline_stage", _copy_stage(tensor, destination,
                                                                   position))
    return copy.output(0)


def _copy_stage(tensor: Tensor, destination: int, position: dict[int, int]) -> int:
    """A copy runs in the pipeline stage its tensor is made in (PopART's
    ``setIPUCopyPipelineStage``); a copy of a tensor no op makes, in its first reader's
    on the destination IPU."""
    if tensor.producer is not None:
        return tensor.producer.settings.pipeline_stage
    readers = [op for op in tensor.consumers if op.id in position and op_ipu(op) == destination]
    return min(op.settings.pipeline_stage for op in readers)
