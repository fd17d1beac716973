"""Op family: indexing — data read or written at given indices (Gather, GatherElements,
GatherND, ScatterND, ScatterElements, Scatter), with ONNX semantics. (Ops that resize a
tensor are ``ops/resizing.py``; ops defined by element positions, ``ops/positional.py``.)

Layouts: Gather on axis 0 is an embedding lookup (popops' multiSlice over a sliceable
table): the table is tied to a Source carrying popops' createSliceableTensor layout, and the
result is a barrier root, mapped linearly. PopART's ``GatherOpx`` creates the table with the
highest creator priority. ScatterND, ScatterElements and Scatter update their data in
place (Poplibs' multiUpdate / multiUpdateAdd): output and data share one layout and each
update element goes to its destination's tile. GatherElements is computed where its indices
lie. Indices unknown at plan time are assumed to spread uniformly (docs/ipu-model.md,
"Scatters and GatherElements"). GatherND is a barrier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.exchange import most_read_tiles, read_need
from popart_unwind.machine.interface import ExchangeNeed, TileMachine
from popart_unwind.ops.common import (
    FOLD_MAX_ELEMENTS,
    constant_value,
    input_shape,
    normalize_axis,
    small_constants,
)
from popart_unwind.ops.gradient import (
    GradientBuilder,
    int64s,
    is_differentiable,
    one,
    transpose,
)
from popart_unwind.ops.layout_rule import (
    InputTiles,
    LayoutRule,
    UnwindEmitter,
    count_equal,
    flat_tiles,
    known_shape,
)
from popart_unwind.ops.registry import OpDef, register

_INDEX_DTYPES = ("int32", "int64")


def _index_input(op: Op, index: int) -> tuple[int, ...]:
    if op.input(index).dtype not in _INDEX_DTYPES:
        raise ShapeError(f"op {op.debug_name()}: indices (input {index}) must be int32 or "
                         f"int64, got {op.input(index).dtype}")
    return input_shape(op, index)


def _in_range(indices: np.ndarray, size: int) -> np.ndarray | None:
    """Indices with negatives counted from the end, or None if any is out of range."""
    if indices.size and (indices.min() < -size or indices.max() >= size):
        return None
    return np.where(indices < 0, indices + size, indices)


# -- Gather family ------------------------------------------------------------------------
def _infer_gather(op: Op) -> list:
    data, indices = input_shape(op, 0), _index_input(op, 1)
    if not data:
        raise ShapeError(f"op {op.debug_name()}: cannot gather from a scalar")
    axis = normalize_axis(op, op.attributes.get("axis", 0), len(data))
    return [(op.input(0).dtype, data[:axis] + indices + data[axis + 1:])]


def _fold_gather(op: Op, constants) -> list | None:
    data, indices = constants[0], constants[1]
    if not small_constants(data, indices) or data.ndim == 0:
        return None
    axis = normalize_axis(op, op.attributes.get("axis", 0), data.ndim)
    checked = _in_range(indices, data.shape[axis])
    if checked is None or math.prod(op.output(0).shape or (0,)) > FOLD_MAX_ELEMENTS:
        return None
    return [np.take(data, checked, axis=axis)]


def _infer_gather_elements(op: Op) -> list:
    data, indices = input_shape(op, 0), _index_input(op, 1)
    if len(data) != len(indices) or not data:
        raise ShapeError(f"op {op.debug_name()}: data {data} and indices {indices} must "
                         f"have one rank >= 1")
    normalize_axis(op, op.attributes.get("axis", 0), len(data))
    return [(op.input(0).dtype, indices)]


def _element_index(op: Op, data: np.ndarray, indices: np.ndarray) -> tuple | None:
    """Full index arrays addressing ``data`` at each element of ``indices`` along axis."""
    axis = normalize_axis(op, op.attributes.get("axis", 0), data.ndim)
    checked = _in_range(indices, data.shape[axis])
    if checked is None:
        return None
    full = list(np.indices(indices.shape, sparse=True))
    full[axis] = checked
    return tuple(full)


def _fold_gather_elements(op: Op, constants) -> list | None:
    data, indices = constants[0], constants[1]
    if not small_constants(data, indices) or data.ndim == 0:
        return None
    where = _element_index(op, data, indices)
    return None if where is None else [data[where]]


def _infer_gather_nd(op: Op) -> list:
    data, indices = input_shape(op, 0), _index_input(op, 1)
    batch = op.attributes.get("batch_dims", 0)
    if not indices or data[:batch] != indices[:batch]:
        raise ShapeError(f"op {op.debug_name()}: indices {indices} do not fit data {data} "
                         f"with batch_dims {batch}")
    depth = indices[-1]
    if not 1 <= depth <= len(data) - batch:
        raise ShapeError(f"op {op.debug_name()}: index tuples of length {depth} do not fit "
                         f"data of rank {len(data)} with batch_dims {batch}")
    return [(op.input(0).dtype, indices[:-1] + data[batch + depth:])]


def _nd_where(data: np.ndarray, indices: np.ndarray) -> tuple | None:
    depth = indices.shape[-1]
    columns = []
    for axis in range(depth):
        checked = _in_range(indices[..., axis], data.shape[axis])
        if checked is None:
            return None
        columns.append(checked)
    return tuple(columns)


def _fold_gather_nd(op: Op, constants) -> list | None:
    data, indices = constants[0], constants[1]
    if not small_constants(data, indices) or op.attributes.get("batch_dims", 0):
        return None
    where = _nd_where(data, indices)
    return None if where is None else [data[where]]


register(OpDef("GatherND", infer=_infer_gather_nd, fold=_fold_gather_nd))


# -- Scatter family -----------------------------------------------------------------------
_REDUCE_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
#: ONNX's ScatterND / ScatterElements reductions: "none" overwrites (duplicate indices leave
#: the result unspecified), the others combine every update of an element with its data.
SCATTER_REDUCTIONS = ("none", *_REDUCE_UFUNCS)


def _check_reduction(op: Op) -> str:
    """The ``reduction`` attribute (opset 16 on): none, add or mul, and from opset 18 max
    or min; ShapeError for anything else."""
    reduction = op.attributes.get("reduction", "none")
    if reduction not in SCATTER_REDUCTIONS:
        raise ShapeError(f"op {op.debug_name()}: reduction {reduction!r} is not one of "
                         f"{', '.join(SCATTER_REDUCTIONS)}")
    return reduction


def _infer_scatter_nd(op: Op) -> list:
    _check_reduction(op)
    data, indices, updates = input_shape(op, 0), _index_input(op, 1), input_shape(op, 2)
    if not indices or not 1 <= indices[-1] <= len(data):
        raise ShapeError(f"op {op.debug_name()}: indices {indices} do not fit data {data}")
    expected = indices[:-1] + data[indices[-1]:]
    if updates != expected:
        raise ShapeError(f"op {op.debug_name()}: updates must have shape {expected}, got "
                         f"{updates}")
    return [(op.input(0).dtype, data)]


def _scatter(op: Op, data: np.ndarray, where: tuple, updates: np.ndarray) -> list | None:
    reduction = op.attributes.get("reduction", "none")
    result = data.copy()
    if reduction == "none":
        result[where] = updates
    elif reduction in _REDUCE_UFUNCS:
        _REDUCE_UFUNCS[reduction].at(result, where, updates)
    else:
        return None
    return [result]


def _fold_scatter_nd(op: Op, constants) -> list | None:
    data, indices, updates = constants[0], constants[1], constants[2]
    if not small_constants(data, indices, updates):
        return None
    where = _nd_where(data, indices)
    return None if where is None else _scatter(op, data, where, updates)


def _infer_scatter_elements(op: Op) -> list:
    _check_reduction(op)
    data, indices, updates = input_shape(op, 0), _index_input(op, 1), input_shape(op, 2)
    if indices != updates or len(indices) != len(data) or not data:
        raise ShapeError(f"op {op.debug_name()}: indices {indices} and updates {updates} "
                         f"must have one shape, of the rank of data {data}")
    normalize_axis(op, op.attributes.get("axis", 0), len(data))
    return [(op.input(0).dtype, data)]


def _fold_scatter_elements(op: Op, constants) -> list | None:
    data, indices, updates = constants[0], constants[1], constants[2]
    if not small_constants(data, indices, updates) or data.ndim == 0:
        return None
    where = _element_index(op, data, indices)
    return None if where is None else _scatter(op, data, where, updates)


# -- layouts ----------------------------------------------------------------------------
class GatherRule(LayoutRule):
    """Gather on axis 0 of a table: popops' multiSlice over a sliceable table."""

    kind = "gather"

    def worked_inputs(self, op: Op) -> list[int]:
        """The indices, not the table it copies rows from (the rows are the output)."""
        return [1]

    def table_dims(self, op: Op) -> tuple[int, int] | None:
        """(entries, embedding size) of the table, or None if this is not a table lookup."""
        table = known_shape(op, op.input(0))
        axis = int(op.attributes.get("axis", 0))
        if not table or axis not in (0, -len(table)) or not op.has_input(1):
            return None
        entries, size = table[0], prod(table[1:])
        return (entries, size) if entries and size else None

    def models(self, op: Op) -> bool:
        """Only a lookup into a table along axis 0 is modelled; any other Gather is a
        barrier whose exchange is not counted."""
        return self.table_dims(op) is not None

    def wanted_input_tiles(self, op: Op, in_index: int,
                           target: TileMachine) -> np.ndarray | None:
        """What popops would create: the table sliceable (createSliceableTensor), the
        indices linear from tile 0 (createIndicesTensor)."""
        dims = self.table_dims(op)
        if dims is None or in_index not in (0, 1):
            return None
        if in_index == 1:
            return target.indices_tiles(self._index_count(op))
        return target.sliceable_tiles(*dims, op.input(0).dtype)

    def _index_count(self, op: Op) -> int:
        return prod(known_shape(op, op.input(1)))

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        """The table paired with the sliceable layout. Producer-less indices that no
        path lays out take popops' layout for them (at least 32 a tile) on the tiles the
        other layouts fill least, rather than wherever the rotating linear mapper has
        got to: every tile of the table receives all the indices whatever their layout,
        so only the memory they take decides (no pair: the objective is unchanged)."""
        dims = self.table_dims(op)
        if dims is not None:
            table, indices = op.input(0), op.input(1)
            source = emitter.source(
                table, lambda target: target.sliceable_tiles(*dims, table.dtype),
                f"{op.debug_name()} table")
            emitter.graph.valued_pair(emitter.tensor(table), source,
                                      emitter.valuations.sliceable)
            count = self._index_count(op)
            if indices.producer is None and count:
                emitter.own_layout(indices, lambda target, preference:
                                   target.indices_tiles(count, preference),
                                   f"the layout popops gives {op.debug_name()}'s indices")
        emitter.barrier(op)

    def rows(self, op: Op) -> np.ndarray:
        """The table row each looked-up position reads: the constant indices when known,
        else row 0 for every position (a representative: under a column-split table every
        row of a column lies on the same tiles, so any row gives the same exchange)."""
        entries, _ = self.table_dims(op)
        indices = op.input(1)
        value = constant_value(indices)
        count = prod(known_shape(op, indices))
        if value is None or np.asarray(value).size != count:
            return np.zeros(count, dtype=np.int64)
        rows = np.asarray(value, dtype=np.int64).reshape(-1)
        rows = np.where(rows < 0, rows + entries, rows)
        return np.where((rows >= 0) & (rows < entries), rows, 0)

    def exchange(self, op: Op, input_tiles: InputTiles,
                 output_tiles: list[np.ndarray], target: TileMachine) -> ExchangeNeed:
        dims, table = self.table_dims(op), flat_tiles(input_tiles, 0)
        if dims is None or table is None:
            return super().exchange(op, input_tiles, output_tiles, target)
        _, size = dims
        reads = (self.rows(op)[:, None] * size + np.arange(size)[None, :]).reshape(-1)
        return read_need(np.asarray(output_tiles[0]).reshape(-1), reads, table,
                         target.dtype_size(op.input(0).dtype), target.num_tiles)

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations: Any) -> tuple[float, float]:
        dims = self.table_dims(op)
        if dims is None:
            return 0.0, 0.0
        bound = valuations.sliceable * prod(dims)
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None:
            return 0.0, bound
        wanted = target.sliceable_tiles(*dims, op.input(0).dtype)
        return valuations.sliceable * count_equal(tiles, wanted), bound

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """Each table element on the tile that reads it most (unread ones on tile 0)."""
        dims = self.table_dims(op)
        if index != 0 or dims is None:
            return None
        _, size = dims
        reads = (self.rows(op)[:, None] * size + np.arange(size)[None, :]).reshape(-1)
        return most_read_tiles(np.asarray(output_tiles[0]).reshape(-1), reads, prod(dims),
                               target.num_tiles)

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """popops' createSliceableTensor for the table, createIndicesTensor for the
        indices (``GatherOpx`` can create both). PopART ranks this creator above all
        others (``GatherOpx`` sets the largest priority), so a weight shared by an
        embedding and a matmul (a tied LM head) is laid out for the gather."""
        return 1 if in_index in (0, 1) and self.table_dims(op) is not None else None


