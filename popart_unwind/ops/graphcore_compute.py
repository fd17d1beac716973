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
Abort stops the program (when its optional condition holds) and has no result. Sort sorts
along ``axis`` (ascending unless ``descending``) and gives int32 indices; SequenceSlice copies
runs of outer rows from a source into a destination at offsets read at run time;
NormalizeImage pads an image's three channels to four after normalising them (Poplibs'
``normaliseImage``: shape rule only, its values not restated); Histogram counts its input in
``len(levels) + 1`` bins (shape rule only); TensorRemap passes its value into a new layout;
CopyVarUpdate writes a new value into a variable (a side effect) and gives the variable;
ScatterReduce reduces its src's elements into the output positions its index names along
``axis`` (folded for a sum from zeros only; no gradient rule here).

Layouts: PrintTensor copies its input (PopART's Opx clones and copies it), so layouts pass
through as a view's would while the result is new memory and PopART's creator search stops
at it; Zeros and ZerosLike fold to constants. AddBias is a barrier: PopART's AddBiasOpx
creates the bias with Poplibs' ``createBiases`` from the data's layout (the data must exist
first), which neither the baseline's creator search nor a rule of ours states yet; rewriting
it into a Reshape and an Add would lay the bias out linearly in PopART's baseline where
PopART itself does not, so it is left whole. ShapedDropout, Bucketize, ReduceMedian, Abort,
Sort, SequenceSlice, NormalizeImage, Histogram, TensorRemap (PopART picks its result's
layout from its readers), CopyVarUpdate and ScatterReduce are barriers too.

PackedDataBlock (``graphcore_packed.py``), ConvFlipWeights, GroupedGather and the float8
casts (CastThenPow2Scale, Pow2ScaleThenCast) have modules of their own.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX, numpy_dtype
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.memory import Chain
from popart_unwind.ops.common import input_shape, ints, normalize_axis, small_constants
from popart_unwind.ops.gradient import GradientBuilder, gets_gradient, int64s, one
from popart_unwind.ops.layout_rule import known_shape
from popart_unwind.ops.registry import (
    Constants,
    FoldResult,
    InferredOutputs,
    OpDef,
    register,
)
from popart_unwind.ops.views import CopiedViewRule, Step, ViewRule


# -- PrintTensor ------------------------------------------------------------------------------
class CopyRule(CopiedViewRule):
    """A copy of input 0 into new memory, read in row-major order (reshaped where the result's
    shape differs): layouts pass through as a view's would, each tile copies what it holds
    (the default ``work``: an elementwise vertex over its busiest tile). PopART's creator
    search stops at the op (its Opx is a Deadend), or, with ``unwinds``, passes through it
    unchanged (its Opx is CanUnwind, its unwound layout the input's)."""

    def __init__(self, unwinds: bool = False) -> None:
        self.unwinds = unwinds

    def steps(self, op: Op, out_index: int) -> list[Step]:
        out = known_shape(op, op.output(out_index))
        return [] if out == known_shape(op, op.input(0)) else [("reshape", out)]

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        return (ViewRule.popart_view(self, op, in_index, out_index) if self.unwinds
                else super().popart_view(op, in_index, out_index))

    def popart_output_views(self, op: Op) -> dict[int, dict[int, Chain | None]]:
        return (ViewRule.popart_output_views(self, op) if self.unwinds
                else super().popart_output_views(op))


#: A copy PopART's creator search stops at (PrintTensorOpx keeps Opx's Deadend).
COPY = CopyRule()
#: A copy PopART's creator search passes through (ReplicatedAllReduceOpx is CanUnwind).
UNWINDING_COPY = CopyRule(unwinds=True)


def _infer_like_input(op: Op) -> InferredOutputs:
    return [(op.input(0).dtype, input_shape(op, 0))]


def _fold_passed(op: Op, constants: Constants) -> FoldResult:
    """The input's value (what reads the result sees; the op itself, having an effect, is
    never folded away)."""
    return None if constants[0] is None else [constants[0]]


def _passed_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY itself: PopART's PrintTensor gradient is a PrintTensor of dY (printing it only
    when ``print_gradient`` is set), TensorRemap's a TensorRemap of dY; each passes the
    value on unchanged."""
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


# -- Sort -------------------------------------------------------------------------------------
def _sort_axis(op: Op, rank: int) -> int:
    return normalize_axis(op, int(op.attributes.get("axis", -1)), max(rank, 1))


def _infer_sort(op: Op) -> InferredOutputs:
    """Values sorted along ``axis`` and their int32 indices (PopART's SortOp is a TopK of the
    whole axis, whose indices are int32)."""
    shape = input_shape(op, 0)
    _sort_axis(op, len(shape))
    return [(op.input(0).dtype, shape), ("int32", shape)]


def _fold_sort(op: Op, constants: Constants) -> FoldResult:
    """Ascending, or with ``descending`` descending; equal values in index order (what
    ``stable`` asks; without it PopART's order among equal values is not stated here)."""
    x = constants[0]
    if not small_constants(x) or x.ndim == 0:
        return None
    axis = _sort_axis(op, x.ndim)
    keys = x.astype(np.float64)
    if int(op.attributes.get("descending", 0)):
        keys = -keys
    order = np.argsort(keys, axis=axis, kind="stable")
    results = [np.take_along_axis(x, order, axis=axis), order.astype(np.int32)]
    return [results[i] for i in op.output_map()]


# -- SequenceSlice ----------------------------------------------------------------------------
def _infer_sequence_slice(op: Op) -> InferredOutputs:
    """[source, destination, N, source offsets, destination offsets]: the destination's
    type; both at least 2-D with the same elements per outer row, the three counts 1-D of
    one length."""
    source, destination = input_shape(op, 0), input_shape(op, 1)
    counts = [input_shape(op, i) for i in (2, 3, 4)]
    if len(source) < 2 or len(destination) < 2 or math.prod(source[1:]) != math.prod(
            destination[1:]) or any(len(c) != 1 or c != counts[0] for c in counts):
        raise ShapeError(f"op {op.debug_name()}: source {source} and destination "
                         f"{destination} must be at least 2-D with equal rows, and N and the "
                         f"offsets 1-D of one length, got {counts}")
    return [(op.input(1).dtype, destination)]


def _fold_sequence_slice(op: Op, constants: Constants) -> FoldResult:
    """Row runs copied from the source into the destination: for each i until the first
    N[i] of 0, rows ``[src_off[i], src_off[i] + N[i])`` to ``[dst_off[i], ...)``; the rows no
    run writes zeroed with ``zeroUnused``, else the destination's."""
    if not small_constants(*constants[:5]):
        return None
    source, destination, counts, from_, to = constants[:5]
    rows = source.reshape(source.shape[0], -1)
    out = destination.reshape(destination.shape[0], -1).copy()
    written = np.zeros(out.shape[0], bool)
    for n, start, at in zip(counts.tolist(), from_.tolist(), to.tolist(), strict=True):
        if n == 0:
            break
        if start < 0 or at < 0 or start + n > rows.shape[0] or at + n > out.shape[0]:
            return None  # a run outside the tensors: PopART's result is not stated
        out[at:at + n] = rows[start:start + n]
        written[at:at + n] = True
    if int(op.attributes.get("zeroUnused", 0)):
        out[~written] = 0
    return [out.reshape(destination.shape)]


def _no_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """None for every input: PopART's SequenceSliceOp makes no gradient ops, so no gradient
    flows through it."""
    return [None] * (max(op.input_map(), default=-1) + 1)


# -- NormalizeImage, Histogram ----------------------------------------------------------------
def _infer_normalize_image(op: Op) -> InferredOutputs:
    """An image [..., 3] padded to four channels [..., 4] (Poplibs' ``normaliseImage``);
    uint8 pixels give float16."""
    shape = input_shape(op, 0)
    if len(shape) < 2 or shape[-1] != 3 or any(input_shape(op, i) != (3,) for i in (1, 2)):
        raise ShapeError(f"op {op.debug_name()}: needs an image [..., 3] and offsets and "
                         f"scales of 3 values, got {shape}, {input_shape(op, 1)}, "
                         f"{input_shape(op, 2)}")
    if abs(float(op.attributes.get("scale", 1.0))) < np.finfo(np.float32).eps:
        raise ShapeError(f"op {op.debug_name()}: scale must not be 0")
    dtype = op.input(0).dtype
    return [("float16" if dtype == "uint8" else dtype, (*shape[:-1], 4))]


def _infer_histogram(op: Op) -> InferredOutputs:
    """uint32 counts in ``len(levels) + 1`` bins (PopART's HistogramOp)."""
    input_shape(op, 0)
    if op.input(0).dtype not in ("float32", "float16"):
        raise ShapeError(f"op {op.debug_name()}: reads float32 or float16, got "
                         f"{op.input(0).dtype}")
    return [("uint32", (len(op.attributes.get("levels", [])) + 1,))]


# -- ScatterReduce ----------------------------------------------------------------------------
_SCATTER_REDUCTIONS = ("sum", "max", "min", "mul", "none")


def _scatter_reduce(op: Op) -> tuple[int, str]:
    """(axis, reduction) of a ScatterReduce over its data of ``rank``."""
    rank = len(input_shape(op, 0))
    axis = normalize_axis(op, int(op.attributes.get("axis", -1)), max(rank, 1))
    reduction = op.attributes.get("reduction", "sum")
    reduction = (reduction.decode() if isinstance(reduction, bytes) else reduction).lower()
    if reduction not in _SCATTER_REDUCTIONS:
        raise ShapeError(f"op {op.debug_name()}: reduction {reduction!r} is not one of "
                         f"{_SCATTER_REDUCTIONS}")
    if int(op.attributes.get("group_size", 1)) != 1:
        raise ShapeError(f"op {op.debug_name()}: group_size "
                         f"{op.attributes.get('group_size')} is not modelled")
    return axis, reduction


def _infer_scatter_reduce(op: Op) -> InferredOutputs:
    """[src, index, optional initial values]: src's shape with ``axis_size`` along ``axis``,
    or the initial values' type; the index of src's shape, or broadcast to it along axes
    where it has 1 (PopART allows an [N, 1] index for [N, M] data)."""
    data, index = input_shape(op, 0), input_shape(op, 1)
    axis, _ = _scatter_reduce(op)
    if len(index) != len(data) or any(i not in (d, 1) for i, d in zip(index, data,
                                                                        strict=True)):
        raise ShapeError(f"op {op.debug_name()}: index {index} does not broadcast to the "
                         f"data {data}")
    if op.has_input(2):
        initial = input_shape(op, 2)
        if len(initial) != len(data) or any(
                n != d for a, (n, d) in enumerate(zip(initial, data, strict=True))
                if a != axis):
            raise ShapeError(f"op {op.debug_name()}: initial values {initial} do not match "
                             f"the data {data} off axis {axis}")
        return [(op.input(2).dtype, initial)]
    size = int(op.attributes.get("axis_size", -1))
    if size < 0:
        raise ShapeError(f"op {op.debug_name()} needs a non-negative 'axis_size'")
    out = list(data)
    out[axis] = size
    return [(op.input(0).dtype, tuple(out))]


def _fold_scatter_reduce(op: Op, constants: Constants) -> FoldResult:
    """A sum without initial values: each output element the sum of the src elements whose
    index names it (0 where none does). The other reductions and initial values are not
    folded: what PopART starts them from is not restated here."""
    src, index = constants[0], constants[1]
    axis, reduction = _scatter_reduce(op)
    if reduction != "sum" or op.has_input(2) or not small_constants(src, index):
        return None
    index = np.broadcast_to(index, src.shape).astype(np.int64)
    out_shape = op.output(0).shape
    if np.any((index < 0) | (index >= out_shape[axis])):
        return None
    out = np.zeros(out_shape, src.dtype)
    positions = list(np.indices(src.shape))
    positions[axis] = index
    np.add.at(out, tuple(positions), src)
    return [out]


# -- TensorRemap, CopyVarUpdate ---------------------------------------------------------------
def _infer_copy_var_update(op: Op) -> InferredOutputs:
    """[variable, new value]: the variable, now holding the new value."""
    if (op.input(0).dtype, input_shape(op, 0)) != (op.input(1).dtype, input_shape(op, 1)):
        raise ShapeError(f"op {op.debug_name()}: the new value {input_shape(op, 1)} "
                         f"({op.input(1).dtype}) is not of the variable's type "
                         f"{input_shape(op, 0)} ({op.input(0).dtype})")
    return [(op.input(0).dtype, input_shape(op, 0))]


def _fold_copy_var_update(op: Op, constants: Constants) -> FoldResult:
    return None if constants[1] is None else [constants[1]]


register(OpDef("PrintTensor", domain=GRAPHCORE_DOMAIN, infer=_infer_like_input,
               fold=_fold_passed, side_effects=True, keeps_input_layout=True, layout=COPY,
               gradient=_passed_gradient))
register(OpDef("Zeros", domain=GRAPHCORE_DOMAIN, infer=_infer_zeros, fold=_fold_zeros))
register(OpDef("ZerosLike", domain=GRAPHCORE_DOMAIN, infer=_infer_like_input,
               fold=_fold_zeros, gradient=lambda builder, op, grads: [None]))
register(OpDef("AddBias", domain=GRAPHCORE_DOMAIN, infer=_infer_add_bias, fold=_fold_add_bias,
               gradient=_add_bias_gradient))
register(OpDef("ShapedDropout", domain=GRAPHCORE_DOMAIN, infer=_infer_shaped_dropout,
               random=True))
register(OpDef("Bucketize", domain=GRAPHCORE_DOMAIN, infer=_infer_bucketize,
               fold=_fold_bucketize))
register(OpDef("ReduceMedian", domain=GRAPHCORE_DOMAIN, infer=_infer_reduce_median,
               fold=_fold_reduce_median, reduces_input=True))
register(OpDef("Abort", domain=GRAPHCORE_DOMAIN, infer=_infer_abort, side_effects=True))
register(OpDef("Sort", domain=GRAPHCORE_DOMAIN, infer=_infer_sort, fold=_fold_sort))
register(OpDef("ScatterReduce", domain=GRAPHCORE_DOMAIN, infer=_infer_scatter_reduce,
               fold=_fold_scatter_reduce))
register(OpDef("SequenceSlice", domain=GRAPHCORE_DOMAIN, infer=_infer_sequence_slice,
               fold=_fold_sequence_slice, gradient=_no_gradient))
register(OpDef("NormalizeImage", domain=GRAPHCORE_DOMAIN, infer=_infer_normalize_image))
register(OpDef("Histogram", domain=GRAPHCORE_DOMAIN, infer=_infer_histogram))
# TensorRemap passes its value on into a new layout PopART picks for its readers: the value
# is the identity (and so its gradient), the layout is not modelled (a barrier).
register(OpDef("TensorRemap", domain=GRAPHCORE_DOMAIN, infer=_infer_like_input,
               fold=_fold_passed, gradient=_passed_gradient))
register(OpDef("CopyVarUpdate", domain=GRAPHCORE_DOMAIN, infer=_infer_copy_var_update,
               fold=_fold_copy_var_update, side_effects=True))

