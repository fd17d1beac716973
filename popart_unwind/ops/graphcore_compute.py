"""Op family: PopART's ai.graphcore ops that compute a plain value and are neither
elementwise (rows of ``elementwise.py``'s table) nor views (``views.py``, ``slicing.py``,
``depth_space.py`` hold its Reshape, Slice and DepthToSpace), with PopART's meaning.

PrintTensor passes its input on (and prints it: a side effect, so it is never erased);
Zeros makes zeros of its ``shape`` and ONNX ``dtype``, ZerosLike zeros shaped and typed as its
input; AddBias adds a per-channel bias (``[C]``) along axis 1 of its data ``[N, C, ...]``, as
PopART's convolution-bias pattern makes it; ShapedDropout drops whole slices of its input
through a mask of ``shape`` broadcast to it; Bucketize gives, per element, the index of the
bucket among the 1-D ``boundaries`` it falls in (int32, ``right`` choosing which side of a
boundary a tie falls on, as ``torch.bucketize``); ReduceMedian gives the median along
``axes`` and its index (int32), the lower of the two middle values for an even count;
Abort stops the program (when its optional condition holds) and has no result.

Layouts: PrintTensor copies its input (PopART's Opx clones and copies it), so layouts pass
through as a view's would while the result is new memory and PopART's creator search stops
at it; AddBias is rewritten before planning into a Reshape of the bias and an Add, each with
its layout rule (the bias a broadcast operand of the Add); Zeros and ZerosLike fold to
constants. ShapedDropout, Bucketize, ReduceMedian and Abort are barriers.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX, numpy_dtype
from popart_unwind.ir.op import DEFAULT_ONNX_OPSET, GRAPHCORE_DOMAIN, ONNX_DOMAIN, Op, OpType
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import input_shape, ints, normalize_axis, small_constants
from popart_unwind.ops.gradient import GradientBuilder, gets_gradient, int64s, one
from popart_unwind.ops.layout_rule import known_shape
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register
from popart_unwind.ops.views import CopiedViewRule, Step
from popart_unwind.rewrite import Rewriter, pattern


# -- PrintTensor ------------------------------------------------------------------------------
class CopyRule(CopiedViewRule):
    """A copy of input 0 into new memory, read in row-major order (reshaped where the result's
    shape differs): layouts pass through as a view's would, each tile copies what it holds
    (the default ``work``: an elementwise vertex over its busiest tile), and PopART's creator
    search stops at the op."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        out = known_shape(op, op.output(out_index))
        return [] if out == known_shape(op, op.input(0)) else [("reshape", out)]


COPY = CopyRule()


def _infer_like_input(op: Op) -> InferredOutputs:
    return [(op.input(0).dtype, input_shape(op, 0))]


def _fold_passed(op: Op, constants: Constants) -> FoldResult:
    """The input's value (what reads the result sees; the op itself, having an effect, is
    never folded away)."""
    return None if constants[0] is None else [constants[0]]


