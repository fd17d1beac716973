"""Op family: views of one whole tensor — Reshape, Flatten, Squeeze, Unsqueeze (row-major
reshapes), Transpose (a permutation of axes), Expand (numpy broadcasting) and Identity, with
ONNX semantics, and PopART's ai.graphcore Reshape (its target shape an attribute). (Views of
parts of tensors — Slice, Split, Concat — are ``ops/slicing.py``.) Each OpDef states its
shape rule, its fold (numpy on constant inputs, or the input itself when the view changes
nothing), its canonicalization patterns and its layout rule.

In Poplar these ops make views: no data moves, each output element *is* an input element.
So a view's layout rule is an element map, written once as a list of steps (reshape,
dim_shuffle, slice, sub_sample, reverse, expand). The same steps build the ``memory.Chain``
of ``view_chain`` (applied to tile arrays by ``output_tiles``, and followed by PopART's
creator search) and the unwinding graph's view ops of ``unwind``, so the two can never
disagree. Views need no exchange and carry no ValuedPairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import PlanError, ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.interface import TileMachine
from popart_unwind.memory import Chain
from popart_unwind.ops.common import (
    constant_input,
    input_shape,
    ints,
    normalize_axis,
    operands_constant,
    unchanged,
)
from popart_unwind.ops.gradient import (
    GradientBuilder,
    gets_gradient,
    reshape,
    sum_to_shape,
    transpose,
)
from popart_unwind.ops.layout_rule import InputTiles, LayoutRule, UnwindEmitter, known_shape
from popart_unwind.ops.registry import Constants, InferredOutputs, OpDef, register
from popart_unwind.rewrite import Rewriter, pattern
from popart_unwind.shapes import broadcast_shapes
from popart_unwind.unwind import TensorId, UnwindGraph
from popart_unwind.validation import Shape

#: One step of an element map: (name, *arguments), names as UnwindGraph's methods.
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


def _same_dtype(op: Op) -> str:
    return op.input(0).dtype


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


def flatten_axis(op: Op, rank: int) -> int:
    """ONNX Flatten's split point in ``[0, rank]``: a negative axis counts from the back
    (``axis + rank``), so ``-1`` keeps the last dim apart, as ``rank - 1`` does."""
    axis = int(op.attributes.get("axis", 1))
    if not -rank <= axis <= rank:
        raise ShapeError(f"op {op.debug_name()}: axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def flatten_shape(op: Op, in_shape: Shape) -> Shape:
    axis = flatten_axis(op, len(in_shape))
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
        if constants and constants[0] is not None and operands_constant(op, constants):
            [(_, shape)] = shape_rule(op)
            return [constants[0].reshape(shape)]
        return unchanged(op, op.input(0))

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


def is_reshape(op: Op) -> bool:
    """Whether ``op`` is a Reshape (so that callers outside the family need not name it)."""
    return op.is_type("Reshape")


# -- Transpose ------------------------------------------------------------------------------
def is_transpose(op: Op) -> bool:
    """Whether ``op`` is a Transpose."""
    return op.is_type("Transpose")


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
    return unchanged(op, source)


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


# -- Identity, Expand --------------------------------------------------------
def passed_on(tensor: Tensor) -> Tensor:
    """The tensor that Identity ops pass on unchanged as ``tensor`` (itself if none does)."""
    while tensor.producer is not None and tensor.producer.is_type("Identity"):
        tensor = tensor.producer.input(0)
    return tensor


def _infer_identity(op: Op) -> InferredOutputs:
    return [(_same_dtype(op), input_shape(op, 0))]


def _fold_identity(op: Op, constants: Constants) -> list[Tensor | np.ndarray] | None:
    return [op.input(0)]


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
    return unchanged(op, op.input(0))


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


def emit_steps(graph: UnwindGraph, tensor: TensorId, steps: Sequence[Step], name: str) -> TensorId:
    """UnwindGraph's view ops performing ``steps`` on ``tensor``; the last is named."""
    if not steps:
        return graph.identity(tensor, name=name)
    for k, step in enumerate(steps):
        tensor = getattr(graph, step[0])(tensor, *step[1:],
                                         name=name if k == len(steps) - 1 else "")
    return tensor


def flat_layout(array: np.ndarray) -> np.ndarray:
    """A layout as a contiguous flat array."""
    return np.ascontiguousarray(array).reshape(-1)


