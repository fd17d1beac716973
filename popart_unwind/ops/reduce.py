"""Op family: reductions and normalisations (ReduceSum, ReduceMean, ... ArgMax, ArgMin,
Softmax, LogSoftmax, LayerNormalization, BatchNormalization), with ONNX semantics.

The reduced axes are an attribute up to a version and an optional input from then on
(ReduceSum from opset 13, the others from 18); without axes every axis is reduced, unless
``noop_with_empty_axes`` makes the op the identity. The normalisations follow what changed
between opset versions (Softmax's default axis, BatchNormalization's outputs).

Axes given by an input whose value is not known before running (a graph input's) leave the
shape rule undecided, but not the layout: where the output's shape is known (the model's
or ONNX's inference's) it decides which elements reduce together (``axes_from_shapes``),
and the reduction is planned as with those axes — a static program fixes them anyway, and
PopART takes a reduction's axes only as an attribute. Where the shapes fit two groupings
(``keepdims`` 0 dropping one of two equal dims) the planner refuses the model naming the
graph input (``ReductionRule.undecided_operands``; docs/planner.md).

Layouts (docs/planner.md, docs/ipu-model.md): a reduction reads its input where it lies
and its result is small — a root of the unwinding problem that depends on the input, laid
out as Poplibs' ``popops::reduce`` lays it out, with the exchange of the partial results
counted. Softmax and LogSoftmax are elementwise on their input (Poplar clones it), plus two
reductions along the axis whose statistics are broadcast back. LayerNormalization's result
is laid out like X; its mean and inverse standard deviation are reductions broadcast back,
and Scale and B are broadcast operands, tied like a bias in Add. BatchNormalization's
per-channel operands are read like a convolution's bias, and in training mode its batch
statistics are reductions broadcast back.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

from popart_unwind.errors import IrError, ShapeError, ShapeUndecided
from popart_unwind.ir.dtypes import ONNX_DTYPES, numpy_dtype
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine import count_memo
from popart_unwind.machine.count_memo import value_key
from popart_unwind.machine.exchange import (
    broadcast_index,
    read_need,
    reduced_rows,
    reduction_groups,
    reduction_need,
    reduction_partials,
    row_partials,
    row_read_need,
    single_partial_tiles,
)
from popart_unwind.machine.hooks import tile_counts
from popart_unwind.machine.interface import ExchangeNeed, TileMachine
from popart_unwind.ops.common import (
    FOLD_MAX_ELEMENTS,
    computed_value,
    input_shape,
    normalize_axis,
)
from popart_unwind.ops.elementwise import ElementwiseRule
from popart_unwind.ops.gradient import (
    GradientBuilder,
    GradientRule,
    int64s,
    is_differentiable,
    one,
    reshape,
    scalar,
    shared_among_maxima,
    sum_to_shape,
    transpose,
    zeros,
)
from popart_unwind.ops.layout_rule import (
    InputTiles,
    LayoutRule,
    OpWork,
    UnwindEmitter,
    count_equal,
    flat_tiles,
    known_shape,
)
from popart_unwind.ops.registry import OpDef, register
from popart_unwind.rewrite import Rewriter
from popart_unwind.rewrite.pattern import pattern
from popart_unwind.shapes import broadcast_shapes


def _square_sum(x, axis, keepdims):
    return np.sum(np.square(x), axis=axis, keepdims=keepdims)


#: Per reduction: the opset from which axes are an input, and the numpy meaning.
REDUCTIONS = {
    "ReduceSum": (13, np.sum),
    "ReduceMean": (18, np.mean),
    "ReduceMax": (18, np.max),
    "ReduceMin": (18, np.min),
    "ReduceProd": (18, np.prod),
    "ReduceL1": (18, lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims)),
    "ReduceL2": (18, lambda x, axis, keepdims: np.sqrt(_square_sum(x, axis, keepdims))),
    "ReduceLogSum": (18, lambda x, axis, keepdims: np.log(np.sum(x, axis=axis,
                                                                  keepdims=keepdims))),
    "ReduceLogSumExp": (18, lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis,
                                                                     keepdims=keepdims))),
    "ReduceSumSquare": (18, _square_sum),
}
#: Reductions that leave a single element unchanged (reducing size-1 axes is the identity).
_IDENTITY_ON_ONE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
_EXACT_ON_INTEGERS = ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                      "ReduceSumSquare")


def reduced_axes(op: Op, rank: int) -> tuple[int, ...] | None:
    """The sorted axes ``op`` reduces; None when it is the identity (empty axes with
    ``noop_with_empty_axes``). ShapeUndecided, naming the axes input, when that input is
    neither a constant nor computed from constants and shapes."""
    since, _ = REDUCTIONS[op.type.name]
    if op.type.version >= since:
        if op.has_input(1):
            value = computed_value(op.input(1))
            if value is None:
                raise ShapeUndecided(f"op {op.debug_name()}: its axes (input 1, "
                                     f"{op.input(1).id!r}) are not known before running",
                                     needs=op.input(1).id)
            axes = [int(a) for a in np.asarray(value).reshape(-1)]
        else:
            axes = []
        if not axes and op.attributes.get("noop_with_empty_axes", 0):
            return None
    else:
        axes = list(op.attributes.get("axes", []))
    if not axes:
        return tuple(range(rank))
    normalized = sorted(normalize_axis(op, a, rank) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ShapeError(f"op {op.debug_name()}: axes {axes} name an axis twice")
    return tuple(normalized)


#: Deciding a reduction's axes from its shapes tries every choice of dropped axes; above
#: this rank (far beyond any model's) the shapes are not searched.
_SEARCHED_RANK = 16


def axes_from_shapes(in_shape: tuple[int, ...], out_shape: tuple[int, ...],
                     keepdims: bool) -> tuple[int, ...] | None:
    """The axes of size other than 1 that a reduction from ``in_shape`` to ``out_shape``
    reduces, where the shapes decide them; None where no reduction fits the shapes or
    reductions that group the elements differently both fit (``keepdims`` 0 dropping one
    of two equal dims). Axes of size 1 are left out: reducing one moves no element, so
    every choice of them puts the same input elements into each result, in the same order.
    """
    rank = len(in_shape)
    if keepdims:
        if len(out_shape) != rank:
            return None
        axes = tuple(i for i in range(rank) if out_shape[i] != in_shape[i])
        return axes if all(out_shape[i] == 1 for i in axes) else None
    dropped = rank - len(out_shape)
    if dropped < 0 or rank > _SEARCHED_RANK:
        return None
    fits: set[tuple[int, ...]] = set()
    for removed in itertools.combinations(range(rank), dropped):
        kept = tuple(d for i, d in enumerate(in_shape) if i not in removed)
        if kept == tuple(out_shape):
            fits.add(tuple(a for a in removed if in_shape[a] != 1))
            if len(fits) > 1:
                return None
    return next(iter(fits), None)


def layout_axes(op: Op, rank: int) -> tuple[int, ...] | None:
    """The axes a reduction's layout groups its elements by: ``reduced_axes`` where the
    axes are known before running, else the axes its input and output shapes decide
    (``axes_from_shapes``; the output's shape is the model's or ONNX's inference's).
    ShapeUndecided when neither decides them."""
    try:
        return reduced_axes(op, rank)
    except ShapeUndecided:
        x, out = op.input(0), op.output(0)
        if x.shape is None or out.shape is None:
            raise
        axes = axes_from_shapes(x.shape, out.shape, bool(op.attributes.get("keepdims", 1)))
        if axes is None:
            raise
        return axes


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_reduce(op: Op) -> list:
    shape = input_shape(op, 0)
    axes = reduced_axes(op, len(shape))
    if axes is None:
        return [(op.input(0).dtype, shape)]
    keepdims = bool(op.attributes.get("keepdims", 1))
    return [(op.input(0).dtype, _reduced_shape(shape, axes, keepdims))]


def _fold_reduce(op: Op, constants) -> list | None:
    shape = op.input(0).shape
    if shape is None:
        return None
    try:
        axes = reduced_axes(op, len(shape))
    except ShapeError:
        return None
    keepdims = bool(op.attributes.get("keepdims", 1))
    if axes is None or (op.type.name in _IDENTITY_ON_ONE and keepdims
                        and all(shape[a] == 1 for a in axes)):
        return [op.input(0)]
    x = constants[0]
    if x is None or x.size > FOLD_MAX_ELEMENTS:
        return None
    if x.size == 0 and op.type.name in ("ReduceMax", "ReduceMin"):
        return None  # ONNX defines these on empty sets by infinities; leave them be
    if x.dtype.kind != "f" and op.type.name not in _EXACT_ON_INTEGERS:
        return None  # integer means, roots and logs round as a runtime chooses
    _, meaning = REDUCTIONS[op.type.name]
    with np.errstate(all="ignore"):
        result = meaning(x, axis=axes, keepdims=keepdims)
    return [np.asarray(result).astype(x.dtype)]


def _arg_axis(op: Op, rank: int) -> int:
    return normalize_axis(op, op.attributes.get("axis", 0), max(rank, 1))


def _infer_arg(op: Op) -> list:
    shape = input_shape(op, 0)
    axis = _arg_axis(op, len(shape))
    keepdims = bool(op.attributes.get("keepdims", 1))
    return [("int64", _reduced_shape(shape, (axis,), keepdims))]


def _fold_arg(op: Op, constants) -> list | None:
    x = constants[0]
    if x is None or x.size > FOLD_MAX_ELEMENTS or x.ndim == 0:
        return None
    axis = _arg_axis(op, x.ndim)
    if x.shape[axis] == 0:
        return None
    pick = np.argmax if op.type.name == "ArgMax" else np.argmin
    if op.attributes.get("select_last_index", 0):
        index = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
    else:
        index = pick(x, axis=axis)
    if op.attributes.get("keepdims", 1):
        index = np.expand_dims(index, axis)
    return [np.asarray(index, dtype=np.int64)]


# -- layouts -------------------------------------------------------------------------------
def statistic_tiles(groups: np.ndarray | None, tiles: np.ndarray, num_groups: int, dtype: str,
                    target: TileMachine,
                    partials: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Where ``popops::reduce`` puts a result it creates: each result element on the tile
    holding all its inputs when every result has them on one tile (no exchange; Poplibs'
    ``inputToOutputNoExchange``), else linearly from tile 0 (``intermediateToOutput``).
    ``partials``: ``reduction_partials``' answer, when already known (``groups`` is then
    not read and may be None)."""
    single = single_partial_tiles(groups, tiles, num_groups, partials)
    if single is not None:
        return single
    return np.asarray(target.reduction_result_tiles(num_groups, dtype)).reshape(-1)


