"""Op family: views — ops that only move or select elements (ONNX semantics).

Reshape, Flatten, Squeeze and Unsqueeze are row-major reshapes; Transpose permutes axes;
Slice, Concat, Expand, Split and Identity select, join, broadcast or pass elements on.
Each OpDef states its shape rule, its fold (numpy on constant inputs, or the input itself
when the view changes nothing), its canonicalization patterns and its layout rule.

In Poplar these ops make views: no data moves, each output element *is* an input element.
So a view's layout rule is an element map, written once as a list of steps (reshape,
dim_shuffle, slice, sub_sample, reverse, expand). The same steps build the ``memory.Chain``
of ``view_chain`` (applied to tile arrays by ``output_tiles``, and followed by PopART's
creator search) and the unwinding Graph's view ops of ``unwind``, so the two can never
disagree. Views need no exchange and carry no ValuedPairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import PlanError, ShapeError
from popart_unwind.ir.dtypes import numpy_dtype
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.interface import TileMachine
from popart_unwind.memory import Chain
from popart_unwind.ops.common import constant_input, input_shape, ints, normalize_axis
from popart_unwind.ops.layout_rule import InputTiles, LayoutRule, UnwindEmitter, known_shape
from popart_unwind.ops.registry import Constants, InferredOutputs, OpDef, register
from popart_unwind.rewrite import Rewriter, pattern
from popart_unwind.shapes import broadcast_shapes
from popart_unwind.unwind import Graph, TensorId
from popart_unwind.unwind.ops import concat_slab
from popart_unwind.validation import Shape

#: One step of an element map: (name, *arguments), names as the unwind Graph's methods.
Step = tuple[Any, ...]

#: Ops that reorder no elements: their output is the input read in row-major order.
RESHAPE_LIKE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


# -- shared helpers -------------------------------------------------------------------------
def _axes_operand(op: Op, index: int, attribute: str, since: int) -> list[int] | None:
    """Axes given as an attribute before opset ``since`` and as a constant input after."""
    if op.type.version < since:
        axes = op.attributes.get(attribute)
        return None if axes is None else ints(axes)
    if not op.has_input(index):
        return None
    return ints(constant_input(op, index, attribute))


def _output_type(op: Op) -> tuple[str, Shape] | None:
    """Output 0's (dtype, shape) if inference has set it."""
    out = op.output(0)
    return None if out.shape is None else (out.dtype, out.shape)


def _passthrough(op: Op, source: Tensor) -> list[Tensor] | None:
    """``[source]`` when output 0 is exactly ``source`` in dtype and shape (a no-op view)."""
    typed = _output_type(op)
    if typed is None or typed != (source.dtype, source.shape):
        return None
    return [source]


def _same_dtype(op: Op) -> str:
    return op.input(0).dtype


def _operands_constant(op: Op, constants: Constants) -> bool:
    """Every input after the data (shapes, axes, starts...) is present only as a constant."""
    return all(constants[i] is not None for i in op.input_map() if i > 0)


# -- Reshape, Flatten, Squeeze, Unsqueeze ---------------------------------------------------
def reshape_target(op: Op) -> list[int]:
    if op.type.version < 5:
        if "shape" not in op.attributes:
            raise ShapeError(f"op {op.debug_name()} needs a 'shape' attribute")
        return ints(op.attributes["shape"])
    return ints(constant_input(op, 1, "the target shape"))


def reshape_shape(op: Op, in_shape: Shape, target: Sequence[int]) -> Shape:
    """ONNX Reshape: 0 copies the input's dim (unless allowzero), -1 takes what is left."""
    allowzero = op.type.version >= 14 and bool(op.attributes.get("allowzero", 0))
    dims, unknown = [], None
    for index, dim in enumerate(target):
        if dim == -1 and unknown is None:
            unknown = index
            dims.append(1)
        elif dim == 0 and not allowzero:
            if index >= len(in_shape):
                raise ShapeError(f"op {op.debug_name()}: target dim {index} is 0 (copy) but "
                                 f"the input {in_shape} has no dim {index}")
            dims.append(in_shape[index])
        elif dim < 0:
            raise ShapeError(f"op {op.debug_name()}: bad target shape {list(target)}")
        else:
            dims.append(dim)
    total = prod(in_shape)
    if unknown is not None:
        known = prod(dims)
        if known == 0 or total % known:
            raise ShapeError(f"op {op.debug_name()}: cannot infer -1 in {list(target)} "
                             f"for input {in_shape}")
        dims[unknown] = total // known
    if prod(dims) != total:
        raise ShapeError(f"op {op.debug_name()}: cannot reshape {in_shape} "
                         f"({total} elements) to {list(target)}")
    return tuple(dims)


