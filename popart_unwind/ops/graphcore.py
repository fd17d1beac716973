"""Op family: PopART's own ops of its ai.graphcore opset 1 that a model built with PopART's
Builder may hold and that are not elementwise (those are rows of ``elementwise.py``'s
table), with PopART's meaning. (Its other computations are ``graphcore_compute.py``'s, its
losses L1 and Nll ``graphcore_losses.py``'s, its runtime ops ``graphcore_runtime.py``'s.)

Subsample keeps every ``strides[i]``-th element along axis i, starting at 0; Reverse
reverses the axes ``dimensions`` lists; IdentityLoss sums or averages its input to a
scalar (``reduction`` "Sum" or "Mean") or passes it on ("None"); GroupNormalization
normalises each sample's channel groups and also gives their means and inverse standard
deviations (``[N * num_groups]`` each). These have exact shape rules and numpy folds.
DynamicSlice takes a slab of ``sizes`` along ``axes`` at an offset read at run time, and
DynamicUpdate, DynamicAdd and DynamicZero write, add or zero such a slab of their first
input; Init makes a tensor of the ``shape`` and PopART ``data_type`` its attributes give.
These have exact shape rules and no fold (an offset is a run-time value, an Init may leave
its values undefined). Layouts are not modelled: each op is a barrier.
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


# -- GroupNormalization -----------------------------------------------------------------------
def _groups(op: Op, channels: int) -> int:
    groups = int(op.attributes.get("num_groups", 0))
    if groups < 1 or channels % groups:
        raise ShapeError(f"op {op.debug_name()}: num_groups {groups} does not divide the "
                         f"{channels} channels")
    return groups


def _infer_group_norm(op: Op) -> InferredOutputs:
    """X [N, C, ...], scale and B [C]: Y like X, Mean and InvStdDev [N * num_groups]."""
    shape = input_shape(op, 0)
    if len(shape) < 2:
        raise ShapeError(f"op {op.debug_name()}: X must be at least 2-D, got {shape}")
    groups = _groups(op, shape[1])
    for index, what in ((1, "scale"), (2, "B")):
        if input_shape(op, index) != (shape[1],):
            raise ShapeError(f"op {op.debug_name()}: {what} of shape {input_shape(op, index)} "
                             f"is not one value per channel ({shape[1]})")
    dtype = op.input(0).dtype
    return [(dtype, shape), (dtype, (shape[0] * groups,)), (dtype, (shape[0] * groups,))]


def _fold_group_norm(op: Op, constants: Constants) -> FoldResult:
    x, scale, bias = constants[0], constants[1], constants[2]
    if not small_constants(x, scale, bias) or x.dtype.kind != "f":
        return None
    groups = _groups(op, x.shape[1])
    epsilon = float(op.attributes.get("epsilon", np.float32(1e-5)))
    grouped = x.astype(np.float64).reshape(x.shape[0], groups, -1)
    mean = grouped.mean(axis=2, keepdims=True)
    inv_std = 1 / np.sqrt(grouped.var(axis=2, keepdims=True) + epsilon)
    per_channel = (1, -1) + (1,) * (x.ndim - 2)
    y = ((grouped - mean) * inv_std).reshape(x.shape) * scale.reshape(per_channel) \
        + bias.reshape(per_channel)
    results = [y, mean.reshape(-1), inv_std.reshape(-1)]
    return [results[i].astype(x.dtype) for i in op.output_map()]


# -- DynamicSlice, DynamicUpdate, DynamicAdd, DynamicZero ------------------------------------
def _slab(op: Op, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the slab ``axes`` and ``sizes`` select from a tensor of ``shape``."""
    axes = [normalize_axis(op, a, max(len(shape), 1)) for a in ints(op.attributes.get(
        "axes", []))]
    sizes = ints(op.attributes.get("sizes", []))
    if len(axes) != len(sizes) or len(set(axes)) != len(axes) or any(
            not 0 <= size <= shape[axis] for axis, size in zip(axes, sizes, strict=True)):
        raise ShapeError(f"op {op.debug_name()}: axes {axes} and sizes {sizes} do not select "
                         f"a slab of a tensor of shape {shape}")
    slab = list(shape)
    for axis, size in zip(axes, sizes, strict=True):
        slab[axis] = size
    return tuple(slab)


def _check_offset(op: Op) -> None:
    if op.input(1).dtype not in ("int32", "uint32", "int64"):
        raise ShapeError(f"op {op.debug_name()}: the offset must be an integer tensor")


def _infer_dynamic_slice(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    _check_offset(op)
    return [(op.input(0).dtype, _slab(op, shape))]


def _infer_dynamic_write(op: Op) -> InferredOutputs:
    """DynamicUpdate and DynamicAdd (tensor, offset, slab) and DynamicZero (tensor,
    offset): the result is the tensor's type."""
    shape = input_shape(op, 0)
    _check_offset(op)
    slab = _slab(op, shape)
    if op.has_input(2) and input_shape(op, 2) != slab:
        raise ShapeError(f"op {op.debug_name()}: the slab has shape {input_shape(op, 2)}, "
                         f"axes and sizes select {slab}")
    return [(op.input(0).dtype, shape)]


# -- Init -------------------------------------------------------------------------------------
#: PopART's ``DataType`` numbering (``willow/include/popart/datatype.hpp``), as Init's
#: ``data_type`` attribute holds it, its float8 types (2 and 3) among them.
_POPART_DTYPES = {0: "uint8", 1: "int8", 2: "float8_e4m3fnuz", 3: "float8_e5m2fnuz",
                  4: "uint16", 5: "int16", 6: "int32", 7: "int64",
                  8: "uint32", 9: "uint64", 10: "bool", 11: "float32", 12: "float16",
                  13: "bfloat16", 14: "float64"}


def _infer_init(op: Op) -> InferredOutputs:
    shape = op.attributes.get("shape")
    code = op.attributes.get("data_type")
    if shape is None or any(int(n) < 0 for n in shape):
        raise ShapeError(f"op {op.debug_name()} needs a 'shape' of non-negative sizes")
    if code not in _POPART_DTYPES:
        raise ShapeError(f"op {op.debug_name()}: data_type {code!r} is not a PopART data type "
                         f"the IR models")
    return [(_POPART_DTYPES[code], tuple(int(n) for n in shape))]


register(OpDef("Subsample", domain=GRAPHCORE_DOMAIN, infer=_infer_subsample,
               fold=_fold_subsample))
register(OpDef("Reverse", domain=GRAPHCORE_DOMAIN, infer=_infer_reverse, fold=_fold_reverse))
register(OpDef("IdentityLoss", domain=GRAPHCORE_DOMAIN, infer=_infer_identity_loss,
               fold=_fold_identity_loss, reduces_input=True))
register(OpDef("GroupNormalization", domain=GRAPHCORE_DOMAIN, infer=_infer_group_norm,
               fold=_fold_group_norm, norm=True, reduces_input=True))
register(OpDef("DynamicSlice", domain=GRAPHCORE_DOMAIN, infer=_infer_dynamic_slice))
for _name in ("DynamicUpdate", "DynamicAdd", "DynamicZero"):
    register(OpDef(_name, domain=GRAPHCORE_DOMAIN, infer=_infer_dynamic_write))
register(OpDef("Init", domain=GRAPHCORE_DOMAIN, infer=_infer_init))
