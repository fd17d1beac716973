"""Op family: reductions and normalisations (ReduceSum, ReduceMean, ... ArgMax, ArgMin,
Softmax, LogSoftmax, LayerNormalization, BatchNormalization), with ONNX semantics.

The reduced axes are an attribute up to a version and an optional input from then on
(ReduceSum from opset 13, the others from 18); without axes every axis is reduced, unless
``noop_with_empty_axes`` makes the op the identity. The normalisations follow what changed
between opset versions (Softmax's default axis, BatchNormalization's outputs). For layouts
all of these are barriers.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError, ShapeUndecided
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import (
    FOLD_MAX_ELEMENTS,
    constant_value,
    input_shape,
    normalize_axis,
)
from popart_unwind.ops.registry import OpDef, register
from popart_unwind.shapes import broadcast_shapes


def _square_sum(x, axis, keepdims):
    return np.sum(np.square(x), axis=axis, keepdims=keepdims)


#: Per reduction: the opset from which axes are an input, and the numpy meaning.
REDUCTIONS = {
    "ReduceSum": (13, np.sum),
    "ReduceMean": (18, np.mean),
    "ReduceMax": (18, np.max),
    "ReduceMin": (18, np.min),
    "ReduceProd": (18, np.prod),
    "ReduceL1": (18, lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims)),
    "ReduceL2": (18, lambda x, axis, keepdims: np.sqrt(_square_sum(x, axis, keepdims))),
    "ReduceLogSum": (18, lambda x, axis, keepdims: np.log(np.sum(x, axis=axis,
                                                                  keepdims=keepdims))),
    "ReduceLogSumExp": (18, lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis,
                                                                     keepdims=keepdims))),
    "ReduceSumSquare": (18, _square_sum),
}
#: Reductions that leave a single element unchanged (reducing size-1 axes is the identity).
_IDENTITY_ON_ONE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
_EXACT_ON_INTEGERS = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                      "ReduceSumSquare")


def reduced_axes(op: Op, rank: int) -> tuple[int, ...] | None:
    """The sorted axes ``op`` reduces; None when it is the identity (empty axes with
    ``noop_with_empty_axes``). ShapeUndecided when the axes input is not constant."""
    since, _ = REDUCTIONS[op.type.name]
    if op.type.version >= since:
        if op.has_input(1):
            value = constant_value(op.input(1))
            if value is None:
                raise ShapeUndecided(f"op {op.debug_name()}: its axes are not a constant")
            axes = [int(a) for a in np.asarray(value).reshape(-1)]
        else:
            axes = []
        if not axes and op.attributes.get("noop_with_empty_axes", 0):
            return None
    else:
        axes = list(op.attributes.get("axes", []))
    if not axes:
        return tuple(range(rank))
    normalized = sorted(normalize_axis(op, a, rank) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ShapeError(f"op {op.debug_name()}: axes {axes} name an axis twice")
    return tuple(normalized)


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_reduce(op: Op) -> list:
    shape = input_shape(op, 0)
    axes = reduced_axes(op, len(shape))
    if axes is None:
        return [(op.input(0).dtype, shape)]
    keepdims = bool(op.attributes.get("keepdims", 1))
    return [(op.input(0).dtype, _reduced_shape(shape, axes, keepdims))]


def _fold_reduce(op: Op, constants) -> list | None:
    shape = op.input(0).shape
    if shape is None:
        return None
    try:
        axes = reduced_axes(op, len(shape))
    except ShapeError:
        return None
    keepdims = bool(op.attributes.get("keepdims", 1))
    if axes is None or (op.type.name in _IDENTITY_ON_ONE and keepdims
                        and all(shape[a] == 1 for a in axes)):
        return [op.input(0)]
    x = constants[0]
    if x is None or x.size > FOLD_MAX_ELEMENTS:
        return None
    if x.size == 0 and op.type.name in ("ReduceMax", "ReduceMin"):
        return None  # ONNX defines these on empty sets by infinities; leave them be
    if x.dtype.kind != "f" and op.type.name not in _EXACT_ON_INTEGERS:
        return None  # integer means, roots and logs round as a runtime chooses
    _, meaning = REDUCTIONS[op.type.name]
    with np.errstate(all="ignore"):
        result = meaning(x, axis=axes, keepdims=keepdims)
    return [np.asarray(result).astype(x.dtype)]


def _arg_axis(op: Op, rank: int) -> int:
    return normalize_axis(op, op.attributes.get("axis", 0), max(rank, 1))


def _infer_arg(op: Op) -> list:
    shape = input_shape(op, 0)
    axis = _arg_axis(op, len(shape))
    keepdims = bool(op.attributes.get("keepdims", 1))
    return [("int64", _reduced_shape(shape, (axis,), keepdims))]


def _fold_arg(op: Op, constants) -> list | None:
    x = constants[0]
    if x is None or x.size > FOLD_MAX_ELEMENTS or x.ndim == 0:
        return None
    axis = _arg_axis(op, x.ndim)
    if x.shape[axis] == 0:
        return None
    pick = np.argmax if op.type.name == "ArgMax" else np.argmin
    if op.attributes.get("select_last_index", 0):
        index = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
    else:
        index = pick(x, axis=axis)
    if op.attributes.get("keepdims", 1):
        index = np.expand_dims(index, axis)
    return [np.asarray(index, dtype=np.int64)]


for _name in REDUCTIONS:
    register(OpDef(_name, infer=_infer_reduce, fold=_fold_reduce))
register(OpDef("ArgMax", infer=_infer_arg, fold=_fold_arg))
register(OpDef("ArgMin", infer=_infer_arg, fold=_fold_arg))


# -- Softmax, LogSoftmax, LayerNormalization, BatchNormalization --------------------------
def _floats(op: Op, index: int) -> str:
    dtype = op.input(index).dtype
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise ShapeError(f"op {op.debug_name()}: input {index} must be a float tensor, got "
                         f"{dtype}")
    return dtype


def _broadcasts_to(op: Op, index: int, target: tuple[int, ...], what: str) -> None:
    """Input ``index`` must broadcast one way to ``target`` (ONNX's unidirectional rule)."""
    shape = input_shape(op, index)
    try:
        ok = broadcast_shapes(shape, target) == tuple(target)
    except ShapeError:
        ok = False
    if not ok:
        raise ShapeError(f"op {op.debug_name()}: {what} {shape} does not broadcast to "
                         f"{tuple(target)}")


def _softmax_axis(op: Op, rank: int) -> int:
    default = -1 if op.type.version >= 13 else 1
    return normalize_axis(op, op.attributes.get("axis", default), max(rank, 1))


def _infer_softmax(op: Op) -> list:
    shape = input_shape(op, 0)
    _softmax_axis(op, len(shape))
    return [(_floats(op, 0), shape)]


def _fold_softmax(op: Op, constants) -> list | None:
    x = constants[0]
    if x is None or x.size > FOLD_MAX_ELEMENTS or x.ndim == 0:
        return None
    axis = _softmax_axis(op, x.ndim)
    # Before opset 13 the input is seen as 2-D: axes before ``axis`` x the rest.
    work = x if op.type.version >= 13 else x.reshape(math.prod(x.shape[:axis]), -1)
    reduce_axis = axis if op.type.version >= 13 else 1
    shifted = work - work.max(axis=reduce_axis, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis=reduce_axis, keepdims=True))
    log_probs = shifted - log_sum
    result = log_probs if op.type.name == "LogSoftmax" else np.exp(log_probs)
    return [result.reshape(x.shape).astype(x.dtype)]


