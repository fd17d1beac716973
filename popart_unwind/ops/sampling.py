"""Op family: sampling at computed positions — RoiAlign, GridSample, MaxUnpool, with ONNX
semantics.

RoiAlign pools a window of X per region of interest (``[num_rois, C, output_height,
output_width]``); GridSample reads X at the positions a grid gives (``[N, C, *grid's
spatial shape]``); MaxUnpool puts each value of X where its index says in a zero tensor of
the pooled input's size (or of ``output_shape``). Each has an exact shape rule. MaxUnpool
folds with numpy; with an ``output_shape`` larger than the shape its window attributes give,
the indices address the latter, placed at the origin of the former, as ONNX's reference
evaluator and its backend test ``maxunpool_export_with_output_shape`` read them (a runtime
reading them as positions in ``output_shape`` would differ). RoiAlign and GridSample,
whose bilinear sampling nothing here needs at planning time, are not folded.

Layouts are not modelled: each op is a barrier. Of the three, PopART takes RoiAlign
(opset 10).
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import (
    FOLD_MAX_ELEMENTS,
    constant_input,
    input_shape,
    ints,
    small_constants,
)
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _float_input(op: Op, index: int, what: str) -> str:
    dtype = op.input(index).dtype
    if dtype not in _FLOATS:
        raise ShapeError(f"op {op.debug_name()}: {what} must be a float tensor, got {dtype}")
    return dtype


# -- RoiAlign ---------------------------------------------------------------------------------
def _infer_roi_align(op: Op) -> InferredOutputs:
    """X [N, C, H, W], rois [num_rois, 4], batch_indices [num_rois] (int64)."""
    x, rois, batch = input_shape(op, 0), input_shape(op, 1), input_shape(op, 2)
    if len(x) != 4:
        raise ShapeError(f"op {op.debug_name()}: X must be 4-D, got {x}")
    if len(rois) != 2 or rois[1] != 4 or batch != (rois[0],):
        raise ShapeError(f"op {op.debug_name()}: rois {rois} and batch_indices {batch} must "
                         f"be [num_rois, 4] and [num_rois]")
    if op.input(2).dtype != "int64":
        raise ShapeError(f"op {op.debug_name()}: batch_indices must be int64")
    height = int(op.attributes.get("output_height", 1))
    width = int(op.attributes.get("output_width", 1))
    if height < 1 or width < 1:
        raise ShapeError(f"op {op.debug_name()}: output size {height}x{width} is empty")
    return [(_float_input(op, 0, "X"), (rois[0], x[1], height, width))]


# -- GridSample -------------------------------------------------------------------------------
def _infer_grid_sample(op: Op) -> InferredOutputs:
    """X [N, C, D1, ..., Dr], grid [N, D1', ..., Dr', r]: r = 2 before opset 20."""
    x, grid = input_shape(op, 0), input_shape(op, 1)
    spatial = len(x) - 2
    if spatial < 1 or (op.type.version < 20 and spatial != 2):
        raise ShapeError(f"op {op.debug_name()}: X of shape {x} has the wrong rank for "
                         f"GridSample-{op.type.version}")
    if len(grid) != len(x) or grid[0] != x[0] or grid[-1] != spatial:
        raise ShapeError(f"op {op.debug_name()}: grid of shape {grid} does not sample X of "
                         f"shape {x}")
    _float_input(op, 1, "grid")
    return [(op.input(0).dtype, (x[0], x[1], *grid[1:-1]))]


# -- MaxUnpool --------------------------------------------------------------------------------
def _unpooled_shape(op: Op, x: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the window attributes give: (in - 1) * stride + kernel - both pads."""
    kernel = ints(op.attributes.get("kernel_shape", []))
    spatial = len(x) - 2
    if len(kernel) != spatial or spatial < 1:
        raise ShapeError(f"op {op.debug_name()}: kernel_shape {kernel} does not fit X of "
                         f"shape {x}")
    strides = ints(op.attributes.get("strides", [1] * spatial))
    pads = ints(op.attributes.get("pads", [0] * 2 * spatial))
    if len(strides) != spatial or len(pads) != 2 * spatial:
        raise ShapeError(f"op {op.debug_name()}: strides {strides} or pads {pads} do not fit "
                         f"{spatial} spatial axes")
    sizes = [(x[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[spatial + i]
             for i in range(spatial)]
    if min(sizes) < 1:
        raise ShapeError(f"op {op.debug_name()}: the unpooled shape {sizes} is empty")
    return (x[0], x[1], *sizes)


def _infer_max_unpool(op: Op) -> InferredOutputs:
    x, indices = input_shape(op, 0), input_shape(op, 1)
    if indices != x or op.input(1).dtype != "int64":
        raise ShapeError(f"op {op.debug_name()}: I must be int64 of X's shape {x}, got "
                         f"{op.input(1).dtype} {indices}")
    shape = _unpooled_shape(op, x)
    if op.has_input(2):
        given = tuple(ints(constant_input(op, 2, "output_shape")))
        if len(given) != len(x) or given[:2] != x[:2] or any(
                g < s for g, s in zip(given[2:], shape[2:], strict=True)):
            raise ShapeError(f"op {op.debug_name()}: output_shape {given} is smaller than the "
                             f"unpooled shape {shape}")
        shape = given
    return [(op.input(0).dtype, shape)]


def _fold_max_unpool(op: Op, constants: Constants) -> FoldResult:
    x, indices = constants[0], constants[1]
    if not small_constants(x, indices):
        return None
    shape = _unpooled_shape(op, x.shape)
    target = shape
    if op.has_input(2):
        if constants[2] is None:
            return None
        target = tuple(ints(constants[2]))
    size = int(np.prod(shape))
    flat = indices.reshape(-1)
    if np.prod(target) > FOLD_MAX_ELEMENTS or np.any((flat < 0) | (flat >= size)):
        return None
    unpooled = np.zeros(size, x.dtype)
    unpooled[flat] = x.reshape(-1)
    result = np.zeros(target, x.dtype)
    result[tuple(slice(0, n) for n in shape)] = unpooled.reshape(shape)
    return [result]


register(OpDef("RoiAlign", infer=_infer_roi_align))
register(OpDef("GridSample", infer=_infer_grid_sample))
register(OpDef("MaxUnpool", infer=_infer_max_unpool, fold=_fold_max_unpool))
