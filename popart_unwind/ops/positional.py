"""Op family: positional ops — Trilu, CumSum, CumProd, ReverseSequence, OneHot, TopK,
NonZero: results defined by where elements lie along their axes (a triangle kept, running
sums and products, each sequence's first steps reversed, a position set, the positions of
the largest or of the non-zero elements), with ONNX semantics.

Where the result's shape depends on an input's values (OneHot's depth, TopK's k) the shape
rule needs that input to be a constant and otherwise cannot decide; NonZero's output
length depends on data, so it is known only for a constant input. No layout rule is
modelled: each op is a barrier.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import (
    constant_input,
    constant_value,
    input_shape,
    ints,
    normalize_axis,
    small_constants,
)
from popart_unwind.ops.registry import OpDef, register


# -- Trilu ----------------------------------------------------------------------------------
def _infer_trilu(op: Op) -> list:
    shape = input_shape(op, 0)
    if len(shape) < 2:
        raise ShapeError(f"op {op.debug_name()}: Trilu needs rank >= 2, got {shape}")
    return [(op.input(0).dtype, shape)]


def _fold_trilu(op: Op, constants) -> list | None:
    x = constants[0]
    k = 0
    if op.has_input(1):
        if constants[1] is None:
            return None
        k = ints(constants[1])[0]
    if not small_constants(x):
        return None
    return [np.triu(x, k) if op.attributes.get("upper", 1) else np.tril(x, k)]


register(OpDef("Trilu", infer=_infer_trilu, fold=_fold_trilu))


# -- CumSum ---------------------------------------------------------------------------------
def _infer_cumsum(op: Op) -> list:
    shape = input_shape(op, 0)
    axis = constant_value(op.input(1))
    if axis is not None:
        normalize_axis(op, ints(axis)[0], max(len(shape), 1))
    return [(op.input(0).dtype, shape)]


def _cumulative(running, unit: int):
    """The fold of a running sum (``np.cumsum``, unit 0) or product (``np.cumprod``, unit 1)
    along the axis input, with ONNX's ``exclusive`` and ``reverse``."""
    def fold(op: Op, constants) -> list | None:
        x, axis = constants[0], constants[1]
        if not small_constants(x) or axis is None or x.ndim == 0:
            return None
        axis = normalize_axis(op, ints(axis)[0], x.ndim)
        reverse = op.attributes.get("reverse", 0)
        work = np.flip(x, axis) if reverse else x
        total = running(work, axis=axis, dtype=x.dtype)
        if op.attributes.get("exclusive", 0):
            head = np.full_like(np.take(total, [0], axis=axis), unit)
            total = np.concatenate(
                [head, np.take(total, range(x.shape[axis] - 1), axis=axis)], axis=axis)
        return [np.flip(total, axis) if reverse else total]

    return fold


register(OpDef("CumSum", infer=_infer_cumsum, fold=_cumulative(np.cumsum, 0)))
register(OpDef("CumProd", infer=_infer_cumsum, fold=_cumulative(np.cumprod, 1)))


# -- ReverseSequence ------------------------------------------------------------------------
def _sequence_axes(op: Op, rank: int) -> tuple[int, int]:
    time = int(op.attributes.get("time_axis", 0))
    batch = int(op.attributes.get("batch_axis", 1))
    if {time, batch} != {0, 1} or rank < 2:
        raise ShapeError(f"op {op.debug_name()}: time_axis {time} and batch_axis {batch} must "
                         f"be 0 and 1 in some order, of an input of rank >= 2")
    return time, batch


def _infer_reverse_sequence(op: Op) -> list:
    """The first ``sequence_lens[b]`` steps of each batch entry reversed: same shape."""
    shape = input_shape(op, 0)
    _, batch = _sequence_axes(op, len(shape))
    if input_shape(op, 1) != (shape[batch],) or op.input(1).dtype != "int64":
        raise ShapeError(f"op {op.debug_name()}: sequence_lens must be int64 of shape "
                         f"({shape[batch]},), got {op.input(1).dtype} {input_shape(op, 1)}")
    return [(op.input(0).dtype, shape)]


def _fold_reverse_sequence(op: Op, constants) -> list | None:
    x, lengths = constants[0], constants[1]
    if not small_constants(x) or lengths is None:
        return None
    time, batch = _sequence_axes(op, x.ndim)
    steps = np.moveaxis(x, (batch, time), (0, 1)).copy()  # [batch, time, ...]
    for b, length in enumerate(ints(lengths)):
        if not 0 <= length <= steps.shape[1]:
            return None
        steps[b, :length] = steps[b, :length][::-1]
    return [np.moveaxis(steps, (0, 1), (batch, time))]


register(OpDef("ReverseSequence", infer=_infer_reverse_sequence,
               fold=_fold_reverse_sequence))


# -- OneHot, TopK, NonZero ------------------------------------------------------------------
def _infer_one_hot(op: Op) -> list:
    indices = input_shape(op, 0)
    if input_shape(op, 2) != (2,):
        raise ShapeError(f"op {op.debug_name()}: values must hold 2 elements (off, on), got "
                         f"shape {input_shape(op, 2)}")
    depth = np.asarray(constant_input(op, 1, "depth")).reshape(-1)
    if depth.size != 1 or depth[0] < 1:
        raise ShapeError(f"op {op.debug_name()}: depth must be one positive number")
    axis = normalize_axis(op, op.attributes.get("axis", -1), len(indices) + 1)
    shape = (*indices[:axis], int(depth[0]), *indices[axis:])
    return [(op.input(2).dtype, shape)]


register(OpDef("OneHot", infer=_infer_one_hot))


def _infer_top_k(op: Op) -> list:
    shape = input_shape(op, 0)
    if op.type.version < 10:
        k = op.attributes.get("k")
        if k is None:
            raise ShapeError(f"op {op.debug_name()}: attribute k is required")
    else:
        values = ints(constant_input(op, 1, "K"))
        if len(values) != 1:
            raise ShapeError(f"op {op.debug_name()}: K must hold one number, got {values}")
        k = values[0]
    axis = normalize_axis(op, op.attributes.get("axis", -1), max(len(shape), 1))
    if not 0 <= k <= shape[axis]:
        raise ShapeError(f"op {op.debug_name()}: k = {k} for an axis of size {shape[axis]}")
    out = (*shape[:axis], k, *shape[axis + 1:])
    return [(op.input(0).dtype, out), ("int64", out)]


register(OpDef("TopK", infer=_infer_top_k))


def _infer_non_zero(op: Op) -> list:
    shape = input_shape(op, 0)
    data = constant_value(op.input(0))
    if data is None:
        return [("int64", None)]  # the count depends on data: keep a seeded shape
    return [("int64", (len(shape), int(np.count_nonzero(data))))]


def _fold_non_zero(op: Op, constants) -> list | None:
    x = constants[0]
    if not small_constants(x):
        return None
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


register(OpDef("NonZero", infer=_infer_non_zero, fold=_fold_non_zero))
