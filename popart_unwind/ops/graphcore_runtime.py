"""Op family: PopART's runtime machinery among its ai.graphcore ops — collectives, loss-scale
markers and variable copies — as far as they have a meaning on one replica of one host,
which is what the IR models (it has no replication factor: every plan is one replica's).

- ReplicatedAllReduce and ReplicatedAllReduceInplace reduce a tensor over the replicas: over
  one replica that is the tensor itself, for every collective operator but SquareAdd (which
  squares it; refused, as no model PopART builds holds it).
- ReplicatedAllGather gives, over ``r`` replicas, the ``r`` inputs' elements flattened one
  after the other; ReplicatedReduceScatter gives this replica's ``1/r`` share of the flat
  reduced tensor. Over one replica each is its input flattened.
- AllReduce reduces its inputs, one per IPU, and gives the result on each of those IPUs.
  With one input it is the identity; across several IPUs it is refused (its copies between
  IPUs are not modelled).
- AutoLossScaleProxy passes its input on (its gradient records the gradient's statistics for
  automatic loss scaling, which changes no value).

The in-place variants are imported as their out-of-place ops (the IR does not model
aliasing writes): ReplicatedAllReduceInplace here, AddLhsInplace as an ``elementwise.py``
row. Each collective's identity or flattening is a copy into new memory
(``graphcore_compute.CopyRule``): layouts pass through and each tile copies what it holds,
as Poplar copies a collective's result over one replica. PopART's creator search passes
through ReplicatedAllReduce (its Opx is CanUnwind) and AutoLossScaleProxy (an elementwise
unary op), and stops at ReplicatedAllGather and ReplicatedReduceScatter (their Opxs are
Deadends unless linked to a sharded tensor, which a model does not hold). A one-input
AllReduce is the identity, as PopART replaces it by one: a view (``views.IdentityRule``).

The rest of PopART's runtime ops are refused with the reason, which the importer's message
gives (``refusal``): they move data between the IPU and remote buffers or the host, which a
plan of one program's tile memory cannot state, or update loss-scaling state kept by
PopART's runtime.
"""

from __future__ import annotations

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import input_shape
from popart_unwind.ops.gradient import GradientBuilder, gets_gradient, reshape
from popart_unwind.ops.graphcore_compute import COPY, UNWINDING_COPY
from popart_unwind.ops.registry import (
    REGISTRY,
    Constants,
    FoldResult,
    InferredOutputs,
    OpDef,
    register,
)
from popart_unwind.ops.views import IdentityRule

#: PopART's ``CollectiveOperator`` numbering: SquareAdd squares before it adds.
_SQUARE_ADD = 7


def _collective_operator(op: Op) -> int:
    operator = int(op.attributes.get("__collectiveOperator", 0))
    if operator == _SQUARE_ADD:
        raise ShapeError(f"op {op.debug_name()}: the SquareAdd collective operator squares "
                         f"its input even over one replica; it is not modelled")
    return operator


def _infer_all_reduce(op: Op) -> InferredOutputs:
    _collective_operator(op)
    return [(op.input(0).dtype, input_shape(op, 0))]


def _infer_gathered(op: Op) -> InferredOutputs:
    """All-gather and reduce-scatter over one replica: the input's elements, flat."""
    _collective_operator(op)
    size = 1
    for n in input_shape(op, 0):
        size *= n
    return [(op.input(0).dtype, (size,))]


def _infer_ipu_all_reduce(op: Op) -> InferredOutputs:
    if len(op.inputs) != 1 or len(op.outputs) != 1:
        raise ShapeError(f"op {op.debug_name()}: an AllReduce across {len(op.inputs)} IPUs "
                         f"is not modelled (its copies between IPUs); one input, the "
                         f"identity, is")
    _collective_operator(op)
    return [(op.input(0).dtype, input_shape(op, 0))]


def _fold_passed(op: Op, constants: Constants) -> FoldResult:
    x = constants[0]
    if x is None or op.output(0).shape is None:
        return None
    return [x.reshape(op.output(0).shape).copy()]


def _passed_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY back in the input's shape: over one replica the gradient collective (an
    all-reduce's is an all-reduce, an all-gather's a reduce-scatter and the reverse) is
    the identity."""
    grad, x = grads[0], op.input(0)
    if grad is None or not gets_gradient(x):
        return [None]
    return [reshape(builder, grad, x.shape)]


for _name in ("ReplicatedAllReduce", "ReplicatedAllReduceInplace"):
    register(OpDef(_name, domain=GRAPHCORE_DOMAIN, infer=_infer_all_reduce, fold=_fold_passed,
                   keeps_input_layout=True, layout=UNWINDING_COPY, gradient=_passed_gradient))
for _name in ("ReplicatedAllGather", "ReplicatedReduceScatter"):
    register(OpDef(_name, domain=GRAPHCORE_DOMAIN, infer=_infer_gathered, fold=_fold_passed,
                   keeps_input_layout=True, layout=COPY, gradient=_passed_gradient))
register(OpDef("AllReduce", domain=GRAPHCORE_DOMAIN, infer=_infer_ipu_all_reduce,
               fold=_fold_passed, keeps_input_layout=True, layout=IdentityRule(),
               gradient=_passed_gradient))
register(OpDef("AutoLossScaleProxy", domain=GRAPHCORE_DOMAIN, infer=_infer_all_reduce,
               fold=_fold_passed, keeps_input_layout=True, layout=UNWINDING_COPY,
               gradient=_passed_gradient))


def _refuse(name: str, reason: str) -> None:
    REGISTRY.refuse(GRAPHCORE_DOMAIN, name, reason)


_REMOTE = ("moves a tensor between the IPU and a remote buffer in host memory, which a plan "
           "of one program's tile memory cannot state")
_HOST = ("streams a tensor between the host and the IPU inside the graph, which the IR does "
         "not model (its inputs and outputs are the host's only exchange)")
for _name, _reason in (
        ("RemoteLoad", _REMOTE), ("RemoteLoadInplace", _REMOTE), ("RemoteStore", _REMOTE),
        ("RemoteCodeLoad", "loads code from remote memory, which the IR does not model"),
        ("HostLoad", _HOST), ("HostStore", _HOST),
        ("LossScaleUpdate", "updates the automatic loss scale, runtime state PopART keeps "
                            "between steps from gradient statistics; the IR models a fixed "
                            "loss scale")):
    _refuse(_name, _reason)