def _passed_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY itself: PopART's PrintTensor gradient is a PrintTensor of dY (printing it only
    when ``print_gradient`` is set), which passes it on unchanged."""
    return [grads[0] if gets_gradient(op.input(0)) else None]


# -- Zeros, ZerosLike -------------------------------------------------------------------------
def _zeros_dtype(op: Op) -> str:
    code = int(op.attributes.get("dtype", 1))
    if code not in DTYPE_OF_ONNX:
        raise ShapeError(f"op {op.debug_name()}: dtype {code} is not an ONNX element type "
                         f"the IR models")
    return DTYPE_OF_ONNX[code]


def _infer_zeros(op: Op) -> InferredOutputs:
    shape = op.attributes.get("shape")
    if shape is None or any(int(n) < 0 for n in shape):
        raise ShapeError(f"op {op.debug_name()} needs a 'shape' of non-negative sizes")
    return [(_zeros_dtype(op), tuple(int(n) for n in shape))]


def _fold_zeros(op: Op, constants: Constants) -> FoldResult:
    out = op.output(0)
    if out.shape is None:
        return None
    return [np.zeros(out.shape, numpy_dtype(out.dtype))]


# -- AddBias ----------------------------------------------------------------------------------
def _infer_add_bias(op: Op) -> InferredOutputs:
    data, bias = input_shape(op, 0), input_shape(op, 1)
    if len(data) < 2 or bias != (data[1],) or op.input(1).dtype != op.input(0).dtype:
        raise ShapeError(f"op {op.debug_name()}: bias {bias} ({op.input(1).dtype}) must be "
                         f"one {op.input(0).dtype} per channel of data {data} (axis 1)")
    return [(op.input(0).dtype, data)]


def _per_channel(rank: int) -> tuple[int, ...]:
    return (1, -1) + (1,) * (rank - 2)


def _fold_add_bias(op: Op, constants: Constants) -> FoldResult:
    data, bias = constants[0], constants[1]
    if not small_constants(data, bias):
        return None
    return [(data + bias.reshape(_per_channel(data.ndim))).astype(data.dtype)]


def _onnx(rewriter: Rewriter, like: Op, name: str, inputs: list, **attributes) -> Tensor:
    """A new ai.onnx op (at the opset the rewrites build with) replacing part of ``like``."""
    return rewriter.create_op(like.graph, OpType(ONNX_DOMAIN, name, DEFAULT_ONNX_OPSET),
                              inputs, attributes, like=like).output(0)


@pattern("AddBias", name="expand-add-bias")
def _expand_add_bias(op: Op, rewriter: Rewriter) -> bool:
    """data + bias reshaped to [C, 1, ...]: a Reshape and a broadcasting Add, each with its
    layout rule (PopART's AddBiasOpx adds the bias as Poplibs' ``addBias`` broadcasts it)."""
    data = op.input(0)
    if data.shape is None:
        return False
    shape = rewriter.constant(op.graph, np.asarray(_per_channel(len(data.shape))[1:],
                                                    np.int64))
    bias = _onnx(rewriter, op, "Reshape", [op.input(1), shape])
    rewriter.replace_op(op, [_onnx(rewriter, op, "Add", [data, bias])])
    return True


def _add_bias_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY for the data; dY summed over every axis but the channels for the bias (PopART's
    AddBiasDataGradOp and AddBiasBiasGradOp)."""
    grad, data, bias = grads[0], op.input(0), op.input(1)
    if grad is None:
        return [None, None]
    axes = [a for a in range(len(grad.shape)) if a != 1]
    bias_grad = (one(builder, "ReduceSum", [grad, int64s(builder, axes)], {"keepdims": 0})
                 if gets_gradient(bias) else None)
    return [grad if gets_gradient(data) else None, bias_grad]


