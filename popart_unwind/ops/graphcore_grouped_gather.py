"""Op family: PopART's ai.graphcore GroupedGather — one Gather per group, the groups along
axis 0 of both the data and the indices (PopART's GatherOp with its ``group_size``).

With ``group_size`` G above 1, data ``[G, d1, ...]`` and indices ``[G, i1, ...]`` give, for
each group g, ``Gather(data[g], indices[g])`` along data axis ``axis`` (counted in the whole
data, so at least 1: PopART refuses axis 0, the groups' own axis), stacked along a new axis
0: the result is ``data[:axis] + indices[1:] + data[axis + 1:]``. With G = 1 it is ONNX's
Gather (the indices keep every axis). Attributes as PopART's creator reads them: ``axis`` (0
unless given) and ``group_size`` (1 unless given). The data's and the indices' leading axes
must both be G (Poplibs' grouped multiSlice reads them so; PopART's setup assumes it).

The fold computes in-range indices only: PopART leaves out-of-range ones undefined (or zero,
an option a model cannot set), so nothing is folded then. No gradient rule (PopART's is a
grouped scatter-add, not written here): Autodiff refuses a weight behind it, naming the op.
Layouts: a barrier (the Gather rule models one lookup into a table along axis 0, not a
grouped one).
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ops.common import (
    FOLD_MAX_ELEMENTS,
    input_shape,
    normalize_axis,
    small_constants,
)
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register

_INDEX_TYPES = ("int32", "int64", "uint32", "uint64", "int16", "uint16", "int8", "uint8")


def _attributes(op: Op) -> tuple[int, int]:
    """(axis in [0, rank), group size), checked against the shapes."""
    data, indices = input_shape(op, 0), input_shape(op, 1)
    if not data:
        raise ShapeError(f"op {op.debug_name()}: cannot gather from a scalar")
    if op.input(1).dtype not in _INDEX_TYPES:
        raise ShapeError(f"op {op.debug_name()}: indices of {op.input(1).dtype}, not integers")
    axis = normalize_axis(op, int(op.attributes.get("axis", 0)), len(data))
    group = int(op.attributes.get("group_size", 1))
    if group < 1:
        raise ShapeError(f"op {op.debug_name()}: group_size {group} must be at least 1")
    if group > 1 and (axis == 0 or not indices or data[0] != group or indices[0] != group):
        raise ShapeError(f"op {op.debug_name()}: group_size {group} needs data {data} and "
                         f"indices {indices} both of {group} groups on axis 0, and a gather "
                         f"axis other than 0 (got {axis})")
    return axis, group


def _infer(op: Op) -> InferredOutputs:
    axis, group = _attributes(op)
    data, indices = input_shape(op, 0), input_shape(op, 1)
    kept = indices[1:] if group > 1 else indices
    return [(op.input(0).dtype, data[:axis] + kept + data[axis + 1:])]


def _fold(op: Op, constants: Constants) -> FoldResult:
    data, indices = constants[0], constants[1]
    if not small_constants(data, indices):
        return None
    axis, group = _attributes(op)
    out_shape = op.output(0).shape
    if ((indices.size and (indices.min() < 0 or indices.max() >= data.shape[axis]))
            or math.prod(out_shape) > FOLD_MAX_ELEMENTS):
        return None
    indices = indices.astype(np.int64)
    if group == 1:
        return [np.take(data, indices, axis=axis)]
    parts = [np.take(data[g], indices[g], axis=axis - 1) for g in range(group)]
    return [np.stack(parts).reshape(out_shape)]


register(OpDef("GroupedGather", domain=GRAPHCORE_DOMAIN, infer=_infer, fold=_fold))