def statistics_need(shape: tuple[int, ...], axes: tuple[int, ...], tiles: np.ndarray,
                    dtype: str, count: int, target: TileMachine) -> ExchangeNeed:
    """The exchange of ``count`` statistics reduced over ``axes`` of a tensor laid out as
    ``tiles`` and broadcast back to it (a softmax's max and sum, a norm's mean and inverse
    standard deviation): per statistic, the partials sent to the statistic's tiles, then
    each tile receiving the statistics of its elements' rows that it does not hold."""
    num_groups = math.prod(1 if a in axes else d for a, d in enumerate(shape))
    size = target.dtype_size(dtype)
    rows = reduced_rows(shape, axes, tiles)  # the statistics of rows: no group array
    groups = reduction_groups(shape, axes) if rows is None else None
    # the partials, found once for both questions that ask for them
    partials = reduction_partials(groups, tiles, num_groups) if rows is None \
        else row_partials(rows)
    stats = statistic_tiles(groups, tiles, num_groups, dtype, target, partials)
    read_back = read_need(tiles, groups, stats, size, target.num_tiles) if rows is None \
        else row_read_need(rows, stats, size, target.num_tiles)
    one = reduction_need(groups, tiles, stats, size, target.num_tiles, partials) + read_back
    need = ExchangeNeed.none(target.num_tiles)
    for _ in range(count):
        need = need + one
    return need


def reduction_cycles(shape: tuple[int, ...], axes: tuple[int, ...], tiles: np.ndarray,
                     dtype: str, operations: tuple[str, ...], target: TileMachine,
                     result_dtype: str | None = None) -> int:
    """Compute cycles of reducing a tensor of ``shape`` laid out as ``tiles`` over
    ``axes``, once per popops operation in ``operations`` (a softmax's MAX and ADD), as
    Poplibs' reduce vertices cost it (``TileMachine.reduce_cycles``): each tile's first
    stage over the outputs it holds part of (side by side when the innermost axis is
    reduced, strided otherwise), then, for outputs whose inputs lie on several tiles, the
    partials reduced on the outputs' tiles (``gathered_partials_cycles``), each stage
    bounded by its busiest tile. A tile's outputs are taken as equal: each with the mean
    of its inputs there (docs/ipu-model.md). ``result_dtype``: the results' type where it
    is not the input's (a layer norm's float statistics), for where they lie."""
    tiles = np.asarray(tiles).reshape(-1)
    if not axes or not operations or not tiles.size:
        return 0
    result_dtype = result_dtype or dtype
    memo = count_memo.active()  # inside a cost walk: a layout's key made once
    key = ("reduction cycles", tuple(shape), tuple(axes), dtype, result_dtype, operations,
           value_key(tiles) if memo is None else memo.value_key(tiles))
    # the target keeps arrays: the answer is held as a 0-d one
    return int(target.remembered(key, lambda: np.array(_reduction_cycles(
        shape, axes, tiles, dtype, result_dtype, operations, target), np.int64)))


