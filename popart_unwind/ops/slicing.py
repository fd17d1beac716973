"""Op family: views of parts of tensors — Slice (a box, every |step|-th element, reversed where
steps are negative), Split (slabs along one axis) and Concat (slabs joined), with ONNX
semantics and clamping (and PopART's ai.graphcore Slice, its starts, ends and axes
attributes as ONNX's Slice-1 has them). Each OpDef states its shape rule, its fold and its
layout rule; the layout rules are element maps like the other views' (``ops/views.py``),
Concat's input i being the slab ``input_slab(op, i)`` of its output.

Operands not known before running (a graph input's values): a Split's sizes are read off
its outputs' shapes, which is all its element map needs; a Slice's starts, ends, axes and
steps place its box, which no shape says, so the model is refused naming the graph inputs,
as PopART refuses it when it builds its IR (docs/planner.md, "Operands whose values a
layout needs").
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import PlanError, ShapeError, ShapeUndecided
from popart_unwind.ir.dtypes import numpy_dtype
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.interface import TileMachine
from popart_unwind.memory import Chain, DisjointRegions, sett_bounded
from popart_unwind.ops.common import (
    computed_value,
    constant_input,
    input_shape,
    ints,
    normalize_axis,
    operands_constant,
    unchanged,
)
from popart_unwind.ops.gradient import GradientBuilder, gets_gradient, int64s, one, zeros
from popart_unwind.ops.layout_rule import InputTiles, LayoutRule, UnwindEmitter, known_shape
from popart_unwind.ops.registry import Constants, InferredOutputs, OpDef, register
from popart_unwind.ops.views import Step, ViewRule, flat_layout, input_layout
from popart_unwind.unwind.ops import concat_slab
from popart_unwind.validation import Shape


# -- Slice ----------------------------------------------------------------------------------
def slice_plan(op: Op, in_shape: Shape) -> list[tuple[int, int, int, int]]:
    """Per input axis (start, end, step, size) after ONNX's clamping; ``end`` may be -1 for a
    negative step that runs down to index 0 inclusive."""
    if op.type.version < 10:
        starts, ends = ints(op.attributes["starts"]), ints(op.attributes["ends"])
        axes = op.attributes.get("axes")
        axes = list(range(len(starts))) if axes is None else ints(axes)
        steps = [1] * len(starts)
    else:
        starts = ints(constant_input(op, 1, "starts"))
        ends = ints(constant_input(op, 2, "ends"))
        axes = (ints(constant_input(op, 3, "axes")) if op.has_input(3)
                else list(range(len(starts))))
        steps = ints(constant_input(op, 4, "steps")) if op.has_input(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"op {op.debug_name()}: starts, ends, axes and steps differ in length")
    plan = [(0, d, 1, d) for d in in_shape]
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = normalize_axis(op, axis, len(in_shape))
        if axis in seen or step == 0:
            raise ShapeError(f"op {op.debug_name()}: repeated axis or zero step on axis {axis}")
        seen.add(axis)
        plan[axis] = _clamp_slice(in_shape[axis], start, end, step)
    return plan


def _clamp_slice(dim: int, start: int, end: int, step: int) -> tuple[int, int, int, int]:
    start += dim if start < 0 else 0
    end += dim if end < 0 else 0
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return start, end, step, max(0, -(-(end - start) // step))
    if dim == 0:
        return 0, 0, 1, 0
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, end, step, max(0, -(-(start - end) // -step))


def _infer_slice(op: Op) -> InferredOutputs:
    plan = slice_plan(op, input_shape(op, 0))
    return [(op.input(0).dtype, tuple(size for *_, size in plan))]


def _fold_slice(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    source = op.input(0)
    if source.shape is None or not operands_constant(op, constants):
        return None
    plan = slice_plan(op, source.shape)
    if constants[0] is not None:
        index = tuple(slice(start, end if end >= 0 else None, step)
                      for start, end, step, _ in plan)
        return [constants[0][index].copy()]
    if all(size == dim and (step == 1 or dim <= 1)
           for (_, _, step, size), dim in zip(plan, source.shape, strict=True)):
        return unchanged(op, source)
    return None


# -- Concat, Split ------------------------------------------------------------------------
def _infer_concat(op: Op) -> InferredOutputs:
    shapes = [input_shape(op, i) for i in op.input_map()]
    if not shapes:
        raise ShapeError(f"op {op.debug_name()} needs at least one input")
    if "axis" not in op.attributes:
        raise ShapeError(f"op {op.debug_name()} needs an 'axis' attribute")
    axis = normalize_axis(op, int(op.attributes["axis"]), len(shapes[0]))
    for shape in shapes[1:]:
        if len(shape) != len(shapes[0]) or any(
                a != b for k, (a, b) in enumerate(zip(shape, shapes[0], strict=True))
                if k != axis):
            raise ShapeError(f"op {op.debug_name()}: cannot concatenate {shapes} on axis "
                             f"{axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(op.input(0).dtype, tuple(out))]


def _fold_concat(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    inputs = op.inputs
    if len(constants) == len(inputs) and all(c is not None for c in constants):
        [(dtype, _)] = _infer_concat(op)
        axis = int(op.attributes["axis"])
        return [np.concatenate(list(constants), axis=axis).astype(numpy_dtype(dtype))]
    filled = [t for t in inputs if t.shape is None or prod(t.shape) > 0]
    return unchanged(op, filled[0]) if len(filled) == 1 else None


def num_outputs_sizes(dim: int, count: int) -> list[int]:
    """Split's ``num_outputs`` parts of an axis of ``dim``: ``ceil(dim / count)`` elements
    each, cut in order, so the last part is shorter. When too few elements remain for the
    last parts (5 into 4: 2, 2, 1, 0), each part keeps what is left of the axis, as ONNX's
    reference implementation slices it, rather than a negative size: such a Split sits in a
    branch that never runs on these shapes (AffineGrid's expansion splits a 5-d size into
    4 in its 2-d branch)."""
    chunk = -(-dim // count) if count > 0 else 0
    return [min(chunk, max(dim - chunk * part, 0)) for part in range(count)]


def split_sizes(op: Op, in_shape: Shape) -> tuple[int, list[int]]:
    """The split axis and the size of each output along it."""
    axis = normalize_axis(op, int(op.attributes.get("axis", 0)), len(in_shape))
    dim, count = in_shape[axis], len(op.output_map())
    if op.type.version >= 13 and op.has_input(1):
        sizes = ints(constant_input(op, 1, "split"))
    elif op.type.version < 13 and "split" in op.attributes:
        sizes = ints(op.attributes["split"])
    elif op.type.version >= 18 and "num_outputs" in op.attributes:
        count = int(op.attributes["num_outputs"])
        sizes = num_outputs_sizes(dim, count)
    elif count and dim % count == 0:
        sizes = [dim // count] * count
    else:
        raise ShapeError(f"op {op.debug_name()}: cannot split {dim} evenly into {count}")
    if len(sizes) != len(op.output_map()) or sum(sizes) != dim or min(sizes, default=0) < 0:
        raise ShapeError(f"op {op.debug_name()}: split {sizes} does not cut axis {axis} "
                         f"of {in_shape} into {count} outputs")
    return axis, sizes


def layout_split_sizes(op: Op, in_shape: Shape) -> tuple[int, list[int]]:
    """``split_sizes``, or, where the sizes input is not known before running, the sizes
    the outputs' shapes state (each output's extent along the axis, the model's or ONNX's
    inference's): a Split's element map needs no more. ShapeUndecided when neither gives
    them."""
    try:
        return split_sizes(op, in_shape)
    except ShapeUndecided:
        axis = normalize_axis(op, int(op.attributes.get("axis", 0)), len(in_shape))
        outputs = op.output_map()
        shapes = [outputs[i].shape if i in outputs else None for i in range(len(outputs))]
        if any(shape is None or len(shape) != len(in_shape)
               or shape[:axis] + shape[axis + 1:] != in_shape[:axis] + in_shape[axis + 1:]
               for shape in shapes) or sum(shape[axis] for shape in shapes) != in_shape[axis]:
            raise
        return axis, [shape[axis] for shape in shapes]


def _infer_split(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    axis, sizes = split_sizes(op, shape)
    return [(op.input(0).dtype, (*shape[:axis], size, *shape[axis + 1:])) for size in sizes]


def _fold_split(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    if any(c is None for c in constants):
        return unchanged(op, op.input(0)) if len(op.output_map()) == 1 else None
    axis, sizes = split_sizes(op, constants[0].shape)
    return [part.copy() for part in np.split(constants[0], np.cumsum(sizes)[:-1], axis=axis)]



def is_slice(op: Op) -> bool:
    """Whether ``op`` is a Slice."""
    return op.is_type("Slice")


# -- gradients ------------------------------------------------------------------------------
def _slice_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY put back where the box lay in x, zeros elsewhere (PopART's SliceGradOp, a pad).
    With unit steps (axes of one element or none count as such) that is a Pad, axes of
    step -1 reversed first by a Slice of step -1; with other steps a ScatterND of dY into
    zeros of x's shape, at the indices the box reads. Starts, ends and axes are read as
    the shape rule reads them (``slice_plan``: negative, clamped); they get no gradient."""
    grad, x = grads[0], op.input(0)
    if grad is None or not gets_gradient(x):
        return [None]
    plan = slice_plan(op, x.shape)
    if any(abs(step) != 1 and size > 1 for *_, step, size in plan):
        box = np.indices([size for *_, size in plan], dtype=np.int64)
        where = np.stack([start + box[axis] * step
                          for axis, (start, _, step, _) in enumerate(plan)], axis=-1)
        return [one(builder, "ScatterND", [zeros(builder, x.shape, grad),
                                           builder.constant(where, "int64"), grad])]
    flipped = [axis for axis, (*_, step, size) in enumerate(plan) if step < 0 and size > 1]
    if flipped:
        grad = one(builder, "Slice", [grad, int64s(builder, [-1] * len(flipped)),
                                      int64s(builder, [-plan[a][3] - 1 for a in flipped]),
                                      int64s(builder, flipped),
                                      int64s(builder, [-1] * len(flipped))])
    lower = [0 if size == 0 else start if step > 0 else start - (size - 1)
             for start, _, step, size in plan]
    upper = [dim - low - size for dim, low, (*_, size) in zip(x.shape, lower, plan, strict=True)]
    if not any(lower) and not any(upper):
        return [grad]
    return [one(builder, "Pad", [grad, int64s(builder, lower + upper)])]


