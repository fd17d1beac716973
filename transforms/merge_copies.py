"""MergeCopies: the IpuCopy ops feeding one op, joined into one copy with one sync.

After PopART's MergeCopies (``mergecopies.cpp``). Each IpuCopy pays a synchronisation
across the IPUs before its bytes cross the links (``TileMachine.ipu_copy_cycles``); copies
that an op needs together can share it. For each op (in schedule order) reading the results
of several single-tensor copies of which it is the first reader, those copies become one
IpuCopy carrying every tensor: result ``j`` is the copy of input ``j``, and each reader
reads the new result in place of the old.

One difference from PopART: PopART's merged copy keeps each input's source IPU, so it may
carry tensors from several IPUs at once; here copies are joined only when they leave the
same IPU (one op, one source: ``OpSettings.vgraph_id``), so an op reading copies from two
IPUs gets one merged copy from each.

PopART runs MergeCopies only when not pipelining ("pipelining optimizes copies
separately": a pipeline's copies all run in one copy program per pipeline cycle), and so
does the pipeline here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.ops.ipu_copy import (
    DESTINATION_IPU,
    destination_ipu,
    is_ipu_copy,
    op_ipu,
)

from .base import Transform
from .conditions import Condition
from .inter_ipu_copy import IPU_COPY_TYPE
from .registry import MERGE_COPIES, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op
    from popart_unwind.rewrite import Rewriter


@register
@dataclasses.dataclass(frozen=True)
class MergeCopies(Transform):
    """Join the copies each op reads first into one copy per source IPU (module
    docstring). Does nothing unless ``virtual_graph_mode`` is not ``off`` and
    ``enable_pipelining`` is not set. A merged copy keeps its copies' placement (source
    IPU, destination), so every condition that held still holds."""

    id = 15
    name = MERGE_COPIES
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = frozenset(Condition)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        options = graph.ir.options
        if options.virtual_graph_mode == "off" or options.enable_pipelining:
            return False
        main = graph.ir.main_graph
        schedule = main.schedule()
        position = {op.id: k for k, op in enumerate(schedule)}
        for op in schedule:
            if is_ipu_copy(op):
                continue
            for copies in first_read_copies(op, position).values():
                if len(copies) > 1:
                    _merge(copies, rewriter)
        return rewriter.changes > 0


def first_read_copies(op: Op, position: dict[int, int]) -> dict[int, list[Op]]:
    """Source IPU -> the single-tensor copies whose result ``op`` reads first (in
    ``position`` order), in the order ``op`` reads them."""
    found: dict[int, list[Op]] = {}
    for tensor in dict.fromkeys(op.inputs):
        copy = tensor.producer
        if copy is None or not is_ipu_copy(copy) or len(copy.inputs) != 1 \
                or len(copy.outputs) != 1 or tensor.is_graph_output():
            continue
        first = min(tensor.consumers, key=lambda reader: (position[reader.id], reader.id))
        if first is op:
            found.setdefault(op_ipu(copy), []).append(copy)
    return found


def _merge(copies: list[Op], rewriter: Rewriter) -> None:
    first = copies[0]
    merged = rewriter.create_op(first.graph, IPU_COPY_TYPE, [c.input(0) for c in copies],
                                attributes={DESTINATION_IPU: destination_ipu(first)},
                                like=first, num_outputs=len(copies))
    rewriter.set_placement(merged, "vgraph_id", op_ipu(first))
    for copy, result in zip(copies, merged.outputs, strict=True):
        rewriter.replace_all_uses(copy.output(0), result)
        rewriter.erase_op(copy)