def _reduction_cycles(shape: tuple[int, ...], axes: tuple[int, ...], tiles: np.ndarray,
                      dtype: str, result_dtype: str, operations: tuple[str, ...],
                      target: TileMachine) -> int:
    """``reduction_cycles``, worked out."""
    num_tiles = target.num_tiles
    num_groups = math.prod(1 if a in axes else d for a, d in enumerate(shape))
    rows = reduced_rows(shape, axes, tiles)
    groups = reduction_groups(shape, axes) if rows is None else None
    partials = reduction_partials(groups, tiles, num_groups) if rows is None \
        else row_partials(rows)
    source, group = partials
    elements = tile_counts(tiles, num_tiles).astype(np.int64)
    outputs = np.bincount(source, minlength=num_tiles)
    used = np.flatnonzero(outputs)
    first_shapes = np.unique(np.stack([outputs[used],
                                       -(-elements[used] // outputs[used])]), axis=1)
    strided = (len(shape) - 1) not in axes
    per_output = np.bincount(group, minlength=num_groups)
    second_shapes = np.zeros((2, 0), np.int64)
    if per_output.max(initial=0) > 1:
        results = statistic_tiles(groups, tiles, num_groups, result_dtype, target, partials)
        results = np.asarray(results, np.int64)
        held = np.bincount(results, minlength=num_tiles)
        gathered = np.bincount(results, weights=per_output, minlength=num_tiles)
        gathered = gathered.astype(np.int64)
        used = np.flatnonzero(held)
        second_shapes = np.unique(np.stack([held[used], -(-gathered[used] // held[used])]),
                                  axis=1)
    cycles = 0
    for operation in operations:
        cycles += max(target.reduce_cycles(int(o), int(p), dtype, operation, strided)
                      for o, p in first_shapes.T)
        cycles += max((target.gathered_partials_cycles(int(o), int(p), dtype, operation)
                       for o, p in second_shapes.T), default=0)
    return cycles


class ReductionRule(LayoutRule):
    """Reduce* (and ArgMax/ArgMin over their one axis): the input is read where it lies;
    the result is a root of the unwinding problem that depends on it, laid out as
    ``popops::reduce`` does. A reduction that moves no element between positions (only
    unit axes reduced, or the identity) is a reshape of its input. PopART's ``ReduceOpx``
    classes keep ``Opx``'s default creator type, Deadend: no creator search passes. The
    axes are ``layout_axes``'s: the shapes decide them where the axes input is not known
    before running."""

    kind = "reduction"

    def __init__(self, axes_of: Callable[[Op, int], tuple[int, ...] | None],
                 vertices: Mapping[str, tuple[tuple[str | None, ...], tuple[str, ...]]]
                 = MappingProxyType({})) -> None:
        """``axes_of(op, rank)``: the reduced axes, or None for the identity.
        ``vertices``: per op type, the elementwise vertices run over the input and the
        popops reductions that follow (``REDUCE_VERTICES``); a type without an entry
        costs one elementwise vertex (ArgMax and ArgMin, the global pools: not popops
        reductions)."""
        self.axes_of = axes_of
        self.vertices = vertices

    def vertex_passes(self, op: Op) -> tuple[str | None, ...]:
        found = self.vertices.get(op.type.name)
        return super().vertex_passes(op) if found is None else found[0]

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """The elementwise vertices over the input, then its reductions
        (``reduction_cycles``)."""
        work = super().work(op, input_tiles, output_tiles, target)
        found = self.vertices.get(op.type.name)
        tiles = flat_tiles(input_tiles, 0)
        if found is None or tiles is None or self._moves_nothing(op):
            return work
        return _plus_reductions(work, known_shape(op, op.input(0)), self._axes(op), tiles,
                                op.input(0).dtype, found[1], target)

    def _axes(self, op: Op) -> tuple[int, ...]:
        """The reduced axes; () for the identity."""
        shape = known_shape(op, op.input(0))
        axes = self.axes_of(op, len(shape))
        return () if axes is None else tuple(axes)

    def undecided_operands(self, op: Op) -> list[int]:
        """The axes input, where neither its value nor the shapes decide the axes."""
        shape = op.input(0).shape
        if shape is None:
            return []
        try:
            self.axes_of(op, len(shape))
        except ShapeUndecided as undecided:
            return [i for i, t in op.input_map().items() if t.id == undecided.needs][:1]
        return []

    def _moves_nothing(self, op: Op) -> bool:
        shape = known_shape(op, op.input(0))
        return all(shape[a] == 1 for a in self._axes(op))

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        out = op.output(0)
        if self._moves_nothing(op):
            emitter.define(out, emitter.graph.reshape(emitter.tensor(op.input(0)),
                                                      known_shape(op, out), name=out.id))
            return
        emitter.barrier(op)

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        x, out = op.input(0), op.output(0)
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None:
            return super().output_tiles(op, input_tiles, target)
        if self._moves_nothing(op):
            return [tiles.copy()]
        shape, axes = known_shape(op, x), self._axes(op)
        groups = reduction_groups(shape, axes)
        return [statistic_tiles(groups, tiles, math.prod(known_shape(op, out)), x.dtype,
                                target)]

    def exchange(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                 target: TileMachine) -> ExchangeNeed:
        """The partials each tile leaves, received by their result's tile (a reduction
        moving nothing receives nothing)."""
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None or self._moves_nothing(op):
            return ExchangeNeed.none(target.num_tiles)
        x = op.input(0)
        groups = reduction_groups(known_shape(op, x), self._axes(op))
        return reduction_need(groups, tiles, np.asarray(output_tiles[0]).reshape(-1),
                              target.dtype_size(x.dtype), target.num_tiles)

    def least_received(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                       planned: set[int], target: TileMachine) -> int:
        """A planned input could hold each result's inputs on one tile, where the result
        then goes: nothing to receive."""
        if 0 in planned:
            return 0
        return super().least_received(op, input_tiles, output_tiles, planned, target)


def _arg_axes(op: Op, rank: int) -> tuple[int, ...]:
    return (_arg_axis(op, rank),) if rank else ()


#: How PopART computes each Reduce op: elementwise vertices over the input, then popops
#: reductions (``popops::reduce`` with popops' operation; ReduceMean and ReduceLogSum scale
#: or take the log of the results only, not counted). ReduceL1 reduces the absolute
#: values; ReduceLogSumExp takes the maximum, x − max and exp before its sum.
REDUCE_VERTICES: Mapping[str, tuple[tuple[str | None, ...], tuple[str, ...]]] = \
    MappingProxyType({
    "ReduceSum": ((), ("ADD",)),
    "ReduceMean": ((), ("ADD",)),
    "ReduceLogSum": ((), ("ADD",)),
    "ReduceL1": (("ABSOLUTE",), ("ADD",)),
    "ReduceL2": ((), ("SQUARE_ADD",)),
    "ReduceSumSquare": ((), ("SQUARE_ADD",)),
    "ReduceMax": ((), ("MAX",)),
    "ReduceMin": ((), ("MIN",)),
    "ReduceProd": ((), ("MUL",)),
    "ReduceLogSumExp": ((None, "EXPONENT"), ("MAX", "ADD")),
})
REDUCTION = ReductionRule(layout_axes, REDUCE_VERTICES)
ARG_REDUCTION = ReductionRule(_arg_axes)


def _spread_back(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    """A reduction's result gradient broadcast back over the reduced axes (the result
    seen with its reduced axes kept, then expanded to the input's shape)."""
    shape = op.input(0).shape
    axes = reduced_axes(op, len(shape))
    if axes is None:
        return grad
    kept = tuple(1 if a in axes else d for a, d in enumerate(shape))
    kept_grad = reshape(builder, grad, kept)
    return one(builder, "Expand", [kept_grad, int64s(builder, shape)])


def _reduce_sum_gradient(builder: GradientBuilder, op: Op,
                         grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Each input element's gradient is its sum's (PopART's ReduceSumGradOp: a
    broadcast)."""
    if grads[0] is None:
        return [None]
    return [_spread_back(builder, op, grads[0])]


def _reduce_mean_gradient(builder: GradientBuilder, op: Op,
                          grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """The sum's gradient over the number of elements averaged."""
    if grads[0] is None:
        return [None]
    x = op.input(0)
    axes = reduced_axes(op, len(x.shape))
    count = 1 if axes is None else math.prod(x.shape[a] for a in axes)
    spread = _spread_back(builder, op, grads[0])
    return [one(builder, "Mul", [spread, scalar(builder, 1.0 / max(count, 1), x)])]


def _kept(builder: GradientBuilder, op: Op, tensor: Tensor) -> Tensor:
    """A reduction's result (or its gradient) with its reduced axes kept as 1."""
    shape = op.input(0).shape
    axes = reduced_axes(op, len(shape)) or ()
    return reshape(builder, tensor, tuple(1 if a in axes else d for a, d in enumerate(shape)))


def _of_result(formula: Callable[[GradientBuilder, Op, Tensor, Tensor], Tensor]
               ) -> GradientRule:
    """A reduction's rule from ``formula(builder, op, dY, Y)`` (both with the reduced
    axes kept) giving dX; the identity's gradient passes."""
    def rule(builder: GradientBuilder, op: Op,
             grads: Sequence[Tensor | None]) -> list[Tensor | None]:
        if grads[0] is None:
            return [None]
        if reduced_axes(op, len(op.input(0).shape)) is None:
            return [grads[0]]
        return [formula(builder, op, _kept(builder, op, grads[0]),
                        _kept(builder, op, op.output(0)))]
    return rule


def _to_extreme(builder: GradientBuilder, op: Op, grad: Tensor, result: Tensor) -> Tensor:
    """ReduceMax, ReduceMin: dY at the extreme, shared evenly among tied elements."""
    x = op.input(0)
    return shared_among_maxima(builder, x, result, grad, reduced_axes(op, len(x.shape)))


def _l2(builder: GradientBuilder, op: Op, grad: Tensor, result: Tensor) -> Tensor:
    """ReduceL2: dX = dY · X / Y (infinite where Y is 0, as the derivative of the norm)."""
    return one(builder, "Mul", [grad, one(builder, "Div", [op.input(0), result])])


def _sum_square(builder: GradientBuilder, op: Op, grad: Tensor, result: Tensor) -> Tensor:
    """ReduceSumSquare: dX = 2 · X · dY."""
    x = op.input(0)
    return one(builder, "Mul", [grad, one(builder, "Mul", [x, scalar(builder, 2.0, x)])])


def _log_sum_exp(builder: GradientBuilder, op: Op, grad: Tensor, result: Tensor) -> Tensor:
    """ReduceLogSumExp: dX = dY · exp(X − Y), the softmax over the reduced axes."""
    return one(builder, "Mul", [grad, one(builder, "Exp", [
        one(builder, "Sub", [op.input(0), result])])])


def _l1(builder: GradientBuilder, op: Op, grad: Tensor, result: Tensor) -> Tensor:
    """ReduceL1: dX = dY · sign(X) (0 at 0)."""
    return one(builder, "Mul", [grad, one(builder, "Sign", [op.input(0)])])


def _log_sum(builder: GradientBuilder, op: Op, grad: Tensor, result: Tensor) -> Tensor:
    """ReduceLogSum: dX = dY / Σ X = dY · exp(−Y), broadcast back over the reduced axes."""
    quotient = one(builder, "Mul", [grad, one(builder, "Exp", [one(builder, "Neg", [result])])])
    return one(builder, "Expand", [quotient, int64s(builder, op.input(0).shape)])


def _shifted(builder: GradientBuilder, rows: Tensor, by: int, later: bool) -> Tensor:
    """``rows`` [R, K] moved ``by`` places along its last axis, ones filling in: element j
    becomes element j − by (or j + by, ``later``)."""
    count, k = rows.shape
    start, end = (by, k) if later else (0, k - by)
    kept = one(builder, "Slice", [rows, int64s(builder, [start]), int64s(builder, [end]),
                                  int64s(builder, [1])])
    ones = one(builder, "Expand", [scalar(builder, 1.0, rows), int64s(builder, [count, by])])
    return one(builder, "Concat", [kept, ones] if later else [ones, kept], {"axis": 1})


def _exclusive_products(builder: GradientBuilder, rows: Tensor, later: bool) -> Tensor:
    """Along the last axis of ``rows`` [R, K]: each element's product of the elements
    before it (after it, ``later``), 1 for none. A doubling scan: log2(K) products of the
    partial products with themselves shifted."""
    scan, by = _shifted(builder, rows, 1, later), 1
    while by < rows.shape[1]:
        scan = one(builder, "Mul", [scan, _shifted(builder, scan, by, later)])
        by *= 2
    return scan


def _reduce_prod_gradient(builder: GradientBuilder, op: Op,
                          grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX = dY times the product of the other elements of X's group (PopART's
    ReduceProdGradOp), built without dividing the product by X, so exact where X holds
    zeros: the reduced axes moved last and flattened, the product of the others is the
    product of those before times the product of those after (``_exclusive_products``)."""
    grad, x = grads[0], op.input(0)
    if grad is None:
        return [None]
    shape = tuple(x.shape)
    axes = reduced_axes(op, len(shape))
    if axes is None:
        return [grad]
    perm = [a for a in range(len(shape)) if a not in axes] + list(axes)
    moved = tuple(shape[a] for a in perm)
    count = math.prod(shape[a] for a in axes)
    rows = math.prod(moved[:len(moved) - len(axes)])
    if not count * rows:
        return [zeros(builder, shape, x)]  # no elements: an empty gradient
    flat = reshape(builder, transpose(builder, x, perm), (rows, count))
    if count == 1:
        others = one(builder, "Expand", [scalar(builder, 1.0, x), int64s(builder, (rows, 1))])
    else:
        others = one(builder, "Mul", [_exclusive_products(builder, flat, False),
                                      _exclusive_products(builder, flat, True)])
    column = reshape(builder, transpose(builder, _kept(builder, op, grad), perm), (rows, 1))
    spread = reshape(builder, one(builder, "Mul", [others, column]), moved)
    return [transpose(builder, spread, [perm.index(a) for a in range(len(shape))])]


_REDUCTION_GRADIENTS: dict[str, GradientRule] = {
    "ReduceSum": _reduce_sum_gradient,
    "ReduceMean": _reduce_mean_gradient,
    "ReduceMax": _of_result(_to_extreme),
    "ReduceMin": _of_result(_to_extreme),
    "ReduceL2": _of_result(_l2),
    "ReduceSumSquare": _of_result(_sum_square),
    "ReduceLogSumExp": _of_result(_log_sum_exp),
    "ReduceL1": _of_result(_l1),
    "ReduceLogSum": _of_result(_log_sum),
    "ReduceProd": _reduce_prod_gradient,
}

#: Every reduction but ReduceLogSum counts as reducing what it reads
#: (``OpDef.reduces_input``), as the elementwise layouts have always been chosen.
_NOT_REDUCING_INPUT = frozenset({"ReduceLogSum"})
for _name in REDUCTIONS:
    register(OpDef(_name, infer=_infer_reduce, fold=_fold_reduce, layout=REDUCTION,
                   reduces_input=_name not in _NOT_REDUCING_INPUT,
                   gradient=_REDUCTION_GRADIENTS.get(_name)))
register(OpDef("ArgMax", infer=_infer_arg, fold=_fold_arg, layout=ARG_REDUCTION))
register(OpDef("ArgMin", infer=_infer_arg, fold=_fold_arg, layout=ARG_REDUCTION))


# -- Softmax, LogSoftmax, LayerNormalization, BatchNormalization --------------------------
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


def _softmax_axis(op: Op, rank: int) -> int:
    default = -1 if op.type.version >= 13 else 1
    return normalize_axis(op, op.attributes.get("axis", default), max(rank, 1))


def _infer_softmax(op: Op) -> list:
    shape = input_shape(op, 0)
    _softmax_axis(op, len(shape))
    return [(_floats(op, 0), shape)]


def _softmax_view(op: Op, x: np.ndarray) -> tuple[np.ndarray, int] | None:
    """The array a softmax-like op works on and the axis it normalises along: before opset
    13 the input is seen as 2-D (axes before ``axis`` x the rest), from 13 as it is. None
    when the input is too large to fold or a scalar."""
    if x.size > FOLD_MAX_ELEMENTS or x.ndim == 0:
        return None
    axis = _softmax_axis(op, x.ndim)
    if op.type.version >= 13:
        return x, axis
    return x.reshape(math.prod(x.shape[:axis]), -1), 1


def _fold_softmax(op: Op, constants) -> list | None:
    x = constants[0]
    view = None if x is None else _softmax_view(op, x)
    if view is None:
        return None
    work, reduce_axis = view
    shifted = work - work.max(axis=reduce_axis, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(axis=reduce_axis, keepdims=True))
    log_probs = shifted - log_sum
    result = log_probs if op.type.name == "LogSoftmax" else np.exp(log_probs)
    return [result.reshape(x.shape).astype(x.dtype)]


def _fold_hardmax(op: Op, constants) -> list | None:
    """ONNX's Hardmax: 1 where the first maximum along the axis lies (before opset 13, along
    the 2-D view's rows, as Softmax), 0 elsewhere."""
    x = constants[0]
    view = None if x is None else _softmax_view(op, x)
    if view is None:
        return None
    work, along = view
    result = np.zeros_like(work)
    if work.size:
        first = np.expand_dims(np.argmax(work, axis=along), along)
        np.put_along_axis(result, first, 1, axis=along)
    return [result.reshape(x.shape)]


# -- LayerNormalization, BatchNormalization ------------------------------------------------
def stash_dtype(op: Op) -> str:
    """The type LayerNormalization computes its statistics in (``stash_type``)."""
    return {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}.get(
        op.attributes.get("stash_type", 1), "float32")


def _infer_layer_norm(op: Op) -> list:
    shape = input_shape(op, 0)
    axis = normalize_axis(op, op.attributes.get("axis", -1), max(len(shape), 1))
    normalized = shape[axis:]
    _broadcasts_to(op, 1, normalized, "Scale")
    if op.has_input(2):
        _broadcasts_to(op, 2, normalized, "B")
    stats = shape[:axis] + (1,) * (len(shape) - axis)
    stash = stash_dtype(op)
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


def _softmax_axes(op: Op, rank: int) -> tuple[int, ...]:
    """The axes a softmax normalises over: its axis (opset 13 on), or every axis from it
    (earlier opsets see the input as 2-D)."""
    if not rank:
        return ()
    axis = _softmax_axis(op, rank)
    return (axis,) if op.type.version >= 13 else tuple(range(axis, rank))


def _with_statistics(need: ExchangeNeed, shape: tuple[int, ...], axes: tuple[int, ...],
                     output_tiles: np.ndarray, dtype: str, target: TileMachine) -> ExchangeNeed:
    """``need`` plus two statistics along ``axes`` (``statistics_need``), when there are
    axes and elements."""
    if not axes or not math.prod(shape):
        return need
    return need + statistics_need(shape, axes, np.asarray(output_tiles).reshape(-1), dtype,
                                  2, target)


#: The vertices popnn's stable softmax runs over every element (``softmaxImpl``,
#: lib/popnn/NonLinearity.cpp): the maximum along the axis (a reduction), x - max, exp, the
#: sum (a reduction), times 1 / sum; LogSoftmax (lib/popnn/LogSoftmax.cpp) ends with
#: x - log(sum) instead, a vertex of the same cost. The inverse and the log of the sums run
#: over the statistics only, and are left out. The two reductions are Poplibs' reduce
#: vertices (``SOFTMAX_REDUCTIONS``, ``reduction_cycles``); the three passes here are
#: elementwise.
SOFTMAX_PASSES = (None, "EXPONENT", None)
SOFTMAX_REDUCTIONS = ("MAX", "ADD")
#: The vertices Poplibs' norms run over every activation (``poplin::normStatistics``,
#: ``normWhiten`` and ``normalise``, lib/poplin/Norms.cpp, the passes its flop estimate
#: ``getNormFwdFlops`` counts, lib/popnn/Norms.cpp): the sum and the sum of squares (two
#: reductions: ``NORM_REDUCTIONS``, Poplibs' reduce vertices), x - mean, times 1 / std,
#: times gamma, plus beta (``NORM_PASSES``, elementwise); without statistics (a batch norm
#: in inference, ``batchNormalise`` with a combined scale) the last two only.
NORM_PASSES = (None, None, None, None)
NORM_REDUCTIONS = ("ADD", "SQUARE_ADD")
NORM_PASSES_WITHOUT_STATISTICS = (None, None)


class SoftmaxRule(ElementwiseRule):
    """Softmax, LogSoftmax: elementwise on the input (PopART's ``SoftmaxOpx`` is an
    ``ElementWiseUnaryOutplaceOpx``: the result is a clone of the input, and the creator
    search passes through, ``willow/src/popx/op/softmaxx.cpp``), plus the max and the sum
    along the axes, each a reduction broadcast back (``statistics_need``)."""

    def __init__(self) -> None:
        super().__init__(data_inputs=(0,))

    def exchange(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                 target: TileMachine) -> ExchangeNeed:
        need = super().exchange(op, input_tiles, output_tiles, target)
        shape = known_shape(op, op.input(0))
        return _with_statistics(need, shape, _softmax_axes(op, len(shape)), output_tiles[0],
                                op.input(0).dtype, target)

    def vertex_passes(self, op: Op) -> tuple[str | None, ...]:
        if op.type.name in ("Softmax", "LogSoftmax"):
            return SOFTMAX_PASSES
        return super().vertex_passes(op)  # Hardmax: one vertex

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """The elementwise passes, then the maximum and the sum along the axes."""
        work = super().work(op, input_tiles, output_tiles, target)
        if op.type.name not in ("Softmax", "LogSoftmax"):
            return work
        shape = known_shape(op, op.input(0))
        return _plus_reductions(work, shape, _softmax_axes(op, len(shape)), output_tiles[0],
                                op.input(0).dtype, SOFTMAX_REDUCTIONS, target)


def _norm_axes(op: Op, rank: int) -> tuple[int, ...]:
    axis = normalize_axis(op, op.attributes.get("axis", -1), max(rank, 1))
    return tuple(range(axis, rank))


class LayerNormRule(ElementwiseRule):
    """LayerNormalization: Y is laid out like X; Scale and B are broadcast operands tied,
    like a bias in Add, to the broadcast-operand layout of X (a ``sum_like`` with X as its
    unwind input); Mean and InvStdDev are reductions of X (roots depending on its layout,
    laid out as ``popops::reduce`` lays them out), broadcast back to normalise, so their
    exchange is counted as ``statistics_need``'s. PopART has no layer-norm Opx: models
    reach it as ``GroupNormOpx`` (one group), which keeps ``Opx``'s Deadend
    (``willow/src/popx/op/groupnormx.cpp``)."""

    def __init__(self) -> None:
        super().__init__(data_inputs=(0, 1, 2), popart_unwinds=False)

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        operands = self.operands(op)
        full = self._full(op)
        if not operands or operands[0][0] != 0 or 0 not in full:
            emitter.barrier(op)
            return
        values = {"default": emitter.valuations.elementwise}
        for k in range(1, len(operands)):
            if k not in full:
                values[(0, k)] = emitter.valuations.bias
        out = op.output(0)
        result = emitter.graph.sum_like([emitter.tensor(t) for _, t in operands], [0], values,
                                        name=out.id)
        emitter.define(out, result.out)
        statistics = [i for i in op.output_map() if i > 0]
        if statistics:
            emitter.barrier(op, statistics)

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        x = op.input(0)
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None:
            return LayoutRule.output_tiles(self, op, input_tiles, target)
        shape = known_shape(op, x)
        axes = _norm_axes(op, len(shape))
        layouts = []
        for index in op.output_map():
            if index == 0:
                layouts.append(tiles.copy())
            else:
                out = op.output(index)
                layouts.append(statistic_tiles(reduction_groups(shape, axes), tiles,
                                               math.prod(known_shape(op, out)),
                                               stash_dtype(op), target))
        return layouts

    def exchange(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                 target: TileMachine) -> ExchangeNeed:
        need = super().exchange(op, input_tiles, output_tiles[:1], target)
        shape = known_shape(op, op.input(0))
        return _with_statistics(need, shape, _norm_axes(op, len(shape)), output_tiles[0],
                                stash_dtype(op), target)

    def vertex_passes(self, op: Op) -> tuple[str | None, ...]:
        return NORM_PASSES

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """The elementwise passes, then the sum and the sum of squares along the axes."""
        work = super().work(op, input_tiles, output_tiles, target)
        shape = known_shape(op, op.input(0))
        return _plus_reductions(work, shape, _norm_axes(op, len(shape)), output_tiles[0],
                                op.input(0).dtype, NORM_REDUCTIONS, target, stash_dtype(op))


def _plus_reductions(work: OpWork, shape: tuple[int, ...], axes: tuple[int, ...],
                     tiles: np.ndarray, dtype: str, operations: tuple[str, ...],
                     target: TileMachine, result_dtype: str | None = None) -> OpWork:
    """``work`` plus ``reduction_cycles``' cycles of the reductions along ``axes``."""
    return dataclasses.replace(work, compute_cycles=work.compute_cycles + reduction_cycles(
        shape, axes, tiles, dtype, operations, target, result_dtype))


SOFTMAX = SoftmaxRule()
LAYER_NORM = LayerNormRule()

def _softmax_gradient(builder: GradientBuilder, op: Op,
                      grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """``dX = Y · (dY − Σ dY·Y)`` over the softmax's axes (PopART's SoftmaxGradOp)."""
    grad, y = grads[0], op.output(0)
    if grad is None:
        return [None]
    axes = int64s(builder, _softmax_axes(op, len(y.shape)))
    product = one(builder, "Mul", [grad, y])
    total = one(builder, "ReduceSum", [product, axes], {"keepdims": 1})
    return [one(builder, "Sub", [product, one(builder, "Mul", [y, total])])]


def _log_softmax_gradient(builder: GradientBuilder, op: Op,
                          grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """``dX = dY − exp(Y) · Σ dY`` over the axes (PopART's LogSoftmaxGradOp)."""
    grad, y = grads[0], op.output(0)
    if grad is None:
        return [None]
    axes = int64s(builder, _softmax_axes(op, len(y.shape)))
    total = one(builder, "ReduceSum", [grad, axes], {"keepdims": 1})
    return [one(builder, "Sub", [grad, one(builder, "Mul", [one(builder, "Exp", [y]),
                                                            total])])]


register(OpDef("Softmax", infer=_infer_softmax, fold=_fold_softmax, layout=SOFTMAX,
               reduces_input=True, gradient=_softmax_gradient))
register(OpDef("LogSoftmax", infer=_infer_softmax, fold=_fold_softmax, layout=SOFTMAX,
               reduces_input=True, gradient=_log_softmax_gradient))
#: Hardmax reads its input as Softmax does: the maximum along the axis, broadcast back.
register(OpDef("Hardmax", infer=_infer_softmax, fold=_fold_hardmax, layout=SOFTMAX,
               reduces_input=True))
def _fold_layer_norm(op: Op, constants) -> list | None:
    """ONNX's LayerNormalization on constants: the normalised result, the mean and the
    inverse standard deviation over the axes from ``axis`` on, in the stash type."""
    x, scale = constants[0], constants[1]
    bias = constants[2] if len(constants) > 2 else None
    if x is None or scale is None or (op.has_input(2) and bias is None):
        return None
    if x.size > FOLD_MAX_ELEMENTS or x.ndim == 0 or x.dtype.kind != "f":
        return None
    axis = normalize_axis(op, op.attributes.get("axis", -1), x.ndim)
    axes = tuple(range(axis, x.ndim))
    wide = x.astype(numpy_dtype(stash_dtype(op)))
    mean = wide.mean(axis=axes, keepdims=True)
    inverse = 1 / np.sqrt(((wide - mean) ** 2).mean(axis=axes, keepdims=True)
                          + op.attributes.get("epsilon", 1e-5))
    result = (wide - mean) * inverse * scale
    if bias is not None:
        result = result + bias
    values = [result.astype(x.dtype), mean.astype(wide.dtype), inverse.astype(wide.dtype)]
    return [values[index] for index in op.output_map()]


def _layer_norm_statistics(builder: GradientBuilder, op: Op,
                           axes: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and inverse standard deviation of X over the normalised axes, in X's type:
    the op's own outputs where it has them, else computed again."""
    x = op.input(0)
    if op.has_output(1) and op.has_output(2):
        mean, inverse = op.output(1), op.output(2)
        if mean.dtype != x.dtype:
            to = {"to": ONNX_DTYPES[x.dtype]}
            mean, inverse = (one(builder, "Cast", [t], to) for t in (mean, inverse))
        return mean, inverse
    mean = one(builder, "ReduceMean", [x, axes], {"keepdims": 1})
    centred = one(builder, "Sub", [x, mean])
    var = one(builder, "ReduceMean", [one(builder, "Mul", [centred, centred]), axes],
              {"keepdims": 1})
    eps = scalar(builder, float(op.attributes.get("epsilon", 1e-5)), x)
    return mean, one(builder, "Reciprocal", [one(builder, "Sqrt", [
        one(builder, "Add", [var, eps])])])


def _normalised_input_gradient(builder: GradientBuilder, g: Tensor, normalised: Tensor,
                               inverse: Tensor, axes: Tensor) -> Tensor:
    """dX of ``x̂ = (X − mean) · r`` (mean and ``r = 1 / sqrt(var + eps)`` over ``axes``)
    from ``g``, the gradient of x̂: ``r · (g − mean(g) − x̂ · mean(g · x̂))``."""
    g_mean = one(builder, "ReduceMean", [g, axes], {"keepdims": 1})
    gx_mean = one(builder, "ReduceMean", [one(builder, "Mul", [g, normalised]), axes],
                  {"keepdims": 1})
    inner = one(builder, "Sub", [one(builder, "Sub", [g, g_mean]),
                                 one(builder, "Mul", [normalised, gx_mean])])
    return one(builder, "Mul", [inner, inverse])


def _layer_norm_gradient(builder: GradientBuilder, op: Op,
                         grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """With ``x̂ = (X − mean) · r`` and ``g = dY · Scale``: ``dX = r · (g − mean(g) −
    x̂ · mean(g · x̂))`` over the normalised axes, ``dScale = Σ dY · x̂`` and ``dB = Σ dY``
    over the axes each was broadcast along (PopART's LayerNormGradOp, its GroupNormGradOp
    with one group)."""
    grad = grads[0]
    if grad is None:
        return [None, None, None]
    x, scale = op.input(0), op.input(1)
    axes = int64s(builder, _norm_axes(op, len(x.shape)))
    mean, inverse = _layer_norm_statistics(builder, op, axes)
    normalised = one(builder, "Mul", [one(builder, "Sub", [x, mean]), inverse])
    found: list[Tensor | None] = [None, None, None]
    if is_differentiable(x):
        found[0] = _normalised_input_gradient(builder, one(builder, "Mul", [grad, scale]),
                                              normalised, inverse, axes)
    if is_differentiable(scale):
        found[1] = sum_to_shape(builder, one(builder, "Mul", [grad, normalised]), scale.shape)
    if op.has_input(2) and is_differentiable(op.input(2)):
        found[2] = sum_to_shape(builder, grad, op.input(2).shape)
    return found


register(OpDef("LayerNormalization", infer=_infer_layer_norm, fold=_fold_layer_norm,
               norm=True, reduces_input=True, layout=LAYER_NORM,
               gradient=_layer_norm_gradient))
class BatchNormRule(LayoutRule):
    """BatchNormalization: Y is laid out like X; scale, B, mean and var hold one value per
    channel (axis 1) and are read like a convolution's bias: in the unwinding problem each
    is reshaped to ``[1, C, 1, ...]`` and tied (bias value) to the broadcast-operand layout
    of X through a ``sum_like``. In training mode the batch's mean and variance are
    reductions over every axis but the channels, broadcast back (``statistics_need``), and
    the running statistics it outputs are laid out as those reductions' results. PopART's
    ``BatchNormOpx`` keeps ``Opx``'s Deadend (``willow/src/popx/op/batchnormx.cpp``)."""

    kind = "norm"

    @staticmethod
    def _channel_shape(op: Op) -> tuple[int, ...]:
        shape = known_shape(op, op.input(0))
        return (1, shape[1]) + (1,) * (len(shape) - 2)

    @staticmethod
    def training(op: Op) -> bool:
        """Opset 14 on: the ``training_mode`` attribute; before, any output past Y."""
        if op.type.version >= 14:
            return bool(op.attributes.get("training_mode", 0))
        return any(index > 0 for index in op.output_map())

    @staticmethod
    def _axes(op: Op) -> tuple[int, ...]:
        rank = len(known_shape(op, op.input(0)))
        return (0, *range(2, rank))

    def vertex_passes(self, op: Op) -> tuple[str | None, ...]:
        return NORM_PASSES if self.training(op) else NORM_PASSES_WITHOUT_STATISTICS

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """The elementwise passes, then in training the batch's sums over every axis but
        the channels."""
        work = super().work(op, input_tiles, output_tiles, target)
        if not self.training(op) or not self._modelled(op):
            return work
        return _plus_reductions(work, known_shape(op, op.input(0)), self._axes(op),
                                output_tiles[0], op.input(0).dtype, NORM_REDUCTIONS, target)

    def _params(self, op: Op) -> list[int]:
        """The input indices of the per-channel operands, each tensor once and not X."""
        seen = {op.input(0).id}
        found = []
        for index, tensor in op.input_map().items():
            if index > 0 and tensor.id not in seen:
                seen.add(tensor.id)
                found.append(index)
        return found

    def _modelled(self, op: Op) -> bool:
        return len(known_shape(op, op.input(0))) >= 2

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        if not self._modelled(op):
            emitter.barrier(op)
            return
        graph, channel = emitter.graph, self._channel_shape(op)
        x, out = emitter.tensor(op.input(0)), op.output(0)
        emitter.define(out, graph.sum_like([x], [0], emitter.valuations.elementwise,
                                           name=out.id).out)
        for i in self._params(op):  # one pair each with X, never between two operands
            operand = graph.reshape(emitter.tensor(op.input(i)), channel)
            graph.sum_like([x, operand], [0], emitter.valuations.bias)
        statistics = [i for i in op.output_map() if i > 0]
        if statistics:
            emitter.barrier(op, statistics)

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None or not self._modelled(op):
            return super().output_tiles(op, input_tiles, target)
        shape = known_shape(op, op.input(0))
        groups = reduction_groups(shape, self._axes(op))
        layouts = []
        for index, tensor in op.output_map().items():
            if index == 0:
                layouts.append(tiles.copy())
            else:
                layouts.append(statistic_tiles(groups, tiles, shape[1], tensor.dtype, target))
        return layouts

    def exchange(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                 target: TileMachine) -> ExchangeNeed:
        """Each per-channel operand read by Y's tiles, as a bias; in training, the batch
        statistics."""
        need = ExchangeNeed.none(target.num_tiles)
        if not self._modelled(op):
            return need
        x = op.input(0)
        shape, channel = known_shape(op, x), self._channel_shape(op)
        readers = np.asarray(output_tiles[0]).reshape(-1)
        index = broadcast_index(channel, shape)
        for i in self._params(op):
            tiles = flat_tiles(input_tiles, i)
            if tiles is not None:
                need = need + read_need(readers, index, tiles,
                                        target.dtype_size(op.input(i).dtype), target.num_tiles)
        if self.training(op) and math.prod(shape):
            need = need + statistics_need(shape, self._axes(op), readers, x.dtype, 2, target)
        return need

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations) -> tuple[float, float]:
        x_tiles = flat_tiles(input_tiles, 0)
        if not self._modelled(op):
            return 0.0, 0.0
        shape, channel = known_shape(op, op.input(0)), self._channel_shape(op)
        wanted = None if x_tiles is None else \
            target.broadcast_operand_tiles(x_tiles, shape, channel)
        score = bound = 0.0
        for i in self._params(op):
            bound += valuations.bias * shape[1]
            tiles = flat_tiles(input_tiles, i)
            if wanted is not None and tiles is not None:
                score += valuations.bias * count_equal(tiles, wanted)
        return score, bound

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """A per-channel operand where most of its channel lies in Y."""
        if index not in self._params(op) or not self._modelled(op):
            return None
        return np.asarray(target.broadcast_operand_tiles(
            np.asarray(output_tiles[0]).reshape(-1), known_shape(op, op.input(0)),
            self._channel_shape(op))).reshape(-1)

    def least_received(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                       planned: set[int], target: TileMachine) -> int:
        """A planned X could hold each channel on one tile with its operands: nothing."""
        if 0 in planned:
            return 0
        return super().least_received(op, input_tiles, output_tiles, planned, target)


def _fold_batch_norm(op: Op, constants) -> list | None:
    """``(x - mean) / sqrt(var + eps) · scale + B`` per channel (axis 1): the running
    statistics given, or in training mode (opset 14 on) the batch's own, its mean and
    population variance over every axis but the channels, with the running statistics
    moved towards them: ``momentum · running + (1 − momentum) · batch``."""
    training = BatchNormRule.training(op)
    if (training and op.type.version < 14) or any(c is None for c in constants[:5]):
        return None  # before opset 14 ONNX leaves the saved statistics' meaning open
    x = constants[0]
    if x.size > FOLD_MAX_ELEMENTS or x.ndim < 2 or x.dtype.kind != "f":
        return None
    column = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    scale, bias, mean, var = (np.asarray(c).reshape(column) for c in constants[1:5])
    eps = op.attributes.get("epsilon", 1e-5)
    if not training:
        return [((x - mean) / np.sqrt(var + eps) * scale + bias).astype(x.dtype)]
    axes = (0, *range(2, x.ndim))
    batch_mean = x.mean(axis=axes, keepdims=True)
    batch_var = x.var(axis=axes, keepdims=True)
    momentum = op.attributes.get("momentum", 0.9)
    result = (x - batch_mean) / np.sqrt(batch_var + eps) * scale + bias
    running = [momentum * held + (1 - momentum) * batch
               for held, batch in ((mean, batch_mean), (var, batch_var))]
    values = [result.astype(x.dtype)] + [r.reshape(-1).astype(constants[3].dtype)
                                         for r in running]
    return values[:max(op.output_map(), default=0) + 1]


def _batch_norm_gradient(builder: GradientBuilder, op: Op,
                         grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Inference form, the statistics given: with ``r = 1 / sqrt(var + eps)`` per channel,
    ``dX = dY · scale · r``, ``dScale = Σ dY · (X − mean) · r`` and ``dB = Σ dY`` over all
    axes but the channels; the running mean and variance are statistics, with none.
    Training mode: ``_batch_norm_training_gradient``."""
    if BatchNormRule.training(op):
        return _batch_norm_training_gradient(builder, op, grads)
    grad = grads[0]
    if grad is None:
        return [None] * 5
    x, scale, mean, var = (op.input(i) for i in (0, 1, 3, 4))
    column = BatchNormRule._channel_shape(op)
    axes = int64s(builder, BatchNormRule._axes(op))
    eps = scalar(builder, float(op.attributes.get("epsilon", 1e-5)), var)
    inverse = reshape(builder, one(builder, "Reciprocal", [one(builder, "Sqrt", [
        one(builder, "Add", [var, eps])])]), column)
    found: list[Tensor | None] = [None] * 5
    if is_differentiable(x):
        found[0] = one(builder, "Mul", [grad, one(builder, "Mul", [
            reshape(builder, scale, column), inverse])])
    if is_differentiable(scale):
        normalised = one(builder, "Mul", [
            one(builder, "Sub", [x, reshape(builder, mean, column)]), inverse])
        found[1] = one(builder, "ReduceSum", [one(builder, "Mul", [grad, normalised]), axes],
                       {"keepdims": 0})
    if is_differentiable(op.input(2)):
        found[2] = one(builder, "ReduceSum", [grad, axes], {"keepdims": 0})
    return found


def _batch_norm_training_gradient(builder: GradientBuilder, op: Op,
                                  grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Training mode (opset 14 on; PopART's BatchNormGradOp): Y normalises X by the batch's
    mean and population variance, so the gradient flows through them, as LayerNorm's does
    through its statistics (``_normalised_input_gradient``, over every axis but the
    channels); ``dScale = Σ dY · x̂``, ``dB = Σ dY``. The running statistics ``momentum ·
    input + (1 − momentum) · batch`` pass a gradient where one reaches them: to the input
    statistics (× momentum) and to X through the batch's. The statistics are computed again
    here (opset 14 outputs no saved ones; PopART's grad op reads the forward's). Before
    opset 14 a training-mode op (five outputs) is refused, naming the op: ONNX leaves what
    its saved statistics hold open."""
    if op.type.version < 14:
        raise IrError(f"op {op.debug_name()} (BatchNormalization): no gradient rule for "
                      f"training mode before opset 14 (opset {op.type.version}, outputs "
                      f"past Y); training_mode=1 from opset 14 has one")
    grad = grads[0]
    grad_mean, grad_var = (grads[i] if len(grads) > i else None for i in (1, 2))
    x, scale = op.input(0), op.input(1)
    column = BatchNormRule._channel_shape(op)
    axes = int64s(builder, BatchNormRule._axes(op))
    count = math.prod(x.shape) // x.shape[1]
    momentum = float(op.attributes.get("momentum", 0.9))
    mean = one(builder, "ReduceMean", [x, axes], {"keepdims": 1})
    centred = one(builder, "Sub", [x, mean])
    var = one(builder, "ReduceMean", [one(builder, "Mul", [centred, centred]), axes],
              {"keepdims": 1})
    eps = scalar(builder, float(op.attributes.get("epsilon", 1e-5)), x)
    inverse = one(builder, "Reciprocal", [one(builder, "Sqrt", [one(builder, "Add", [var, eps])])])
    normalised = one(builder, "Mul", [centred, inverse])
    found: list[Tensor | None] = [None] * 5
    parts = []
    if grad is not None:
        if is_differentiable(x):
            scaled = one(builder, "Mul", [grad, reshape(builder, scale, column)])
            parts.append(_normalised_input_gradient(builder, scaled, normalised, inverse, axes))
        if is_differentiable(scale):
            found[1] = one(builder, "ReduceSum", [one(builder, "Mul", [grad, normalised]),
                                                  axes], {"keepdims": 0})
        if is_differentiable(op.input(2)):
            found[2] = one(builder, "ReduceSum", [grad, axes], {"keepdims": 0})
    share = scalar(builder, (1.0 - momentum) / count, x)
    if x.dtype != op.input(3).dtype:  # statistics kept in another type than X
        to = {"to": ONNX_DTYPES[x.dtype]}
        grad_mean, grad_var = (None if g is None else one(builder, "Cast", [g], to)
                               for g in (grad_mean, grad_var))
    if grad_mean is not None and is_differentiable(x):
        parts.append(one(builder, "Expand", [
            one(builder, "Mul", [reshape(builder, grad_mean, column), share]),
            int64s(builder, x.shape)]))
    if grad_var is not None and is_differentiable(x):
        twice = one(builder, "Mul", [reshape(builder, grad_var, column), share])
        parts.append(one(builder, "Mul", [centred, one(builder, "Add", [twice, twice])]))
    if parts:
        found[0] = parts[0] if len(parts) == 1 else one(builder, "Sum", parts)
    for index in (3, 4):
        held = grads[index - 2] if len(grads) > index - 2 else None
        if held is not None and is_differentiable(op.input(index)):
            found[index] = one(builder, "Mul", [held, scalar(builder, momentum, held)])
    return found


BATCH_NORM = BatchNormRule()
register(OpDef("BatchNormalization", infer=_infer_batch_norm, fold=_fold_batch_norm,
               norm=True, reduces_input=True, layout=BATCH_NORM,
               gradient=_batch_norm_gradient))
# PopART's ai.graphcore BatchNormalization: ONNX's BatchNormalization-9 (its version, 1, is
# below 14: training when an output past Y is used) with an ``unbiased_variance`` attribute,
# which only changes how the running variance moves in training, a value not folded here.
register(OpDef("BatchNormalization", domain=GRAPHCORE_DOMAIN, infer=_infer_batch_norm,
               fold=_fold_batch_norm, norm=True, reduces_input=True, layout=BATCH_NORM,
               gradient=_batch_norm_gradient))


# -- NegativeLogLikelihoodLoss ------------------------------------------------------------
def _nll_reduction(op: Op) -> str:
    reduction = op.attributes.get("reduction", "mean")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in ("mean", "sum", "none"):
        raise ShapeError(f"op {op.debug_name()}: reduction must be mean, sum or none, got "
                         f"{reduction!r}")
    return reduction


def _infer_nll(op: Op) -> list:
    scores, target = input_shape(op, 0), input_shape(op, 1)
    if len(scores) < 2 or target != (scores[0], *scores[2:]):
        raise ShapeError(f"op {op.debug_name()}: input {scores} (N, C, d...) and target "
                         f"{target} (N, d...) do not match")
    if op.has_input(2) and input_shape(op, 2) != (scores[1],):
        raise ShapeError(f"op {op.debug_name()}: weight {input_shape(op, 2)} must be "
                         f"({scores[1]},)")
    shape = target if _nll_reduction(op) == "none" else ()
    return [(op.input(0).dtype, shape)]


def _fold_nll(op: Op, constants) -> list | None:
    scores, target = constants[0], constants[1]
    weight = constants[2] if len(constants) > 2 else None
    if scores is None or target is None or (op.has_input(2) and weight is None):
        return None
    ignored = op.attributes.get("ignore_index")
    kept = np.ones(target.shape, bool) if ignored is None else target != ignored
    safe = np.where(kept, target, 0)
    picked = np.take_along_axis(scores, np.expand_dims(safe, 1), axis=1).squeeze(1)
    weights = (np.ones_like(picked) if weight is None else weight[safe]) * kept
    loss = (-picked * weights).astype(scores.dtype)
    reduction = _nll_reduction(op)
    if reduction == "none":
        return [loss]
    if reduction == "sum":
        return [np.asarray(loss.sum(), scores.dtype)]
    return [np.asarray(loss.sum() / weights.sum(), scores.dtype)]


@pattern("NegativeLogLikelihoodLoss", name="expand-nll-loss")
def _expand_nll(op: Op, rewriter: Rewriter) -> bool:
    """The loss in the ops ONNX's own function body spells it with (GatherElements of the
    targets' scores along the classes, weights and ignored targets as masks, a sum or a
    mean), each with its layout rule; PopART's NllOp computes the same on the IPU."""
    scores, target = op.input(0), op.input(1)
    if scores.shape is None or target.shape is None:
        return False
    graph, dtype = op.graph, scores.dtype

    def make(name: str, inputs: list, **attributes) -> object:
        return rewriter.create_op(graph, name, inputs, attributes, like=op).output(0)

    def ints(values: list[int]) -> object:
        return rewriter.constant(graph, np.asarray(values, np.int64))

    ignored = op.attributes.get("ignore_index")
    safe = target
    weights = None
    if ignored is not None:
        hit = make("Equal", [target, rewriter.constant(graph, np.asarray(ignored,
                                                                          numpy_dtype(target.dtype)))])
        safe = make("Where", [hit, rewriter.constant(graph, np.asarray(0, numpy_dtype(
            target.dtype))), target])
        weights = make("Cast", [make("Not", [hit])], to=ONNX_DTYPES[dtype])
    picked = make("Squeeze", [make("GatherElements", [scores, make("Unsqueeze", [safe, ints([1])])],
                                   axis=1), ints([1])])
    if op.has_input(2):
        per_class = make("Gather", [op.input(2), safe], axis=0)
        weights = per_class if weights is None else make("Mul", [per_class, weights])
    loss = make("Neg", [picked])
    if weights is not None:
        loss = make("Mul", [loss, weights])
    reduction = _nll_reduction(op)
    if reduction != "none":
        axes = ints(list(range(len(target.shape))))
        loss = make("ReduceSum", [loss, axes], keepdims=0)
        if reduction == "mean":
            count = (make("ReduceSum", [weights, axes], keepdims=0) if weights is not None
                     else rewriter.constant(graph, np.asarray(math.prod(target.shape),
                                                              numpy_dtype(dtype))))
            loss = make("Div", [loss, count])
    rewriter.replace_op(op, [loss])
    return True


register(OpDef("NegativeLogLikelihoodLoss", infer=_infer_nll, fold=_fold_nll,
               patterns=(_expand_nll,)))