def _split_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """The outputs' gradients joined along the split axis, zeros for an output that has
    none (PopART's SplitGradOp, a concat)."""
    x = op.input(0)
    if all(g is None for g in grads) or not gets_gradient(x):
        return [None]
    axis = normalize_axis(op, int(op.attributes.get("axis", 0)), len(x.shape))
    parts = [grad if grad is not None else zeros(builder, out.shape, x)
             for grad, out in zip(grads, op.outputs, strict=True)]
    return [one(builder, "Concat", parts, {"axis": axis}) if len(parts) > 1 else parts[0]]


def _concat_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """Each input's slab of dY along the axis (PopART's ConcatGradOp, a slice)."""
    grad = grads[0]
    if grad is None:
        return [None] * len(op.inputs)
    axis = normalize_axis(op, int(op.attributes["axis"]), len(grad.shape))
    found: list[Tensor | None] = []
    begin = 0
    for tensor in op.inputs:
        end = begin + tensor.shape[axis]
        whole = begin == 0 and end == grad.shape[axis]
        found.append(None if not gets_gradient(tensor) else grad if whole else one(
            builder, "Slice", [grad, int64s(builder, [begin]), int64s(builder, [end]),
                               int64s(builder, [axis])]))
        begin = end
    return found


# -- layouts ----------------------------------------------------------------------------
class SliceRule(ViewRule):
    """A box of the input, every |step|-th element, reversed on axes with negative steps.

    From opset 10 starts, ends, axes and steps are inputs, and the element map needs their
    values: the output's shape gives the box's size, not where it lies. PopART reads them
    when it builds its IR (and refuses the model where it cannot), so a Slice whose
    operands are not known before running is refused, naming the graph inputs they come
    from (``undecided_operands``)."""

    def undecided_operands(self, op: Op) -> list[int]:
        if op.type.version < 10:
            return []
        return [i for i in (1, 2, 3, 4)
                if op.has_input(i) and computed_value(op.input(i)) is None]

    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = known_shape(op, op.input(0))
        lower, upper, strides, reverse = [], [], [], []
        for axis, (start, _end, step, size) in enumerate(slice_plan(op, shape)):
            if size == 0:
                lower.append(0)
                upper.append(0)
            elif step > 0:
                lower.append(start)
                upper.append(start + (size - 1) * step + 1)
            else:
                lower.append(start + (size - 1) * step)
                upper.append(start + 1)
                if size > 1:
                    reverse.append(axis)
            strides.append(abs(step) if size > 1 else 1)
        steps: list[Step] = []
        if lower != [0] * len(shape) or upper != list(shape):
            steps.append(("slice", tuple(lower), tuple(upper)))
        if any(s > 1 for s in strides):
            steps.append(("sub_sample", tuple(strides)))
        if reverse:
            steps.append(("reverse", tuple(reverse)))
        return steps