def _infer_reshape(op: Op) -> InferredOutputs:
    return [(_same_dtype(op), reshape_shape(op, input_shape(op, 0), reshape_target(op)))]


def flatten_shape(op: Op, in_shape: Shape) -> Shape:
    axis = int(op.attributes.get("axis", 1))
    if not -len(in_shape) <= axis <= len(in_shape):
        raise ShapeError(f"op {op.debug_name()}: axis {axis} out of range for {in_shape}")
    axis %= len(in_shape) + 1
    return prod(in_shape[:axis]), prod(in_shape[axis:])


def _infer_flatten(op: Op) -> InferredOutputs:
    return [(_same_dtype(op), flatten_shape(op, input_shape(op, 0)))]


def squeeze_shape(op: Op, in_shape: Shape) -> Shape:
    axes = _axes_operand(op, 1, "axes", since=13)
    if axes is None:
        return tuple(d for d in in_shape if d != 1)
    chosen = {normalize_axis(op, a, len(in_shape)) for a in axes}
    if len(chosen) != len(axes):
        raise ShapeError(f"op {op.debug_name()}: repeated axis in {axes}")
    for axis in sorted(chosen):
        if in_shape[axis] != 1:
            raise ShapeError(f"op {op.debug_name()}: cannot squeeze axis {axis} of size "
                             f"{in_shape[axis]} in {in_shape}")
    return tuple(d for i, d in enumerate(in_shape) if i not in chosen)


def _infer_squeeze(op: Op) -> InferredOutputs:
    return [(_same_dtype(op), squeeze_shape(op, input_shape(op, 0)))]


def unsqueeze_shape(op: Op, in_shape: Shape) -> Shape:
    axes = _axes_operand(op, 1, "axes", since=13)
    if axes is None:
        raise ShapeError(f"op {op.debug_name()} needs axes")
    rank = len(in_shape) + len(axes)
    chosen = {normalize_axis(op, a, rank) for a in axes}
    if len(chosen) != len(axes):
        raise ShapeError(f"op {op.debug_name()}: repeated axis in {axes}")
    dims = iter(in_shape)
    return tuple(1 if i in chosen else next(dims) for i in range(rank))


def _infer_unsqueeze(op: Op) -> InferredOutputs:
    return [(_same_dtype(op), unsqueeze_shape(op, input_shape(op, 0)))]


def _fold_reshape_like(shape_rule):
    """Constant data is reshaped by numpy; a reshape to the same shape is the input."""

    def fold(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
        if constants and constants[0] is not None and _operands_constant(op, constants):
            [(_, shape)] = shape_rule(op)
            return [constants[0].reshape(shape)]
        return _passthrough(op, op.input(0))

    return fold


@pattern(*RESHAPE_LIKE, name="compose-reshapes")
def _compose_reshapes(op: Op, rewriter: Rewriter) -> bool:
    """A reshape of a reshape is one reshape of the first input: nothing if the shapes agree,
    else ``Reshape`` to the output shape (spelled out where a 0 would copy a changed dim)."""
    inner = op.input(0).producer
    typed = _output_type(op)
    if inner is None or inner.type.name not in RESHAPE_LIKE or typed is None:
        return False
    source, (_, shape) = inner.input(0), typed
    if (source.dtype, source.shape) == typed:
        rewriter.replace_op(op, [source])
        return True
    version, is_reshape = op.type.version, op.is_type("Reshape")
    if is_reshape and (0 not in reshape_target(op)
                       or (version >= 14 and op.attributes.get("allowzero", 0))):
        rewriter.set_input(op, 0, source)
        return True
    if 0 in shape and version < 14:
        return False  # a literal 0 needs allowzero, which Reshape has from opset 14 on
    explicit = np.array(shape, np.int64)
    zeros = {"allowzero": 1} if 0 in shape else {}
    if is_reshape:
        rewriter.set_input(op, 0, source)
        if version < 5:
            rewriter.set_attribute(op, "shape", list(shape))
        else:
            rewriter.set_input(op, 1, rewriter.constant(op.graph, explicit))
        for key, value in zeros.items():
            rewriter.set_attribute(op, key, value)
        return True
    if version < 5:
        inputs, attributes = [source], {"shape": list(shape)}
    else:
        inputs, attributes = [source, rewriter.constant(op.graph, explicit)], zeros
    reshape = rewriter.create_op(op.graph, "Reshape", inputs, attributes, like=op)
    rewriter.replace_op(op, [reshape.output(0)])
    return True


# -- Transpose ------------------------------------------------------------------------------
def transpose_perm(op: Op, rank: int) -> list[int]:
    perm = op.attributes.get("perm")
    perm = list(range(rank))[::-1] if perm is None else ints(perm)
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"op {op.debug_name()}: perm {perm} is not a permutation of "
                         f"{rank} axes")
    return perm


