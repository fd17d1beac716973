"""Op family: resizing — Tile, Pad, Resize, Upsample: results whose axes grow or shrink
from the input's by repeating, padding or scaling it, with ONNX semantics.

Where the result's shape depends on an input's values (Tile's repeats, Pad's pads,
Resize's scales or sizes) the shape rule needs that input to be a constant and otherwise
cannot decide. No layout rule is modelled: each op is a barrier.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError, ShapeUndecided
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import (
    FOLD_MAX_ELEMENTS,
    constant_input,
    input_shape,
    ints,
    normalize_axis,
    small_constants,
)
from popart_unwind.ops.registry import OpDef, register


# -- Tile -----------------------------------------------------------------------------------
def _infer_tile(op: Op) -> list:
    shape = input_shape(op, 0)
    repeats = ints(constant_input(op, 1, "repeats"))
    if len(repeats) != len(shape) or min(repeats, default=0) < 0:
        raise ShapeError(f"op {op.debug_name()}: repeats {repeats} must be {len(shape)} "
                         f"non-negative counts")
    return [(op.input(0).dtype, tuple(d * r for d, r in zip(shape, repeats, strict=True)))]


def _fold_tile(op: Op, constants) -> list | None:
    x, repeats = constants[0], constants[1]
    if x is None or repeats is None or math.prod(op.output(0).shape or (0,)) > FOLD_MAX_ELEMENTS:
        return None
    return [np.tile(x, ints(repeats))]

register(OpDef("Tile", infer=_infer_tile, fold=_fold_tile))


# -- Pad ------------------------------------------------------------------------------------
def _pads(op: Op, rank: int) -> list[int]:
    """Begin pads of every axis, then end pads (axes not named by ``axes`` get 0)."""
    if op.type.version < 11:
        pads = list(op.attributes.get("pads", []))
        axes = list(range(rank))
    else:
        pads = ints(constant_input(op, 1, "pads"))
        axes = (list(range(rank)) if not op.has_input(3)
                else [normalize_axis(op, a, rank)
                      for a in ints(constant_input(op, 3, "axes"))])
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"op {op.debug_name()}: {len(pads)} pads for {len(axes)} axes")
    full = [0] * (2 * rank)
    for position, axis in enumerate(axes):
        full[axis], full[axis + rank] = pads[position], pads[position + len(axes)]
    return full


def _infer_pad(op: Op) -> list:
    shape = input_shape(op, 0)
    pads = _pads(op, len(shape))
    out = tuple(d + pads[i] + pads[i + len(shape)] for i, d in enumerate(shape))
    if min(out, default=0) < 0:
        raise ShapeError(f"op {op.debug_name()}: pads {pads} crop {shape} below zero")
    return [(op.input(0).dtype, out)]


def _fold_pad(op: Op, constants) -> list | None:
    x = constants[0]
    if not small_constants(x) or math.prod(op.output(0).shape or (0,)) > FOLD_MAX_ELEMENTS:
        return None
    try:
        pads = _pads(op, x.ndim)
    except ShapeError:
        return None
    mode = op.attributes.get("mode", "constant")
    if min(pads, default=0) < 0 or mode not in ("constant", "reflect", "edge", "wrap"):
        return None
    widths = [(pads[i], pads[i + x.ndim]) for i in range(x.ndim)]
    if mode != "constant":
        return [np.pad(x, widths, mode=mode)]
    if op.type.version < 11:
        value = op.attributes.get("value", 0.0)
    elif op.has_input(2):
        if constants[2] is None:
            return None
        value = np.asarray(constants[2]).reshape(-1)[0]
    else:
        value = 0
    return [np.pad(x, widths, mode="constant", constant_values=value).astype(x.dtype)]

register(OpDef("Pad", infer=_infer_pad, fold=_fold_pad))


# -- Resize, Upsample -----------------------------------------------------------------------
def _scaled(op: Op, shape: tuple[int, ...], scales: list[float]) -> tuple[int, ...]:
    if len(scales) != len(shape):
        raise ShapeError(f"op {op.debug_name()}: {len(scales)} scales for rank {len(shape)}")
    return tuple(math.floor(d * s) for d, s in zip(shape, scales, strict=True))


def _resize_sizes(op: Op, shape: tuple[int, ...], sizes: list[int]) -> tuple[int, ...]:
    rank = len(shape)
    axes = [normalize_axis(op, a, rank) for a in op.attributes.get("axes", range(rank))]
    if len(sizes) != len(axes):
        raise ShapeError(f"op {op.debug_name()}: {len(sizes)} sizes for {len(axes)} axes")
    out = list(shape)
    policy = op.attributes.get("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        for axis, size in zip(axes, sizes, strict=True):
            out[axis] = size
        return tuple(out)
    ratios = [size / shape[axis] for axis, size in zip(axes, sizes, strict=True)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    for axis in axes:
        out[axis] = math.floor(scale * shape[axis] + 0.5)
    return tuple(out)


def _infer_resize(op: Op) -> list:
    shape = input_shape(op, 0)
    if op.attributes.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        raise ShapeUndecided(f"op {op.debug_name()}: tf_crop_and_resize sizes need the roi")
    if op.type.version < 11:
        scales = list(np.asarray(constant_input(op, 1, "scales")))
        return [(op.input(0).dtype, _scaled(op, shape, scales))]
    if op.has_input(3):
        sizes = ints(constant_input(op, 3, "sizes"))
        return [(op.input(0).dtype, _resize_sizes(op, shape, sizes))]
    scales = [float(s) for s in np.asarray(constant_input(op, 2, "scales")).reshape(-1)]
    rank = len(shape)
    axes = [normalize_axis(op, a, rank) for a in op.attributes.get("axes", range(rank))]
    if len(scales) != len(axes):
        raise ShapeError(f"op {op.debug_name()}: {len(scales)} scales for {len(axes)} axes")
    full = [1.0] * rank
    for axis, scale in zip(axes, scales, strict=True):
        full[axis] = scale
    return [(op.input(0).dtype, _scaled(op, shape, full))]


def _infer_upsample(op: Op) -> list:
    shape = input_shape(op, 0)
    if op.type.version < 9:
        scales = list(op.attributes.get("scales", []))
    else:
        scales = [float(s) for s in np.asarray(constant_input(op, 1, "scales")).reshape(-1)]
    return [(op.input(0).dtype, _scaled(op, shape, scales))]


register(OpDef("Resize", infer=_infer_resize))
register(OpDef("Upsample", infer=_infer_upsample))