class SplitRule(ViewRule):
    """Output j is the slab of the input between the sizes before it and its own end.
    Sizes given by an input not known before running are read off the outputs' shapes
    (``layout_split_sizes``)."""

    def undecided_operands(self, op: Op) -> list[int]:
        """The sizes input, where neither its value nor the outputs' shapes give them."""
        shape = op.input(0).shape
        if shape is None:
            return []
        try:
            layout_split_sizes(op, shape)
        except ShapeUndecided:
            return [1]
        return []

    def steps(self, op: Op, out_index: int) -> list[Step]:
        return self.all_steps(op)[out_index]

    def all_steps(self, op: Op) -> dict[int, list[Step]]:
        """Every output's slab from one reading of the sizes (asking per output would
        read all k sizes k times)."""
        shape = known_shape(op, op.input(0))
        axis, sizes = layout_split_sizes(op, shape)
        steps: dict[int, list[Step]] = {}
        begin = 0
        for out_index, size in zip(sorted(op.output_map()), sizes, strict=True):
            lower, upper = [0] * len(shape), list(shape)
            lower[axis], upper[axis] = begin, begin + size
            whole = lower == [0] * len(shape) and upper == list(shape)
            steps[out_index] = [] if whole else [("slice", tuple(lower), tuple(upper))]
            begin += size
        return steps

    def popart_output_finder(self, op: Op, in_index: int
                             ) -> Callable[[DisjointRegions], list[int]]:
        """The outputs whose slab along the split axis meets the span ``reach`` covers on
        that axis, found by bisection (the slabs are consecutive, in output order)."""
        if in_index != 0:
            return lambda reach: []  # the sizes: no output views them
        shape = known_shape(op, op.input(0))
        axis, sizes = layout_split_sizes(op, shape)
        ends = list(itertools.accumulate(sizes))
        outputs = sorted(op.output_map())

        def reached(reach: DisjointRegions) -> list[int]:
            spans = [span for span in (_span(region.setts[axis], shape[axis])
                                       for region in reach.regions) if span is not None]
            if not spans:
                return []
            low, high = min(s[0] for s in spans), max(s[1] for s in spans)
            first = bisect.bisect_right(ends, low)  # the first slab ending after low
            last = min(bisect.bisect_right(ends, high), len(outputs) - 1)  # holding high
            return [outputs[p] for p in range(first, last + 1) if sizes[p]]

        return reached


