"""Op family: PopART's own ops of its ai.graphcore opset 1 that a model built with PopART's
Builder may hold and that are not elementwise (those are rows of ``elementwise.py``'s
table): Subsample, Reverse and IdentityLoss, with PopART's meaning.

Subsample keeps every ``strides[i]``-th element along axis i, starting at 0; Reverse
reverses the axes ``dimensions`` lists; IdentityLoss sums or averages its input to a
scalar (``reduction`` "Sum" or "Mean") or passes it on ("None"). Each has an exact shape
rule and a numpy fold. Layouts are not modelled: each is a barrier.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ops.common import input_shape, ints, normalize_axis, small_constants
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register


# -- Subsample --------------------------------------------------------------------------------
def _strides(op: Op, rank: int) -> list[int]:
    strides = ints(op.attributes.get("strides", []))
    if len(strides) != rank or min(strides, default=1) < 1:
        raise ShapeError(f"op {op.debug_name()}: strides {strides} must be one positive "
                         f"number per axis ({rank})")
    return strides


def _infer_subsample(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    strides = _strides(op, len(shape))
    return [(op.input(0).dtype, tuple(math.ceil(n / s) for n, s in zip(shape, strides,
                                                                         strict=True)))]


def _fold_subsample(op: Op, constants: Constants) -> FoldResult:
    x = constants[0]
    if not small_constants(x):
        return None
    return [x[tuple(slice(None, None, s) for s in _strides(op, x.ndim))].copy()]


# -- Reverse ----------------------------------------------------------------------------------
def _dimensions(op: Op, rank: int) -> list[int]:
    axes = [normalize_axis(op, a, max(rank, 1))
            for a in ints(op.attributes.get("dimensions", []))]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"op {op.debug_name()}: dimensions {axes} repeat an axis")
    return axes


def _infer_reverse(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    _dimensions(op, len(shape))
    return [(op.input(0).dtype, shape)]


def _fold_reverse(op: Op, constants: Constants) -> FoldResult:
    x = constants[0]
    if not small_constants(x):
        return None
    return [np.flip(x, _dimensions(op, x.ndim)).copy()]


# -- IdentityLoss -----------------------------------------------------------------------------
def _reduction(op: Op) -> str:
    reduction = op.attributes.get("reduction", "Sum")
    if reduction not in ("Sum", "Mean", "None"):
        raise ShapeError(f"op {op.debug_name()}: reduction {reduction!r} is not Sum, Mean or "
                         f"None")
    return reduction


def _infer_identity_loss(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    return [(op.input(0).dtype, shape if _reduction(op) == "None" else ())]


def _fold_identity_loss(op: Op, constants: Constants) -> FoldResult:
    x = constants[0]
    if not small_constants(x):
        return None
    reduction = _reduction(op)
    if reduction == "None":
        return [x]
    total = x.sum(dtype=np.float64) if reduction == "Sum" else x.mean(dtype=np.float64)
    return [np.asarray(total).astype(x.dtype)]


register(OpDef("Subsample", domain=GRAPHCORE_DOMAIN, infer=_infer_subsample,
               fold=_fold_subsample))
register(OpDef("Reverse", domain=GRAPHCORE_DOMAIN, infer=_infer_reverse, fold=_fold_reverse))
register(OpDef("IdentityLoss", domain=GRAPHCORE_DOMAIN, infer=_infer_identity_loss,
               fold=_fold_identity_loss, reduces_input=True))