def _infer_transpose(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    return [(_same_dtype(op), tuple(shape[p] for p in transpose_perm(op, len(shape))))]


def _fold_transpose(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    source = op.input(0)
    if constants and constants[0] is not None:
        return [np.transpose(constants[0], transpose_perm(op, constants[0].ndim))]
    if source.shape is None:
        return None
    moved = [p for p in transpose_perm(op, len(source.shape)) if source.shape[p] != 1]
    if moved != sorted(moved):  # the non-unit axes change order: data really moves
        return None
    return _passthrough(op, source)


@pattern("Transpose", name="compose-transposes")
def _compose_transposes(op: Op, rewriter: Rewriter) -> bool:
    """Transpose(p1) of Transpose(p0) is Transpose(q), q[i] = p0[p1[i]] (numpy order)."""
    inner = op.input(0).producer
    if inner is None or not inner.is_type("Transpose") or op.input(0).shape is None:
        return False
    source = inner.input(0)
    if source.shape is None:
        return False
    outer_perm = transpose_perm(op, len(source.shape))
    inner_perm = transpose_perm(inner, len(source.shape))
    rewriter.set_input(op, 0, source)
    rewriter.set_attribute(op, "perm", [inner_perm[p] for p in outer_perm])
    return True


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
    return [(_same_dtype(op), tuple(size for *_, size in plan))]


def _fold_slice(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    source = op.input(0)
    if source.shape is None or not _operands_constant(op, constants):
        return None
    plan = slice_plan(op, source.shape)
    if constants[0] is not None:
        index = tuple(slice(start, end if end >= 0 else None, step)
                      for start, end, step, _ in plan)
        return [constants[0][index].copy()]
    if all(size == dim and (step == 1 or dim <= 1)
           for (_, _, step, size), dim in zip(plan, source.shape, strict=True)):
        return _passthrough(op, source)
    return None


# -- Identity, Concat, Expand, Split --------------------------------------------------------
def passed_on(tensor: Tensor) -> Tensor:
    """The tensor that Identity ops pass on unchanged as ``tensor`` (itself if none does)."""
    while tensor.producer is not None and tensor.producer.is_type("Identity"):
        tensor = tensor.producer.input(0)
    return tensor


def _infer_identity(op: Op) -> InferredOutputs:
    return [(_same_dtype(op), input_shape(op, 0))]


def _fold_identity(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    return [op.input(0)]


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
    return [(_same_dtype(op), tuple(out))]


def _fold_concat(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    inputs = op.inputs
    if len(constants) == len(inputs) and all(c is not None for c in constants):
        [(dtype, _)] = _infer_concat(op)
        axis = int(op.attributes["axis"])
        return [np.concatenate(list(constants), axis=axis).astype(numpy_dtype(dtype))]
    filled = [t for t in inputs if t.shape is None or prod(t.shape) > 0]
    return _passthrough(op, filled[0]) if len(filled) == 1 else None


def _infer_expand(op: Op) -> InferredOutputs:
    shape, target = input_shape(op, 0), ints(constant_input(op, 1, "the target shape"))
    try:
        return [(_same_dtype(op), broadcast_shapes(shape, target))]
    except ShapeError as error:
        raise ShapeError(f"op {op.debug_name()}: cannot expand {shape} to {target}: "
                         f"{error}") from None


def _fold_expand(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    if len(constants) > 1 and constants[0] is not None and constants[1] is not None:
        [(_, shape)] = _infer_expand(op)
        return [np.broadcast_to(constants[0], shape).copy()]
    return _passthrough(op, op.input(0))


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
        chunk = -(-dim // count) if count > 0 else 0
        sizes = [chunk] * (count - 1) + [dim - chunk * (count - 1)]
    elif count and dim % count == 0:
        sizes = [dim // count] * count
    else:
        raise ShapeError(f"op {op.debug_name()}: cannot split {dim} evenly into {count}")
    if len(sizes) != len(op.output_map()) or sum(sizes) != dim or min(sizes, default=0) < 0:
        raise ShapeError(f"op {op.debug_name()}: split {sizes} does not cut axis {axis} "
                         f"of {in_shape} into {count} outputs")
    return axis, sizes


def _infer_split(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    axis, sizes = split_sizes(op, shape)
    return [(_same_dtype(op), (*shape[:axis], size, *shape[axis + 1:])) for size in sizes]


def _fold_split(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    if any(c is None for c in constants):
        return _passthrough(op, op.input(0)) if len(op.output_map()) == 1 else None
    axis, sizes = split_sizes(op, constants[0].shape)
    return [part.copy() for part in np.split(constants[0], np.cumsum(sizes)[:-1], axis=axis)]


# -- layouts ----------------------------------------------------------------------------
def chain_of(in_shape: Sequence[int], steps: Sequence[Step]) -> Chain:
    """The Chain performing ``steps`` on a tensor of ``in_shape``."""
    chain = Chain(tuple(in_shape))
    for step in steps:
        name, args = step[0], step[1:]
        if name == "sub_sample":
            for axis, stride in enumerate(args[0]):
                if stride > 1:
                    chain.sub_sample(stride, axis)
        else:
            getattr(chain, name)(*args)
    return chain


def emit_steps(graph: Graph, tensor: TensorId, steps: Sequence[Step], name: str) -> TensorId:
    """The unwind Graph's view ops performing ``steps`` on ``tensor``; the last is named."""
    if not steps:
        return graph.identity(tensor, name=name)
    for k, step in enumerate(steps):
        tensor = getattr(graph, step[0])(tensor, *step[1:],
                                         name=name if k == len(steps) - 1 else "")
    return tensor


def _flat(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1)


class ViewRule(LayoutRule):
    """A view of input 0: each output's element map is ``steps(op, out_index)``."""

    kind = "view"

    def steps(self, op: Op, out_index: int) -> list[Step]:
        raise NotImplementedError

    def view_chain(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        if in_index != 0 or not op.has_input(0) or not op.has_output(out_index):
            return None
        return chain_of(known_shape(op, op.input(0)), self.steps(op, out_index))

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        source = emitter.tensor(op.input(0))
        for index, out in op.output_map().items():
            emitter.define(out, emit_steps(emitter.graph, source, self.steps(op, index),
                                           out.id))

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        tiles = _input(op, input_tiles, 0)
        shaped = np.asarray(tiles).reshape(known_shape(op, op.input(0)))
        return [_flat(self.view_chain(op, 0, j).apply(shaped)) for j in op.output_map()]

    def aliases_outputs(self, op: Op) -> bool:
        return True

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """Views pass layouts back exactly (``Opx::unwindTensorLayout`` of view ops)."""
        return self.view_chain(op, in_index, out_index)


def _input(op: Op, input_tiles: InputTiles, index: int) -> np.ndarray:
    tiles = input_tiles[index] if index < len(input_tiles) else None
    if tiles is None:
        raise PlanError(f"op {op.debug_name()}: the layout of input {index} is needed")
    return np.asarray(tiles)


class ReshapeRule(ViewRule):
    """Reshape, Flatten, Squeeze, Unsqueeze: the elements in row-major order, reshaped."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        out = known_shape(op, op.output(out_index))
        return [] if out == known_shape(op, op.input(0)) else [("reshape", out)]


class TransposeRule(ViewRule):
    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = known_shape(op, op.input(0))
        perm = tuple(transpose_perm(op, len(shape)))
        return [] if perm == tuple(range(len(shape))) else [("dim_shuffle", perm)]


class SliceRule(ViewRule):
    """A box of the input, every |step|-th element, reversed on axes with negative steps."""

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


class IdentityRule(ViewRule):
    def steps(self, op: Op, out_index: int) -> list[Step]:
        return []


class ExpandRule(ViewRule):
    """Numpy broadcasting: leading unit axes added, then size-1 axes repeated."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        out = known_shape(op, op.output(out_index))
        return [] if out == known_shape(op, op.input(0)) else [("expand", out)]


class SplitRule(ViewRule):
    """Output j is the slab of the input between the sizes before it and its own end."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = known_shape(op, op.input(0))
        axis, sizes = split_sizes(op, shape)
        outputs = sorted(op.output_map())
        position = outputs.index(out_index)
        begin = sum(sizes[:position])
        lower, upper = [0] * len(shape), list(shape)
        lower[axis], upper[axis] = begin, begin + sizes[position]
        if lower == [0] * len(shape) and upper == list(shape):
            return []
        return [("slice", tuple(lower), tuple(upper))]


class ConcatRule(LayoutRule):
    """Concat: input i is the slab ``concat_slab(op, i)`` of the output (a Poplar view)."""

    kind = "view"

    def _axis(self, op: Op) -> int:
        rank = len(known_shape(op, op.output(0)))
        axis = int(op.attributes.get("axis", 0))
        if not -rank <= axis < rank:
            raise PlanError(f"op {op.debug_name()}: axis {axis} is out of range for rank "
                            f"{rank}")
        return axis % rank

    def concat_slab(self, op: Op, in_index: int) -> tuple[int, int, int]:
        """(axis, begin, end): where input ``in_index`` lies along the output's axis."""
        axis = self._axis(op)
        begin = 0
        for index, tensor in op.input_map().items():
            size = known_shape(op, tensor)[axis]
            if index == in_index:
                return axis, begin, begin + size
            begin += size
        raise PlanError(f"op {op.debug_name()} has no input {in_index}")

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        inputs = [emitter.tensor(t) for t in op.inputs]
        out = op.output(0)
        emitter.define(out, emitter.graph.concat(inputs, self._axis(op), name=out.id))

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        parts = [np.asarray(_input(op, input_tiles, i)).reshape(known_shape(op, t))
                 for i, t in op.input_map().items()]
        return [_flat(np.concatenate(parts, axis=self._axis(op)))]

    def aliases_outputs(self, op: Op) -> bool:
        return True

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """Input ``in_index`` is its slab of the output (``ConcatOpx::unwindTensorLayout``)."""
        if out_index != 0 or not op.has_input(in_index):
            return None
        axis, begin, end = self.concat_slab(op, in_index)
        out_shape = known_shape(op, op.output(0))
        return Chain(known_shape(op, op.input(in_index))).sett_fill_into(
            concat_slab(out_shape, axis, begin, end - begin))


_reshape_patterns = (_compose_reshapes,)
register(OpDef("Reshape", infer=_infer_reshape, fold=_fold_reshape_like(_infer_reshape),
               patterns=_reshape_patterns, layout=ReshapeRule()))
register(OpDef("Flatten", infer=_infer_flatten, fold=_fold_reshape_like(_infer_flatten),
               patterns=_reshape_patterns, layout=ReshapeRule()))
register(OpDef("Squeeze", infer=_infer_squeeze, fold=_fold_reshape_like(_infer_squeeze),
               patterns=_reshape_patterns, layout=ReshapeRule()))
register(OpDef("Unsqueeze", infer=_infer_unsqueeze, fold=_fold_reshape_like(_infer_unsqueeze),
               patterns=_reshape_patterns, layout=ReshapeRule()))
register(OpDef("Transpose", infer=_infer_transpose, fold=_fold_transpose,
               patterns=(_compose_transposes,), layout=TransposeRule()))
register(OpDef("Slice", infer=_infer_slice, fold=_fold_slice, layout=SliceRule()))
register(OpDef("Identity", infer=_infer_identity, fold=_fold_identity,
               layout=IdentityRule()))
register(OpDef("Concat", infer=_infer_concat, fold=_fold_concat, layout=ConcatRule()))
register(OpDef("Expand", infer=_infer_expand, fold=_fold_expand, layout=ExpandRule()))
register(OpDef("Split", infer=_infer_split, fold=_fold_split, layout=SplitRule()))