def _span(dims: Any, size: int) -> tuple[int, int] | None:
    """The first and last index one axis of a region holds on ``[0, size)``; None if none."""
    on = sett_bounded.ons(dims, size)
    return (int(on[0]), int(on[-1])) if on.size else None


class ConcatRule(LayoutRule):
    """Concat: input i is the slab ``input_slab(op, i)`` of the output (a Poplar view)."""

    kind = "view"

    def _axis(self, op: Op) -> int:
        rank = len(known_shape(op, op.output(0)))
        axis = int(op.attributes.get("axis", 0))
        if not -rank <= axis < rank:
            raise PlanError(f"op {op.debug_name()}: axis {axis} is out of range for rank "
                            f"{rank}")
        return axis % rank

    def input_slabs(self, op: Op) -> list[tuple[int, int, int]]:
        """(axis, begin, end) of every input along the output's axis, in input order: one
        pass over the inputs, so a Concat of k inputs costs k, not k²."""
        axis = self._axis(op)
        slabs, begin = [], 0
        for tensor in op.inputs:  # Concat's inputs are 0 .. k-1, none optional
            end = begin + known_shape(op, tensor)[axis]  # raises on an unknown shape, naming it
            slabs.append((axis, begin, end))
            begin = end
        return slabs

    def input_slab(self, op: Op, in_index: int) -> tuple[int, int, int]:
        """(axis, begin, end): where input ``in_index`` lies along the output's axis."""
        if not 0 <= in_index < len(op.inputs):
            raise PlanError(f"op {op.debug_name()} has no input {in_index}")
        return self.input_slabs(op)[in_index]

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        inputs = [emitter.tensor(t) for t in op.inputs]
        out = op.output(0)
        emitter.define(out, emitter.graph.concat(inputs, self._axis(op), name=out.id))

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        parts = [np.asarray(input_layout(op, input_tiles, i)).reshape(known_shape(op, t))
                 for i, t in op.input_map().items()]
        return [flat_layout(np.concatenate(parts, axis=self._axis(op)))]

    def aliases_outputs(self, op: Op) -> bool:
        return True

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """Input ``in_index`` is its slab of the output (``ConcatOpx::unwindTensorLayout``)."""
        if out_index != 0 or not op.has_input(in_index):
            return None
        return self._slab_chain(op, self.input_slab(op, in_index), in_index)

    def popart_views(self, op: Op, out_index: int) -> dict[int, Chain | None]:
        """Every input's slab, the offsets summed once."""
        if out_index != 0:
            return dict.fromkeys(op.input_map())
        return {index: self._slab_chain(op, slab, index)
                for index, slab in zip(op.input_map(), self.input_slabs(op), strict=True)}

    def _slab_chain(self, op: Op, slab: tuple[int, int, int], in_index: int) -> Chain:
        axis, begin, end = slab
        out_shape = known_shape(op, op.output(0))
        return Chain(known_shape(op, op.input(in_index))).sett_fill_into(
            concat_slab(out_shape, axis, begin, end - begin))


register(OpDef("Slice", infer=_infer_slice, fold=_fold_slice, layout=SliceRule(),
               gradient=_slice_gradient))
# PopART's ai.graphcore Slice: starts, ends and axes as attributes, as ONNX's Slice-1 takes
# them (its version, 1, is below 10).
register(OpDef("Slice", domain=GRAPHCORE_DOMAIN, infer=_infer_slice, fold=_fold_slice,
               layout=SliceRule(), gradient=_slice_gradient))
register(OpDef("Concat", infer=_infer_concat, fold=_fold_concat, layout=ConcatRule(),
               gradient=_concat_gradient))
register(OpDef("Split", infer=_infer_split, fold=_fold_split, layout=SplitRule(),
               gradient=_split_gradient))