# -- LayerNormalization, BatchNormalization ------------------------------------------------
def _infer_layer_norm(op: Op) -> list:
    shape = input_shape(op, 0)
    axis = normalize_axis(op, op.attributes.get("axis", -1), max(len(shape), 1))
    normalized = shape[axis:]
    _broadcasts_to(op, 1, normalized, "Scale")
    if op.has_input(2):
        _broadcasts_to(op, 2, normalized, "B")
    stats = shape[:axis] + (1,) * (len(shape) - axis)
    stash = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}.get(
        op.attributes.get("stash_type", 1), "float32")
    return [(_floats(op, 0), shape), (stash, stats), (stash, stats)]


def _infer_batch_norm(op: Op) -> list:
    shape = input_shape(op, 0)
    channels = shape[1] if len(shape) >= 2 else 1
    for index, what in ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")):
        if input_shape(op, index) != (channels,):
            raise ShapeError(f"op {op.debug_name()}: {what} must have shape ({channels},) "
                             f"for {channels} channels, got {input_shape(op, index)}")
    dtype = _floats(op, 0)
    stats = (op.input(3).dtype, (channels,))
    # Opsets 14/15: Y, running_mean, running_var; earlier: Y, mean, var, saved mean/var.
    count = 2 if op.type.version >= 14 else 4
    return [(dtype, shape)] + [stats] * count


register(OpDef("Softmax", infer=_infer_softmax, fold=_fold_softmax))
register(OpDef("LogSoftmax", infer=_infer_softmax, fold=_fold_softmax))
register(OpDef("LayerNormalization", infer=_infer_layer_norm))
register(OpDef("BatchNormalization", infer=_infer_batch_norm))
