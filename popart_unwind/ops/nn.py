"""Op family: neural-network layers (softmax, normalizations, convolutions, pools, dropout).

Rules follow the ONNX operator specifications, including what changed between opset
versions (Softmax's default axis, BatchNormalization's outputs, Dropout's training input).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import constant_value, input_shape, normalize_axis
from popart_unwind.ops.layout_conv import CONV
from popart_unwind.ops.registry import OpDef, register
from popart_unwind.shapes import broadcast_shapes

FOLD_MAX_ELEMENTS = 1 << 16


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


# -- Softmax, LogSoftmax ------------------------------------------------------------------
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


# -- Conv, ConvTranspose, pools -------------------------------------------------------------
def _ints(op: Op, name: str, default: Sequence[int], count: int) -> list[int]:
    values = list(op.attributes.get(name, default))
    if len(values) != count:
        raise ShapeError(f"op {op.debug_name()}: attribute {name} has {len(values)} "
                         f"value(s), expected {count}")
    return values


def _spatial_dims(op: Op, x: tuple[int, ...], kernel: Sequence[int], ceil_mode: bool = False
                  ) -> list[int]:
    """Output sizes of a sliding window over the spatial axes (ONNX conv/pool rule)."""
    n = len(kernel)
    strides = _ints(op, "strides", [1] * n, n)
    dilations = _ints(op, "dilations", [1] * n, n)
    auto_pad = op.attributes.get("auto_pad", "NOTSET")
    pads = _ints(op, "pads", [0] * 2 * n, 2 * n) if auto_pad == "NOTSET" else [0] * 2 * n
    out = []
    for axis, (size, k, s, d) in enumerate(zip(x[2:], kernel, strides, dilations, strict=True)):
        if s < 1 or d < 1:
            raise ShapeError(f"op {op.debug_name()}: strides and dilations must be >= 1")
        window = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-size // s))
            continue
        padded = size + pads[axis] + pads[axis + n]
        if padded < window:
            raise ShapeError(f"op {op.debug_name()}: window {window} is larger than the "
                             f"padded spatial axis {axis} ({padded})")
        # As ONNX's own shape inference counts (it keeps a last ceil-mode window that would
        # start in the end padding, where PyTorch drops it): imported shapes must agree.
        count = -(-(padded - window) // s) if ceil_mode else (padded - window) // s
        out.append(count + 1)
    return out


def _spatial_input(op: Op, min_rank: int = 3) -> tuple[int, ...]:
    x = input_shape(op, 0)
    if len(x) < min_rank:
        raise ShapeError(f"op {op.debug_name()}: input must be N x C x spatial..., got {x}")
    return x


def _infer_conv(op: Op) -> list:
    x, w = _spatial_input(op), input_shape(op, 1)
    group = op.attributes.get("group", 1)
    if len(w) != len(x) or x[1] != w[1] * group or w[0] % group:
        raise ShapeError(f"op {op.debug_name()}: weights {w} do not fit input {x} with "
                         f"group {group}")
    if op.has_input(2) and input_shape(op, 2) != (w[0],):
        raise ShapeError(f"op {op.debug_name()}: bias must have shape ({w[0]},), got "
                         f"{input_shape(op, 2)}")
    kernel = _ints(op, "kernel_shape", w[2:], len(x) - 2)
    return [(op.input(0).dtype, (x[0], w[0], *_spatial_dims(op, x, kernel)))]


def _infer_conv_transpose(op: Op) -> list:
    x, w = _spatial_input(op), input_shape(op, 1)
    group = op.attributes.get("group", 1)
    if len(w) != len(x) or x[1] != w[0]:
        raise ShapeError(f"op {op.debug_name()}: weights {w} do not fit input {x}")
    n = len(x) - 2
    if "output_shape" in op.attributes:
        spatial = list(op.attributes["output_shape"])[-n:]
    else:
        kernel = _ints(op, "kernel_shape", w[2:], n)
        strides = _ints(op, "strides", [1] * n, n)
        dilations = _ints(op, "dilations", [1] * n, n)
        extra = _ints(op, "output_padding", [0] * n, n)
        auto_pad = op.attributes.get("auto_pad", "NOTSET")
        pads = _ints(op, "pads", [0] * 2 * n, 2 * n) if auto_pad == "NOTSET" else [0] * 2 * n
        spatial = []
        for axis in range(n):
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                spatial.append(x[2 + axis] * strides[axis])
            else:
                spatial.append(strides[axis] * (x[2 + axis] - 1) + extra[axis]
                               + (kernel[axis] - 1) * dilations[axis] + 1
                               - pads[axis] - pads[axis + n])
    return [(op.input(0).dtype, (x[0], w[1] * group, *spatial))]


def _infer_pool(op: Op) -> list:
    x = _spatial_input(op)
    if "kernel_shape" not in op.attributes:
        raise ShapeError(f"op {op.debug_name()}: attribute kernel_shape is required")
    kernel = _ints(op, "kernel_shape", (), len(x) - 2)
    ceil_mode = bool(op.attributes.get("ceil_mode", 0))
    shape = (x[0], x[1], *_spatial_dims(op, x, kernel, ceil_mode))
    return [(op.input(0).dtype, shape), ("int64", shape)]


def _infer_global_pool(op: Op) -> list:
    x = _spatial_input(op)
    return [(op.input(0).dtype, (x[0], x[1]) + (1,) * (len(x) - 2))]


# -- Dropout ------------------------------------------------------------------------------
def _infer_dropout(op: Op) -> list:
    shape = input_shape(op, 0)
    mask_dtype = "bool" if op.type.version >= 10 else op.input(0).dtype
    return [(op.input(0).dtype, shape), (mask_dtype, shape)]


def _fold_dropout(op: Op, constants) -> list | None:
    """Outside training (opset >= 12, training_mode absent or a constant false) Dropout is
    the identity and its mask all true."""
    if op.type.version < 12:
        return None
    if op.has_input(2):
        training = constant_value(op.input(2))
        if training is None or bool(np.asarray(training).reshape(-1)[0]):
            return None
    replacements: list = [op.input(0)]
    if op.has_output(1):
        shape = op.input(0).shape
        if shape is None or math.prod(shape) > FOLD_MAX_ELEMENTS:
            return None
        replacements.append(np.ones(shape, dtype=bool))
    return replacements


register(OpDef("Softmax", infer=_infer_softmax, fold=_fold_softmax))
register(OpDef("LogSoftmax", infer=_infer_softmax, fold=_fold_softmax))
register(OpDef("LayerNormalization", infer=_infer_layer_norm))
register(OpDef("BatchNormalization", infer=_infer_batch_norm))
register(OpDef("Conv", infer=_infer_conv, layout=CONV))
register(OpDef("ConvTranspose", infer=_infer_conv_transpose))
for _pool in ("MaxPool", "AveragePool", "LpPool"):
    register(OpDef(_pool, infer=_infer_pool))
for _pool in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
    register(OpDef(_pool, infer=_infer_global_pool))
register(OpDef("Dropout", infer=_infer_dropout, fold=_fold_dropout))