class ViewRule(LayoutRule):
    """A view of input 0: each output's element map is ``steps(op, out_index)``."""

    kind = "view"

    def steps(self, op: Op, out_index: int) -> list[Step]:
        raise NotImplementedError

    def all_steps(self, op: Op) -> dict[int, list[Step]]:
        """``steps`` of every output (a rule with many outputs answers at once)."""
        return {index: self.steps(op, index) for index in op.output_map()}

    def view_chain(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        if in_index != 0 or not op.has_input(0) or not op.has_output(out_index):
            return None
        return chain_of(known_shape(op, op.input(0)), self.steps(op, out_index))

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        source = emitter.tensor(op.input(0))
        steps = self.all_steps(op)
        for index, out in op.output_map().items():
            emitter.define(out, emit_steps(emitter.graph, source, steps[index], out.id))

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        shape = known_shape(op, op.input(0))
        shaped = np.asarray(input_layout(op, input_tiles, 0)).reshape(shape)
        return [flat_layout(chain_of(shape, steps).apply(shaped))
                for steps in self.all_steps(op).values()]

    def aliases_outputs(self, op: Op) -> bool:
        return True

    def viewed_inputs(self, op: Op) -> list[int]:
        """Input 0 (the others, a shape or slice bounds, are not viewed)."""
        return [0]

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """Views pass layouts back exactly (``Opx::unwindTensorLayout`` of view ops)."""
        return self.view_chain(op, in_index, out_index)

    def popart_output_views(self, op: Op) -> dict[int, dict[int, Chain | None]]:
        """Input 0's view into every output, from one call to ``all_steps``."""
        if not op.has_input(0):
            return super().popart_output_views(op)
        shape = known_shape(op, op.input(0))
        return {out: {index: chain_of(shape, steps) if index == 0 else None
                      for index in op.input_map()}
                for out, steps in self.all_steps(op).items()}


def input_layout(op: Op, input_tiles: InputTiles, index: int) -> np.ndarray:
    """Input ``index``'s layout, which a view needs (PlanError if it is not known)."""
    tiles = input_tiles[index] if index < len(input_tiles) else None
    if tiles is None:
        raise PlanError(f"op {op.debug_name()}: the layout of input {index} is needed")
    return np.asarray(tiles)


class CopiedViewRule(ViewRule):
    """Layouts pass through as a view's would, but the results are new memory (no alias)
    and PopART's creator search stops at the op (its Opx creates no input): an IpuCopy, a
    pipeline's Stash and Restore."""

    def aliases_outputs(self, op: Op) -> bool:
        return False

    def viewed_inputs(self, op: Op) -> list[int]:
        return []

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        return None

    def popart_output_views(self, op: Op) -> dict[int, dict[int, Chain | None]]:
        return {out: {index: None for index in op.input_map()} for out in op.output_map()}


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


class IdentityRule(ViewRule):
    def steps(self, op: Op, out_index: int) -> list[Step]:
        return []


class ExpandRule(ViewRule):
    """Numpy broadcasting: leading unit axes added, then size-1 axes repeated."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        out = known_shape(op, op.output(out_index))
        return [] if out == known_shape(op, op.input(0)) else [("expand", out)]


# -- gradients ------------------------------------------------------------------------------
def _reshape_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """A row-major reshape's gradient is dY reshaped to x's shape (PopART's
    ReshapeGradOp, SqueezeGradOp, UnsqueezeGradOp, FlattenGradOp); shapes and axes none."""
    grad, x = grads[0], op.input(0)
    return [reshape(builder, grad, x.shape) if grad is not None and gets_gradient(x) else None]


def _transpose_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY transposed by the inverse permutation (PopART's TransposeGradOp)."""
    grad = grads[0]
    if grad is None:
        return [None]
    perm = transpose_perm(op, len(grad.shape))
    return [transpose(builder, grad, [perm.index(axis) for axis in range(len(perm))])]


def _identity_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY itself (PopART's IdentityGradOp)."""
    return [grads[0]]


def _expand_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY summed over the axes the broadcast added or stretched (PopART's ExpandGradOp)."""
    grad, x = grads[0], op.input(0)
    return [sum_to_shape(builder, grad, x.shape) if grad is not None and gets_gradient(x)
            else None]


_reshape_patterns = (_compose_reshapes,)
register(OpDef("Reshape", infer=_infer_reshape, fold=_fold_reshape_like(_infer_reshape),
               patterns=_reshape_patterns, keeps_input_layout=True, layout=ReshapeRule(),
               gradient=_reshape_gradient))
# PopART's ai.graphcore Reshape: the target shape as an attribute, read as ONNX's Reshape-1
# reads its own (its version, 1, is below 5), -1 and 0 meaning what they mean there.
register(OpDef("Reshape", domain=GRAPHCORE_DOMAIN, infer=_infer_reshape,
               fold=_fold_reshape_like(_infer_reshape), keeps_input_layout=True,
               layout=ReshapeRule(), gradient=_reshape_gradient))
register(OpDef("Flatten", infer=_infer_flatten, fold=_fold_reshape_like(_infer_flatten),
               patterns=_reshape_patterns, keeps_input_layout=True, layout=ReshapeRule(),
               gradient=_reshape_gradient))
register(OpDef("Squeeze", infer=_infer_squeeze, fold=_fold_reshape_like(_infer_squeeze),
               patterns=_reshape_patterns, keeps_input_layout=True, layout=ReshapeRule(),
               gradient=_reshape_gradient))
register(OpDef("Unsqueeze", infer=_infer_unsqueeze, fold=_fold_reshape_like(_infer_unsqueeze),
               patterns=_reshape_patterns, keeps_input_layout=True, layout=ReshapeRule(),
               gradient=_reshape_gradient))
register(OpDef("Transpose", infer=_infer_transpose, fold=_fold_transpose,
               patterns=(_compose_transposes,), layout=TransposeRule(),
               gradient=_transpose_gradient))
register(OpDef("Identity", infer=_infer_identity, fold=_fold_identity,
               keeps_input_layout=True, layout=IdentityRule(), gradient=_identity_gradient))
register(OpDef("Expand", infer=_infer_expand, fold=_fold_expand, broadcasts_input=True,
               layout=ExpandRule(), gradient=_expand_gradient))
