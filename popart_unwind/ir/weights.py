"""Which weights a tensor is made of alone: a transposed or reshaped weight is the weight.

A traced PyTorch linear layer reads ``permute(weight)``: an op of the graph that reads the
weight and nothing else, which a schedule may run long before the layer. Splitting a model
over IPUs treats such a tensor as its weights (counted where the layer reads them, placed
with the layer), as PopART sees a linear layer exported to ONNX: the transpose folded into
the weight.
"""

from __future__ import annotations

from collections.abc import Iterable

from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor, TensorType

#: Producer-less tensors that are part of the model itself, not of its inputs.
WEIGHT_KINDS = (TensorType.VARIABLE, TensorType.CONST)


def is_weight(tensor: Tensor) -> bool:
    return tensor.producer is None and tensor.tensor_type in WEIGHT_KINDS


def weight_derived(ops: Iterable[Op]) -> dict[str, tuple[Tensor, ...]]:
    """Tensor id -> the weights (producer-less Variable and Const tensors) each result of
    ``ops`` (in schedule order) is computed from, for every op that reads weights or such
    results alone."""
    derived: dict[str, tuple[Tensor, ...]] = {}
    for op in ops:
        sources: dict[str, Tensor] = {}
        for tensor in op.inputs:
            if is_weight(tensor):
                sources[tensor.id] = tensor
            elif tensor.id in derived:
                sources.update((t.id, t) for t in derived[tensor.id])
            else:
                break
        else:
            if op.inputs:
                for tensor in op.outputs:
                    derived[tensor.id] = tuple(sources.values())
    return derived


def weights_read(op: Op, derived: dict[str, tuple[Tensor, ...]]) -> list[Tensor]:
    """The weights ``op`` reads, directly or through results made of weights alone."""
    found: dict[str, Tensor] = {}
    for tensor in op.inputs:
        if is_weight(tensor):
            found[tensor.id] = tensor
        else:
            found.update((t.id, t) for t in derived.get(tensor.id, ()))
    return list(found.values())


def is_weight_op(op: Op, derived: dict[str, tuple[Tensor, ...]]) -> bool:
    """Whether ``op`` computes from weights alone (its results are in ``derived``)."""
    return bool(op.outputs) and all(t.id in derived for t in op.outputs)
