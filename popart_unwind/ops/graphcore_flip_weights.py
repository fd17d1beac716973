"""Op family: PopART's ai.graphcore ConvFlipWeights — a convolution's weights rearranged into
the weights of its data gradient (the convolution that runs dY back to dX), as PopART's
ConvDataGrad and ConvTranspose patterns insert it before a Conv.

Its weights ``W`` (at least 3-D, ``[G * A, B, k...]``) are read as ``G`` groups of ``[A, B,
k...]``; each group's two channel axes are swapped and every spatial axis reversed, giving
``[G, B, A, k...]``, which is then laid out row-major in the result's shape: ``[G * B, A,
k...]`` with ``groupReshape`` (what PopART's patterns set), else ``[B, G * A, k...]`` (the
shape PopART's ``setup`` gives without it; for one group the two agree). That is
``poplin::weightsTransposeChansFlipXY`` applied group by group, as PopART's Opx applies it.

Attributes: PopART's creator for a model reads none; ``groupReshape`` is the flag PopART
writes when it serialises the op (0 unless given, as PopART's constructor starts it). The
group count lives in PopART's op as convolution parameters its patterns copy from the
convolution, not as an attribute, so a model cannot state it there; here it is read from a
``group`` attribute (1 unless given), and ``A`` and ``B`` come from the weights' shape,
which matches PopART wherever its parameters agree with that shape (as the patterns make
them).

Its gradient is the inverse rearrangement, built from ONNX ops: dY read as ``[G, B, A,
k...]``, spatial axes reversed (Slices of step -1), channel axes swapped back, reshaped to
``W``'s shape. Layouts: a barrier (PopART's Opx creates new weights with Poplibs'
``createWeights`` and copies into them; the reversal is a copy no view rule states).
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import input_shape, small_constants
from popart_unwind.ops.gradient import GradientBuilder, gets_gradient, int64s, one, reshape
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register

_FLOATS = ("float16", "float32")


def _grouping(op: Op) -> tuple[int, bool]:
    """(groups, groupReshape), checked against the weights' shape."""
    shape = input_shape(op, 0)
    group = int(op.attributes.get("group", 1))
    regroup = int(op.attributes.get("groupReshape", 0))
    if regroup not in (0, 1):
        raise ShapeError(f"op {op.debug_name()}: groupReshape must be 0 or 1, got {regroup}")
    if len(shape) < 3 or group < 1 or shape[0] % group:
        raise ShapeError(f"op {op.debug_name()}: weights {shape} must be [G * A, B, k...] "
                         f"(at least 3-D) with axis 0 divisible by the group count {group}")
    if op.input(0).dtype not in _FLOATS:
        raise ShapeError(f"op {op.debug_name()}: weights of {op.input(0).dtype}; PopART's "
                         f"ConvFlipWeights takes float32 or float16")
    return group, bool(regroup)


def _infer(op: Op) -> InferredOutputs:
    group, regroup = _grouping(op)
    rows, cols, *kernel = input_shape(op, 0)
    per_group = rows // group
    first, second = (cols * group, per_group) if regroup else (cols, rows)
    return [(op.input(0).dtype, (first, second, *kernel))]


def _fold(op: Op, constants: Constants) -> FoldResult:
    """Each group's channel axes swapped and spatial axes reversed, then reshaped."""
    weights = constants[0]
    if not small_constants(weights):
        return None
    group, _ = _grouping(op)
    rows, cols, *kernel = weights.shape
    grouped = weights.reshape(group, rows // group, cols, *kernel)
    spatial = tuple(range(3, grouped.ndim))
    flipped = np.flip(np.swapaxes(grouped, 1, 2), axis=spatial) if spatial \
        else np.swapaxes(grouped, 1, 2)
    return [np.ascontiguousarray(flipped).reshape(op.output(0).shape)]


def _gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """The inverse rearrangement of dY (the op permutes elements, so its adjoint is the
    inverse permutation): ``[G, B, A, k...]``, spatial axes reversed, channels swapped back,
    reshaped to the weights' shape."""
    grad, weights = grads[0], op.input(0)
    if grad is None or not gets_gradient(weights):
        return [None]
    group, _ = _grouping(op)
    rows, cols, *kernel = weights.shape
    grouped = reshape(builder, grad, [group, cols, rows // group, *kernel])
    if kernel:
        spatial = list(range(3, 3 + len(kernel)))
        big = np.iinfo(np.int64).max
        grouped = one(builder, "Slice", [
            grouped, int64s(builder, [-1] * len(kernel)), int64s(builder, [-big] * len(kernel)),
            int64s(builder, spatial), int64s(builder, [-1] * len(kernel))])
    swapped = one(builder, "Transpose", [grouped],
                  {"perm": [0, 2, 1, *range(3, 3 + len(kernel))]})
    return [reshape(builder, swapped, list(weights.shape))]


register(OpDef("ConvFlipWeights", domain=GRAPHCORE_DOMAIN, infer=_infer, fold=_fold,
               gradient=_gradient))