def _gather_gradient(builder: GradientBuilder, op: Op,
                     grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """The table's gradient (PopART's GatherGradOp): each slice of dY added into zeros of
    the table's shape at the row its index names, as ScatterND with "add" (repeated indices
    accumulate; negative ones count from the end, as Gather and this IR's ScatterND read
    them, though ONNX's ScatterND only states in-range ones), indices unsqueezed
    to one column: the PyTorch front end's embedding backward (``index_put``) in the same
    form. Another axis than 0 is moved to the front and back (Transpose)."""
    grad, data, indices = grads[0], op.input(0), op.input(1)
    if grad is None or not is_differentiable(data):
        return [None, None]
    rank, depth = len(data.shape), len(indices.shape)
    axis = normalize_axis(op, op.attributes.get("axis", 0), rank)
    front = [axis, *range(axis), *range(axis + 1, rank)]
    # dY's axes: data[:axis], indices, data[axis + 1:] -> indices, data[:axis], the rest
    grad = transpose(builder, grad, [*range(axis, axis + depth), *range(axis),
                                     *range(axis + depth, rank - 1 + depth)])
    zeros = builder.constant(np.zeros([data.shape[a] for a in front]), data.dtype)
    column = one(builder, "Unsqueeze", [indices, int64s(builder, [depth])])
    scattered = one(builder, "ScatterND", [zeros, column, grad], {"reduction": "add"})
    return [transpose(builder, scattered, list(np.argsort(front))), None]


register(OpDef("Gather", infer=_infer_gather, fold=_fold_gather, layout=GatherRule(),
               gradient=_gather_gradient))


def _spread(count: int, size: int) -> np.ndarray:
    """``count`` positions spread evenly over ``[0, size)``: position i at ⌊i·size/count⌋.
    The stand-in for indices unknown at plan time (uniform destinations)."""
    return (np.arange(count, dtype=np.int64) * size) // max(count, 1)


def _constant_indices(tensor: Tensor, shape: tuple[int, ...]) -> np.ndarray | None:
    """The indices' values as int64 when they are a constant of ``shape``, else None."""
    value = constant_value(tensor)
    if value is None or np.asarray(value).shape != shape:
        return None
    return np.asarray(value, dtype=np.int64)


def _along_axis(op: Op, data_shape: tuple[int, ...], index_shape: tuple[int, ...],
                indices: Tensor) -> np.ndarray:
    """Flat data element each position of ``index_shape`` addresses along ``axis`` (the
    GatherElements / ScatterElements addressing): the constant indices when they are
    known and in range, else positions along the axis spread evenly over it; the other
    coordinates are the position's own (clipped to the data)."""
    axis = normalize_axis(op, op.attributes.get("axis", 0), len(data_shape))
    coords = [np.minimum(np.arange(n, dtype=np.int64), max(d - 1, 0))
              for n, d in zip(index_shape, data_shape, strict=True)]
    grid = list(np.meshgrid(*coords, indexing="ij"))
    value = _constant_indices(indices, index_shape)
    checked = None if value is None else _in_range(value, data_shape[axis])
    if checked is not None:
        grid[axis] = checked
    else:
        spread = _spread(index_shape[axis], data_shape[axis])
        shape = [1] * len(index_shape)
        shape[axis] = index_shape[axis]
        grid[axis] = np.broadcast_to(spread.reshape(shape), index_shape)
    return np.ravel_multi_index(tuple(grid), data_shape).reshape(-1)


def _sliceable_along(target: TileMachine, shape: tuple[int, ...], axis: int,
                     dtype: str) -> np.ndarray | None:
    """popops' sliceable layout of a tensor sliced along ``axis`` (the axis moved to the
    front, the rest flattened into the row), flat in the tensor's own order."""
    rest = prod(shape) // shape[axis] if shape[axis] else 0
    if not shape[axis] or not rest:
        return None
    moved = (shape[axis], *shape[:axis], *shape[axis + 1:])
    tiles = np.asarray(target.sliceable_tiles(shape[axis], rest, dtype)).reshape(moved)
    return np.moveaxis(tiles, 0, axis).reshape(-1)


class _LaidOutLikeInput(LayoutRule):
    """An op whose output has the layout of its input ``follows`` (a SumLike of that input
    alone for the unwinding: a layout wanted at the output unwinds to it)."""

    follows = 0

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        out = op.output(0)
        result = emitter.graph.sum_like([emitter.tensor(op.input(self.follows))], [0],
                                        {"default": emitter.valuations.elementwise},
                                        name=out.id)
        emitter.define(out, result.out)

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        tiles = flat_tiles(input_tiles, self.follows)
        if tiles is None:
            return super().output_tiles(op, input_tiles, target)
        return [tiles.copy()]


class ScatterRule(_LaidOutLikeInput):
    """ScatterND, ScatterElements and Scatter, as Poplibs' in-place update
    (``popops::multiUpdate`` / ``multiUpdateAdd``): the output is the data input updated
    where the indices say, so output and data have one layout (a SumLike of the data
    alone: a layout wanted at the output unwinds to the data), and each update element is
    sent to the tile that holds its destination element, which also reads the index that
    names it.

    Indices are data at run time; constant ones are used as they are, and otherwise the
    destinations are assumed uniform: update row i of R goes to row ⌊i·V/R⌋ of the V the
    indices may address (ScatterND), or position i along the axis to ⌊i·n/m⌋
    (ScatterElements). Any such choice counts every update element once; uniform ones
    spread what each tile receives as random token ids do (docs/ipu-model.md).
    """

    kind = "scatter"
    follows = 0  # the data

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        """The output is the data's layout (above); a producer-less data input (the zeros
        a pooling's or a lookup's gradient is scattered into) is also paired with popops'
        sliceable layout along the scattered axis, the layout PopART gives the scatter's
        result (a new sliceable tensor the data is copied into). Valued below an
        elementwise pair (``scatter_data``): a weight update reading the result still
        lays the zeros out as its weight."""
        super().unwind(op, emitter)
        if not self._data_planned_sliceable(op):
            return
        source = emitter.source(
            op.input(0), lambda target: self.wanted_input_tiles(op, 0, target),
            f"{op.debug_name()} data")
        emitter.graph.valued_pair(emitter.tensor(op.input(0)), source,
                                  emitter.valuations.scatter_data)

    def _data_planned_sliceable(self, op: Op) -> bool:
        """Whether the data is producer-less and has elements (``unwind``'s pair)."""
        data = op.input(0)
        shape = known_shape(op, data)
        return data.producer is None and bool(shape) and bool(prod(shape))

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations: Any) -> tuple[float, float]:
        """``unwind``'s one pair: the data against the sliceable layout."""
        if not self._data_planned_sliceable(op):
            return 0.0, 0.0
        bound = valuations.scatter_data * prod(known_shape(op, op.input(0)))
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None:
            return 0.0, bound
        wanted = np.asarray(self.wanted_input_tiles(op, 0, target)).reshape(-1)
        return valuations.scatter_data * count_equal(tiles, wanted), bound

    def worked_inputs(self, op: Op) -> list[int]:
        """The indices and updates: the data is updated in place, row by row."""
        return [1, 2]

    def filled_input(self, op: Op) -> int | None:
        """The data: a scatter into a fill (an embedding's gradient: zeros, then each
        token's row added) is what PopART's GatherGrad computes, zeroing a new tensor at
        run time (``popops::zero``) before ``multiUpdateAdd``; no constant exists."""
        return 0

    def models(self, op: Op) -> bool:
        """Every reduction ONNX defines; an op with another is a barrier, listed."""
        return (op.attributes.get("reduction", "none") in SCATTER_REDUCTIONS
                and all(op.has_input(i) for i in range(3)))

    def _nd(self, op: Op) -> bool:
        return op.type.name == "ScatterND"

    def destinations(self, op: Op) -> np.ndarray:
        """The flat data element each update element (row-major) is combined into."""
        data = known_shape(op, op.input(0))
        indices = known_shape(op, op.input(1))
        if not self._nd(op):
            return _along_axis(op, data, indices, op.input(1))
        depth = indices[-1]
        rows, entries, row = prod(indices[:-1]), prod(data[:depth]), prod(data[depth:])
        value = _constant_indices(op.input(1), indices)
        flat = None
        if value is not None:
            columns = value.reshape(rows, depth)
            checked = [_in_range(columns[:, k], data[k]) for k in range(depth)]
            if all(c is not None for c in checked):
                flat = (np.ravel_multi_index(tuple(checked), data[:depth]) if rows
                        else np.zeros(0, np.int64))
        if flat is None:
            flat = _spread(rows, entries)
        return (flat[:, None] * row + np.arange(row)[None, :]).reshape(-1)

    def _index_reads(self, op: Op, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(update element, index element) pairs: which index elements name each update
        element's destination."""
        elements = np.arange(count, dtype=np.int64)
        if not self._nd(op):
            return elements, elements
        indices = known_shape(op, op.input(1))
        depth, rows = indices[-1], prod(indices[:-1])
        row = count // rows if rows else 0
        updates = np.repeat(elements, depth)
        index = (np.repeat(elements // max(row, 1), depth) * depth
                 + np.tile(np.arange(depth, dtype=np.int64), count))
        return updates, index

    def exchange(self, op: Op, input_tiles: InputTiles,
                 output_tiles: list[np.ndarray], target: TileMachine) -> ExchangeNeed:
        out = np.asarray(output_tiles[0]).reshape(-1)
        need = ExchangeNeed.none(target.num_tiles)
        data, indices, updates = (flat_tiles(input_tiles, i) for i in range(3))
        if data is not None:
            need = need + read_need(out, None, data, target.dtype_size(op.input(0).dtype),
                                    target.num_tiles)
        receivers = out[self.destinations(op)] if out.size else out
        if updates is not None and receivers.size:
            need = need + read_need(receivers, None, updates,
                                    target.dtype_size(op.input(2).dtype), target.num_tiles)
        if indices is not None and receivers.size:
            update, index = self._index_reads(op, receivers.size)
            need = need + read_need(receivers[update], index, indices,
                                    target.dtype_size(op.input(1).dtype), target.num_tiles)
        return need

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """The data on the output's tiles, each update element on its destination's tile,
        each index element on the tile that reads it most."""
        out = np.asarray(output_tiles[0]).reshape(-1)
        if index == 0:
            return out.copy()
        receivers = out[self.destinations(op)] if out.size else out
        if index == 2:
            return receivers
        if index == 1:
            update, element = self._index_reads(op, receivers.size)
            return most_read_tiles(receivers[update], element,
                                   prod(known_shape(op, op.input(1))), target.num_tiles)
        return None

    def least_received(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                       planned: set[int], target: TileMachine) -> int:
        """With the data planned the output's layout is the plan's too: the least the
        updates then send is each destination element on the tile most of its updates
        lie on (a lower bound: the indices' part counts nothing)."""
        if 0 not in planned:
            return super().least_received(op, input_tiles, output_tiles, planned, target)
        updates = flat_tiles(input_tiles, 2)
        if 2 in planned or updates is None or not updates.size:
            return 0
        destinations = self.destinations(op)
        size = prod(known_shape(op, op.input(0)))
        best = most_read_tiles(updates, destinations, size, target.num_tiles)
        need = read_need(best[destinations], None, updates,
                         target.dtype_size(op.input(2).dtype), target.num_tiles)
        return int(np.asarray(need.received_bytes).sum())

    # -- the PopART baseline -------------------------------------------------------------
    def _sliced_axis(self, op: Op) -> int:
        if self._nd(op):
            return 0
        return normalize_axis(op, op.attributes.get("axis", 0),
                              len(known_shape(op, op.input(0))))

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """PopART creates the updates at its top priority (``ScatterReduceOpx``, which
        ScatterElements and Scatter lower to, and ``GatherGradOpx``, what PopART's own
        backward of a Gather is), and makes the output a new tensor in popops' sliceable
        layout that the data is copied into: modelled as the data created with that
        layout, at the same priority (docs/baseline.md)."""
        return 1 if in_index in (0, 2) else None

    def wanted_input_tiles(self, op: Op, in_index: int,
                           target: TileMachine) -> np.ndarray | None:
        """The sliceable layout along the scattered axis (ScatterND: the addressed axes
        merged into one), of the output for the data and of the updates for themselves."""
        if in_index not in (0, 2) or not op.has_input(in_index):
            return None
        tensor = op.input(in_index)
        shape = known_shape(op, tensor)
        if not shape:
            return None
        if self._nd(op) and in_index == 0:
            depth = known_shape(op, op.input(1))[-1]
            merged = (prod(shape[:depth]), prod(shape[depth:]))
            return _sliceable_along(target, merged, 0, tensor.dtype)
        return _sliceable_along(target, shape, self._sliced_axis(op), tensor.dtype)


SCATTER = ScatterRule()
register(OpDef("ScatterND", infer=_infer_scatter_nd, fold=_fold_scatter_nd,
               keeps_input_layout=True, layout=SCATTER))
register(OpDef("ScatterElements", infer=_infer_scatter_elements, fold=_fold_scatter_elements,
               keeps_input_layout=True, layout=SCATTER))
register(OpDef("Scatter", infer=_infer_scatter_elements, fold=_fold_scatter_elements,
               keeps_input_layout=True, layout=SCATTER))


class GatherElementsRule(_LaidOutLikeInput):
    """GatherElements: ``out[i][j] = data[index[i][j]][j]`` along ``axis``. The output has
    the indices' shape and is computed where they lie (elementwise partners: a SumLike of
    the indices alone); each output element reads its data element from wherever it
    lives. Indices unknown at plan time are assumed spread evenly along the axis, as for
    a scatter (``ScatterRule``); constant ones are used as they are. PopART has no op for
    it, so it creates nothing for the baseline."""

    kind = "gather"
    follows = 1  # the indices

    def worked_inputs(self, op: Op) -> list[int]:
        """The indices, not the data it looks elements up in."""
        return [1]

    def sources(self, op: Op) -> np.ndarray:
        """The flat data element each output element reads."""
        return _along_axis(op, known_shape(op, op.input(0)), known_shape(op, op.input(1)),
                           op.input(1))

    def exchange(self, op: Op, input_tiles: InputTiles,
                 output_tiles: list[np.ndarray], target: TileMachine) -> ExchangeNeed:
        out = np.asarray(output_tiles[0]).reshape(-1)
        need = ExchangeNeed.none(target.num_tiles)
        data, indices = flat_tiles(input_tiles, 0), flat_tiles(input_tiles, 1)
        if data is not None and out.size:
            need = need + read_need(out, self.sources(op), data,
                                    target.dtype_size(op.input(0).dtype), target.num_tiles)
        if indices is not None:
            need = need + read_need(out, None, indices,
                                    target.dtype_size(op.input(1).dtype), target.num_tiles)
        return need

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """The indices on the output's tiles; each data element on the tile that reads it
        most."""
        out = np.asarray(output_tiles[0]).reshape(-1)
        if index == 1:
            return out.copy()
        if index == 0:
            return most_read_tiles(out, self.sources(op),
                                   prod(known_shape(op, op.input(0))), target.num_tiles)
        return None

    def least_received(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                       planned: set[int], target: TileMachine) -> int:
        """With the indices planned the output may lie anywhere, each element on the tile
        of the data element it reads: nothing need be received."""
        if 1 in planned:
            return 0
        return super().least_received(op, input_tiles, output_tiles, planned, target)


def _gather_elements_gradient(builder: GradientBuilder, op: Op,
                              grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """The data's gradient: dY added into zeros of the data's shape where each element was
    read, ScatterElements with "add" along the same axis."""
    grad, data = grads[0], op.input(0)
    if grad is None or not is_differentiable(data):
        return [None, None]
    zeros = builder.constant(np.zeros(data.shape), data.dtype)
    axis = normalize_axis(op, op.attributes.get("axis", 0), len(data.shape))
    return [one(builder, "ScatterElements", [zeros, op.input(1), grad],
                {"axis": axis, "reduction": "add"}), None]


register(OpDef("GatherElements", infer=_infer_gather_elements, fold=_fold_gather_elements,
               layout=GatherElementsRule(), gradient=_gather_elements_gradient))