# -- ShapedDropout ----------------------------------------------------------------------------
def _infer_shaped_dropout(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    mask = tuple(int(n) for n in op.attributes.get("shape", []))
    ratio = float(op.attributes.get("ratio", 0.5))
    try:
        broadcast = np.broadcast_shapes(mask, shape)
    except ValueError:
        broadcast = None
    if broadcast != shape or not 0 <= ratio < 1:
        raise ShapeError(f"op {op.debug_name()}: the mask shape {list(mask)} must broadcast "
                         f"to the input {shape} and the ratio {ratio} lie in [0, 1)")
    return [(op.input(0).dtype, shape)]


# -- Bucketize --------------------------------------------------------------------------------
def _infer_bucketize(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    if len(input_shape(op, 1)) != 1 or op.input(1).dtype != op.input(0).dtype:
        raise ShapeError(f"op {op.debug_name()}: the boundaries must be 1-D and of the "
                         f"input's type {op.input(0).dtype}, got {input_shape(op, 1)} "
                         f"({op.input(1).dtype})")
    if int(op.attributes.get("right", 0)) not in (0, 1):
        raise ShapeError(f"op {op.debug_name()}: 'right' must be 0 or 1")
    return [("int32", shape)]


def _fold_bucketize(op: Op, constants: Constants) -> FoldResult:
    x, boundaries = constants[0], constants[1]
    if not small_constants(x, boundaries):
        return None
    # right=0: boundaries[i-1] < x <= boundaries[i]; right=1: boundaries[i-1] <= x < ...
    side = "right" if int(op.attributes.get("right", 0)) else "left"
    return [np.searchsorted(boundaries, x, side=side).astype(np.int32)]


# -- ReduceMedian -----------------------------------------------------------------------------
def _median_axes(op: Op, rank: int) -> list[int]:
    axes = op.attributes.get("axes")
    if axes is None:
        return list(range(rank))
    axes = sorted({normalize_axis(op, a, max(rank, 1)) for a in ints(axes)})
    return axes


def _infer_reduce_median(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    axes = _median_axes(op, len(shape))
    if any(shape[a] == 0 for a in axes):
        raise ShapeError(f"op {op.debug_name()}: the median of an empty axis is undefined")
    keep = bool(op.attributes.get("keepdims", 1))
    out = tuple(1 if a in axes else n for a, n in enumerate(shape) if keep or a not in axes)
    return [(op.input(0).dtype, out), ("int32", out)]


def _fold_reduce_median(op: Op, constants: Constants) -> FoldResult:
    """The lower middle value along the reduced axes (flattened in row-major order) and its
    flat index among them; among equal values the first in that order (which of equal
    values PopART's index names is not stated here)."""
    x = constants[0]
    if not small_constants(x):
        return None
    axes = _median_axes(op, x.ndim)
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + axes)
    flat = moved.reshape(*moved.shape[:len(kept)], -1)
    order = np.argsort(flat, axis=-1, kind="stable")
    middle = (flat.shape[-1] - 1) // 2
    index = order[..., middle]
    value = np.take_along_axis(flat, index[..., None], axis=-1)[..., 0]
    out = op.output(0).shape
    results = [value.reshape(out).astype(x.dtype), index.reshape(out).astype(np.int32)]
    return [results[i] for i in op.output_map()]


# -- Abort ------------------------------------------------------------------------------------
def _infer_abort(op: Op) -> InferredOutputs:
    if op.has_input(0) and input_shape(op, 0) not in ((), (1,)):
        raise ShapeError(f"op {op.debug_name()}: the condition must be a scalar, got "
                         f"{input_shape(op, 0)}")
    return []


register(OpDef("PrintTensor", domain=GRAPHCORE_DOMAIN, infer=_infer_like_input,
               fold=_fold_passed, side_effects=True, keeps_input_layout=True, layout=COPY,
               gradient=_passed_gradient))
register(OpDef("Zeros", domain=GRAPHCORE_DOMAIN, infer=_infer_zeros, fold=_fold_zeros))
register(OpDef("ZerosLike", domain=GRAPHCORE_DOMAIN, infer=_infer_like_input,
               fold=_fold_zeros, gradient=lambda builder, op, grads: [None]))
register(OpDef("AddBias", domain=GRAPHCORE_DOMAIN, infer=_infer_add_bias, fold=_fold_add_bias,
               patterns=(_expand_add_bias,), gradient=_add_bias_gradient))
register(OpDef("ShapedDropout", domain=GRAPHCORE_DOMAIN, infer=_infer_shaped_dropout,
               random=True))
register(OpDef("Bucketize", domain=GRAPHCORE_DOMAIN, infer=_infer_bucketize,
               fold=_fold_bucketize))
register(OpDef("ReduceMedian", domain=GRAPHCORE_DOMAIN, infer=_infer_reduce_median,
               fold=_fold_reduce_median, reduces_input=True))
register(OpDef("Abort", domain=GRAPHCORE_DOMAIN, infer=_infer_abort, side_effects=True))
