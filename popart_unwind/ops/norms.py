"""Op family: norms beyond the layer and batch norms of ``reduce.py`` — InstanceNormalization,
LpNormalization and LRN (local response normalization across channels), with ONNX semantics.

Each has an exact shape rule (the result has X's type and shape) and a numpy fold. Their
layouts are not modelled yet: each is a barrier (``LayoutRule``'s default), its result laid
out linearly, and PopART's creator search stops there too (``InstanceNormOpx`` and
``LRNOpx`` keep ``Opx``'s Deadend). All three reduce what they read; InstanceNormalization
alone is a norm (``recompute=norm_only`` recomputes it), as PopART's ``isNorm`` is true for
its InstanceNorm and not for LRN.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, input_shape, normalize_axis
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _float_input(op: Op) -> str:
    dtype = op.input(0).dtype
    if dtype not in _FLOATS:
        raise ShapeError(f"op {op.debug_name()}: X must be a float tensor, got {dtype}")
    return dtype


def _foldable(x: np.ndarray | None) -> bool:
    return x is not None and x.size <= FOLD_MAX_ELEMENTS and x.dtype.kind == "f"


# -- InstanceNormalization --------------------------------------------------------------------
def _infer_instance_norm(op: Op) -> InferredOutputs:
    """X is [N, C, D1, ...]; scale and B hold one value per channel."""
    shape = input_shape(op, 0)
    if len(shape) < 3:
        raise ShapeError(f"op {op.debug_name()}: X must be at least 3-D, got {shape}")
    for index, what in ((1, "scale"), (2, "B")):
        if tuple(input_shape(op, index)) != (shape[1],):
            raise ShapeError(f"op {op.debug_name()}: {what} of shape {input_shape(op, index)} "
                             f"is not one value per channel ({shape[1]})")
    return [(_float_input(op), shape)]


def _fold_instance_norm(op: Op, constants: Constants) -> FoldResult:
    """Each (sample, channel) normalised over its spatial axes, then scaled and shifted."""
    if len(constants) < 3 or not _foldable(constants[0]) or any(
            c is None for c in constants[1:3]):
        return None
    x, scale, bias = constants[0], constants[1], constants[2]
    axes = tuple(range(2, x.ndim))
    per_channel = (-1,) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes, keepdims=True)
    variance = x.var(axis=axes, keepdims=True)
    epsilon = float(op.attributes.get("epsilon", np.float32(1e-5)))
    result = (scale.reshape(per_channel) * (x - mean) / np.sqrt(variance + epsilon)
              + bias.reshape(per_channel))
    return [result.astype(x.dtype)]


# -- LpNormalization --------------------------------------------------------------------------
def _lp_order(op: Op) -> int:
    order = int(op.attributes.get("p", 2))
    if order not in (1, 2):
        raise ShapeError(f"op {op.debug_name()}: p is {order}, ONNX allows 1 or 2")
    return order


def _infer_lp_norm(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    normalize_axis(op, op.attributes.get("axis", -1), max(len(shape), 1))
    _lp_order(op)
    return [(_float_input(op), shape)]


def _fold_lp_norm(op: Op, constants: Constants) -> FoldResult:
    """x divided by its L1 or L2 norm along the axis (0 where the norm is 0). The norm sums
    |x|^p, as ONNX's operator definition and backend tests state (its reference evaluator
    leaves out the absolute value, which only matters for p = 1)."""
    x = constants[0] if constants else None
    if not _foldable(x) or x.ndim == 0:
        return None
    axis = normalize_axis(op, op.attributes.get("axis", -1), x.ndim)
    order = _lp_order(op)
    norm = (np.abs(x) ** order).sum(axis=axis, keepdims=True) ** (1 / order)
    with np.errstate(all="ignore"):
        result = np.where(norm == 0, 0, x / norm)
    return [result.astype(x.dtype)]


# -- LRN --------------------------------------------------------------------------------------
def _infer_lrn(op: Op) -> InferredOutputs:
    """X is [N, C, D1, ...] (ONNX: at least 3-D, PopART and the reference: 4-D work the
    same); ``size`` channels around each one are summed."""
    shape = input_shape(op, 0)
    if len(shape) < 3:
        raise ShapeError(f"op {op.debug_name()}: X must be at least 3-D, got {shape}")
    if int(op.attributes.get("size", 0)) < 1:
        raise ShapeError(f"op {op.debug_name()} needs a positive 'size'")
    return [(_float_input(op), shape)]


def _fold_lrn(op: Op, constants: Constants) -> FoldResult:
    """y = x / (bias + alpha / size * sum of x² over the channels from c - floor((size-1)/2)
    to c + ceil((size-1)/2)) ** beta, as ONNX defines it."""
    x = constants[0] if constants else None
    if not _foldable(x):
        return None
    size = int(op.attributes["size"])
    alpha = float(op.attributes.get("alpha", np.float32(1e-4)))
    beta = float(op.attributes.get("beta", np.float32(0.75)))
    bias = float(op.attributes.get("bias", 1.0))
    below, above = math.floor((size - 1) / 2), math.ceil((size - 1) / 2)
    squares = x * x
    square_sum = np.zeros_like(x)
    channels = x.shape[1]
    for c in range(channels):
        square_sum[:, c] = squares[:, max(0, c - below):min(channels, c + above + 1)].sum(axis=1)
    return [(x / (bias + alpha / size * square_sum) ** beta).astype(x.dtype)]


register(OpDef("InstanceNormalization", infer=_infer_instance_norm, fold=_fold_instance_norm,
               norm=True, reduces_input=True))
register(OpDef("LpNormalization", infer=_infer_lp_norm, fold=_fold_lp_norm,
               reduces_input=True))
register(OpDef("LRN", infer=_infer_lrn, fold=_fold_lrn, reduces_input=True))
