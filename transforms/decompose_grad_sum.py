"""DecomposeGradSum: a sum of gradient partials becomes a chain of additions, so each
partial can die once it is added instead of waiting for the last one.

After PopART's DecomposeGradSum (``decomposegradsum.cpp`` chooses the sums,
``decomposesum.cpp`` builds the additions), with ``SessionOptions.decompose_grad_sum``:

- a sum is decomposed when it is a ``Sum`` of more than two computed inputs in the
  backward pass (not among the ops the loss depends on; PopART: its grad sums, which have
  a path from the loss);
- its inputs are added in the order their producers run (PopART: their earliest possible
  schedule index), each addition reading the running total and the next partial;
- each addition is given a schedule priority above every other op's (PopART leaves it to
  its liveness-aware scheduler), so that it runs as soon as its partial exists.

PopART starts the chain from a zero tensor (its InitOp) so that every addition can work in
place; the chain here starts from the first two partials, which computes the same values
without the extra tensor.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformWarning
from popart_unwind.ir.tensor import TensorType
from popart_unwind.training import loss_forward_ops

from .base import Transform
from .conditions import Condition
from .registry import DECOMPOSE_GRAD_SUM, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op
    from popart_unwind.rewrite import Rewriter

#: The schedule priority of the additions: above every op's default of 0.
ADDITION_PRIORITY = 1.0


@register
@dataclasses.dataclass(frozen=True)
class DecomposeGradSum(Transform):
    """Decompose the main graph's gradient sums into chains of additions (module
    docstring). Reads ``SessionOptions.decompose_grad_sum``; off, or with no loss
    (``Ir.final_loss_id``), it changes nothing.

    Assumes shapes are known (the additions get theirs from their rule). Preserves every
    condition: the additions inherit the sum's placement, and are neither in place nor
    IpuCopies.
    """

    id = 7
    name = DECOMPOSE_GRAD_SUM
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = frozenset(Condition)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        if not ir.options.decompose_grad_sum:
            return False
        main = ir.main_graph
        if ir.final_loss_id is None or not main.has_tensor(ir.final_loss_id):
            warnings.warn("decompose_grad_sum: the model is no training step (it names no "
                          "loss), so no sum is decomposed", TransformWarning, stacklevel=2)
            return False
        forward = {op.id for op in loss_forward_ops(main, main.tensor(ir.final_loss_id))}
        schedule = main.schedule()
        position = {op.id: k for k, op in enumerate(schedule)}
        sums = [op for op in schedule if grad_sum(op, forward)]
        for op in sums:
            _decompose(op, position, rewriter)
        return bool(sums)


def grad_sum(op: Op, forward: set[int]) -> bool:
    """Whether ``op`` is a sum DecomposeGradSum decomposes: a Sum of more than two computed
    (ActGrad) inputs, outside the forward pass."""
    return (op.type.name == "Sum" and op.id not in forward and len(op.inputs) > 2
            and len(op.outputs) == 1
            and all(t.producer is not None and t.tensor_type is TensorType.ACT_GRAD
                    for t in op.inputs))


def _decompose(op: Op, position: dict[int, int], rewriter: Rewriter) -> None:
    partials = sorted(op.inputs, key=lambda t: (position[t.producer.id], t.id))
    total = partials[0]
    for partial in partials[1:]:
        addition = rewriter.create_op(op.graph, "Add", [total, partial], like=op)
        rewriter.set_schedule_priority(addition, ADDITION_PRIORITY)
        total = addition.output(0)
    rewriter.replace_all_uses(op.output(0), total)
    rewriter.erase_op(op)
