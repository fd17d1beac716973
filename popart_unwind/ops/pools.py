"""Op family: pools — MaxPool, AveragePool, LpPool and their global forms — with ONNX
semantics (window sizes as ``ops/windows.py`` counts them).

Layouts: windowed pools read each output's window from the tile holding the output, seen
as the depthwise convolution whose windows they reduce; global pools are reductions over
the spatial axes. docs/ipu-model.md ("Pools") states every choice and approximation. The
folds give MaxPool's, AveragePool's, LpPool's and the global pools' values in numpy (the
front ends' oracle). The gradient rules are PopART's pool grad ops written as ONNX ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import IrError, ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.exchange import read_need
from popart_unwind.machine.interface import ExchangeNeed, TileMachine
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, small_constants
from popart_unwind.ops.conv import transpose_padding
from popart_unwind.ops.gradient import (
    GradientBuilder,
    int64s,
    is_differentiable,
    one,
    scalar,
    shared_among_maxima,
)
from popart_unwind.ops.layout_rule import (
    InputTiles,
    LayoutRule,
    UnwindEmitter,
    count_equal,
    flat_tiles,
    known_shape,
)
from popart_unwind.ops.reduce import ReductionRule
from popart_unwind.ops.registry import OpDef, register
from popart_unwind.ops.windows import (
    ConvGeometry,
    exactly,
    first_reads,
    nearest_read,
    spatial_dims,
    spatial_input,
    window_attribute,
    window_attributes,
    window_positions,
    window_reads,
)


# -- windowed pools -------------------------------------------------------------------------
def _infer_pool(op: Op) -> list:
    x = spatial_input(op)
    if "kernel_shape" not in op.attributes:
        raise ShapeError(f"op {op.debug_name()}: attribute kernel_shape is required")
    kernel = window_attribute(op, "kernel_shape", (), len(x) - 2)
    ceil_mode = bool(op.attributes.get("ceil_mode", 0))
    shape = (x[0], x[1], *spatial_dims(op, x, kernel, ceil_mode))
    return [(op.input(0).dtype, shape), ("int64", shape)]


def _fold_max_pool(op: Op, constants) -> list | None:
    """Each window's largest element (padding never chosen; the first of equal ones, in
    row-major kernel order) and, as output 1, its index into the whole flattened input
    (ONNX's ``storage_order`` 0)."""
    x = constants[0]
    out = op.output(0).shape
    if (not small_constants(x) or out is None or prod(out) > FOLD_MAX_ELEMENTS
            or not np.issubdtype(x.dtype, np.floating)
            or int(op.attributes.get("storage_order", 0)) != 0):
        return None
    n = x.ndim - 2
    kernel = window_attribute(op, "kernel_shape", (), n)
    window = window_attributes(op, n)
    if window is None:
        return None
    strides, dilations, pads = window
    # the upper side padded far enough for every window (ceil mode's last one included)
    upper = [max(pads[a + n], (out[2 + a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a]
                 + 1 - pads[a] - x.shape[2 + a]) for a in range(n)]
    padded = np.pad(x, [(0, 0), (0, 0)] + [(pads[a], upper[a]) for a in range(n)],
                    constant_values=-np.inf)
    flat = np.pad(np.arange(x.size, dtype=np.int64).reshape(x.shape),
                  [(0, 0), (0, 0)] + [(pads[a], upper[a]) for a in range(n)],
                  constant_values=-1)
    best = np.full(out, -np.inf, dtype=x.dtype)
    index = np.full(out, -1, dtype=np.int64)
    for kk in np.ndindex(*kernel):
        where = window_positions(kk, dilations, out[2:], strides)
        value, at = padded[where], flat[where]
        better = (at >= 0) & ((value > best) | (index < 0))
        best = np.where(better, value, best)
        index = np.where(better, at, index)
    return [best, index][:max(op.output_map(), default=0) + 1]


def pool_geometry(op: Op) -> ConvGeometry | None:
    """A windowed pool as the depthwise convolution whose windows it reduces (groups = the
    channels, one output channel each), or None where the model does not cover it
    (``auto_pad`` other than NOTSET, ``storage_order`` 1, unknown or empty shapes,
    attributes that do not give the output's shape). A ceil-mode window reaching past the
    padded field reads what lies inside it."""
    if not (op.has_input(0) and op.has_output(0)):
        return None
    x, y = op.input(0).shape, op.output(0).shape
    if x is None or y is None or len(x) < 3 or len(y) != len(x) or min((*x, *y)) < 1:
        return None
    attributes = op.attributes
    if (attributes.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET")
            or int(attributes.get("storage_order", 0)) != 0
            or "kernel_shape" not in attributes):
        return None
    n = len(x) - 2
    try:
        kernel = exactly(attributes["kernel_shape"], n)
        strides = exactly(attributes.get("strides", [1] * n), n)
        dilations = exactly(attributes.get("dilations", [1] * n), n)
        pads = exactly(attributes.get("pads", [0] * 2 * n), 2 * n)
        expected = spatial_dims(op, x, kernel, bool(attributes.get("ceil_mode", 0)))
    except (TypeError, ValueError, ShapeError):
        return None
    if min(pads) < 0 or tuple(y) != (x[0], x[1], *expected):
        return None
    return ConvGeometry(x[0], x[1], x[1], x[1], tuple(x[2:]), kernel, tuple(y[2:]), strides,
                        pads[:n], dilations, op.input(0).dtype)


class PoolRule(LayoutRule):
    """MaxPool, AveragePool and LpPool (``popnn::pooling::pool``): per channel, each output
    element computed on the tile holding it from its window's elements. The outputs are
    laid out linearly from tile 0 (an approximation of popnn's pooling plan,
    docs/ipu-model.md); each
    output element's tile receives the window elements it does not hold. The input's wanted
    layout puts each element on the tile of the first output reading it, so no layout
    receives fewer bytes. PopART's pooling Opx create no input (Opx's default, Deadend)."""

    kind = "pool"

    def models(self, op: Op) -> bool:
        return pool_geometry(op) is not None

    def _outputs(self, op: Op, target: TileMachine) -> list[np.ndarray]:
        """popnn's output, approximated as mapped linearly from tile 0 (no rotation: one
        answer per geometry); MaxPool's Indices (computed with the values) laid out as the
        values."""
        out = op.output(0)
        values = np.asarray(target.reduction_result_tiles(prod(known_shape(op, out)),
                                                          out.dtype)).reshape(-1)
        return [values.copy() for _ in op.outputs]

    def wanted_tiles(self, geometry: ConvGeometry, output_tiles: np.ndarray) -> np.ndarray:
        """Each input element on the tile of the first output (row-major) whose window
        reads it; unread ones on their preceding neighbour's (the first read one's)."""
        n = len(geometry.field)
        m_part, _, read = first_reads(geometry)
        planes = geometry.batch * geometry.in_channels
        shape = (planes, *geometry.field)
        flat = np.broadcast_to(np.arange(planes).reshape((-1,) + (1,) * n)
                               * prod(geometry.out_field) + m_part[None], shape).reshape(-1)
        read = np.broadcast_to(read[None], shape).reshape(-1)
        if not read.any():
            return np.zeros(flat.size, dtype=np.asarray(output_tiles).dtype)
        return np.ascontiguousarray(
            np.asarray(output_tiles).reshape(-1)[flat[nearest_read(read)]])

    # -- the unwinding problem -------------------------------------------------------------
    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        geometry = pool_geometry(op)
        if geometry is None:
            emitter.barrier(op)
            return
        x = emitter.tensor(op.input(0))
        source = emitter.source(
            op.input(0), lambda target: self.wanted_tiles(
                geometry, self._outputs(op, target)[0]), f"{op.debug_name()} windows")
        emitter.graph.valued_pair(x, source, emitter.valuations.elementwise)
        outputs = emitter.fixed_point(
            [x], [known_shape(op, t) for t in op.outputs],
            [lambda target, i=i: self._outputs(op, target)[i]
             for i in range(len(op.outputs))], f"{op.debug_name()} output")
        for tensor, result in zip(op.outputs, outputs, strict=True):
            emitter.define(tensor, result)

    # -- costing ---------------------------------------------------------------------------
    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        if pool_geometry(op) is None:
            return super().output_tiles(op, input_tiles, target)
        return self._outputs(op, target)

    def exchange(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                 target: TileMachine) -> ExchangeNeed:
        """Each output element's tile receives the distinct window elements it does not
        hold, by runs of consecutive elements from one tile."""
        geometry, tiles = pool_geometry(op), flat_tiles(input_tiles, 0)
        if geometry is None or tiles is None:
            return ExchangeNeed.none(target.num_tiles)
        readers, elements = target.remembered(("pool reads", geometry),
                                              lambda: _pool_reads(geometry))
        return read_need(np.asarray(output_tiles[0]).reshape(-1)[readers], elements, tiles,
                         target.dtype_size(geometry.dtype), target.num_tiles)

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations: Any) -> tuple[float, float]:
        geometry = pool_geometry(op)
        if geometry is None:
            return 0.0, 0.0
        bound = valuations.elementwise * op.input(0).nelms()
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None:
            return 0.0, bound
        wanted = self.wanted_tiles(geometry, self._outputs(op, target)[0])
        return valuations.elementwise * count_equal(tiles, wanted), bound

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        geometry = pool_geometry(op)
        if geometry is None or index != 0:
            return None
        return self.wanted_tiles(geometry, output_tiles[0])


def _pool_reads(geometry: ConvGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Over every (output element, window element) pair reading a real input element: the
    flat output element and the flat input element, per channel plane."""
    out_index, _, offset = window_reads(geometry)
    planes = geometry.batch * geometry.in_channels
    plane = np.arange(planes, dtype=np.int64)[:, None]
    readers = plane * prod(geometry.out_field) + out_index[None, :]
    elements = plane * prod(geometry.field) + offset[None, :]
    return readers.reshape(-1), elements.reshape(-1)


def _window_counts(op: Op, field: Sequence[int], out_field: Sequence[int]) -> np.ndarray | None:
    """How many elements each AveragePool window averages, shape ``out_field``: its
    positions inside the padded field (``count_include_pad`` 1; a ceil-mode window's part
    past that field counts not) or inside the data (0). None for ``auto_pad`` forms."""
    n = len(field)
    window = window_attributes(op, n)
    if window is None:
        return None
    strides, dilations, pads = window
    kernel = window_attribute(op, "kernel_shape", (), n)
    include = bool(op.attributes.get("count_include_pad", 0))
    counts = np.ones((), dtype=np.int64)
    for a in range(n):
        start = np.arange(out_field[a])[:, None] * strides[a] - pads[a]
        at = start + np.arange(kernel[a])[None, :] * dilations[a]
        low, high = (-pads[a], field[a] + pads[a + n]) if include else (0, field[a])
        counts = np.multiply.outer(counts, ((at >= low) & (at < high)).sum(axis=1))
    return counts


def _fold_average_pool(op: Op, constants) -> list | None:
    """Each window's sum over its data elements, divided by ``_window_counts``."""
    x = constants[0]
    out = op.output(0).shape
    if (not small_constants(x) or out is None or prod(out) > FOLD_MAX_ELEMENTS
            or x.dtype.kind != "f"):
        return None
    n = x.ndim - 2
    counts = _window_counts(op, x.shape[2:], out[2:])
    if counts is None or not counts.all():
        return None
    total = _window_sums(op, x, out, window_attributes(op, n))
    return [(total / counts).astype(x.dtype)]


def _window_sums(op: Op, values: np.ndarray, out: Sequence[int],
                 window: tuple) -> np.ndarray:
    """Each output window's sum of ``values`` (the op's input, or a function of it), the
    padding adding nothing: the input padded with zeros as far as the last window reaches,
    one strided view added per kernel position."""
    n = values.ndim - 2
    strides, dilations, pads = window
    kernel = window_attribute(op, "kernel_shape", (), n)
    upper = [max(pads[a + n], (out[2 + a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a]
                 + 1 - pads[a] - values.shape[2 + a]) for a in range(n)]
    padded = np.pad(values, [(0, 0), (0, 0)] + [(pads[a], upper[a]) for a in range(n)])
    total = np.zeros(out, dtype=values.dtype)
    for kk in np.ndindex(*kernel):
        total += padded[window_positions(kk, dilations, out[2:], strides)]
    return total


def _fold_lp_pool(op: Op, constants) -> list | None:
    """Each window's ``(Σ |x|^p)^(1/p)`` over its data elements (padding adds nothing)."""
    x = constants[0]
    out = op.output(0).shape
    if (not small_constants(x) or out is None or prod(out) > FOLD_MAX_ELEMENTS
            or x.dtype.kind != "f"):
        return None
    n = x.ndim - 2
    window = window_attributes(op, n)
    if window is None:
        return None
    p = float(op.attributes.get("p", 2))
    total = _window_sums(op, np.abs(x) ** p, out, window)
    return [(total ** (1.0 / p)).astype(x.dtype)]


# -- gradients ------------------------------------------------------------------------------
def window_max_gradient(builder: GradientBuilder, grad_out: Tensor, plane_indices: Tensor,
                        shape: Sequence[int]) -> Tensor:
    """A max pool's input gradient as [N, C, spatial positions]: each output gradient
    added at the position within its (n, c) plane where its window's maximum lay
    (``plane_indices``), i.e. ScatterElements with "add" into zeros along the plane. The
    PyTorch front end's max-pool backward is built by it too."""
    batch, channels = shape[0], shape[1]
    plane = [batch, channels, prod(shape[2:])]
    flat = int64s(builder, [batch, channels, prod(grad_out.shape[2:])])
    zeros = builder.constant(np.zeros(plane), grad_out.dtype)
    return one(builder, "ScatterElements", [
        zeros, one(builder, "Reshape", [plane_indices, flat]),
        one(builder, "Reshape", [grad_out, flat])], {"axis": 2, "reduction": "add"})


def _max_pool_gradient(builder: GradientBuilder, op: Op,
                       grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX: each output's gradient at its window's maximum (PopART's MaxPoolGradOp), found
    by the Indices of ``op`` or of a second MaxPool (ONNX counts them over the whole
    input: taken modulo a plane), scattered by ``window_max_gradient``. A window whose
    maximum is tied gives its gradient to the first of them, as the Indices say."""
    grad = grads[0]
    x = op.input(0)
    if grad is None or not is_differentiable(x):
        return [None]
    if op.has_output(1) and int(op.attributes.get("storage_order", 0)) == 0:
        indices = op.output(1)
    else:
        attributes = {k: v for k, v in op.attributes.items() if k != "storage_order"}
        indices = builder.op("MaxPool", [x], attributes, num_outputs=2)[1]
    plane = builder.constant(np.array(prod(x.shape[2:])), "int64")
    scattered = window_max_gradient(builder, grad, one(builder, "Mod", [indices, plane]),
                                    x.shape)
    return [one(builder, "Reshape", [scattered, int64s(builder, x.shape)])]


def _spread_over_windows(builder: GradientBuilder, op: Op, x: Tensor,
                         grad: Tensor) -> Tensor:
    """Each output's ``grad`` added to every data element of its window: the transposed
    depthwise convolution ``ConvTranspose(grad, ones)`` in groups of one channel, with the
    pool's window (explicit pads)."""
    n = len(x.shape) - 2
    strides, dilations, pads = window_attributes(op, n)
    kernel = window_attribute(op, "kernel_shape", (), n)
    ones = builder.constant(np.ones((x.shape[1], 1, *kernel)), grad.dtype)
    pads, extra = transpose_padding(x.shape[2:], grad.shape[2:], kernel, strides, pads,
                                    dilations)
    return one(builder, "ConvTranspose", [grad, ones], {
        "strides": strides, "pads": pads, "dilations": dilations, "group": x.shape[1],
        "kernel_shape": kernel, "output_padding": extra})


def _average_pool_gradient(builder: GradientBuilder, op: Op,
                           grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX: each output's gradient over its window's count, spread back over the window
    (PopART's AveragePoolGradOp, ``_spread_over_windows``)."""
    grad = grads[0]
    x = op.input(0)
    if grad is None or not is_differentiable(x):
        return [None]
    out = tuple(grad.shape[2:])
    counts = _window_counts(op, x.shape[2:], out)
    if counts is None or not counts.all():
        raise IrError(f"op {op.debug_name()} (AveragePool): no gradient for auto_pad "
                      f"{op.attributes.get('auto_pad')!r} or a window over padding alone")
    scaled = one(builder, "Mul", [grad, builder.constant(
        (1.0 / counts).reshape((1, 1, *out)), grad.dtype)])
    return [_spread_over_windows(builder, op, x, scaled)]


def _lp_pool_gradient(builder: GradientBuilder, op: Op,
                      grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX of ``Y = (Σ |X|^p)^(1/p)`` over each window: ``sign(X)·|X|^(p−1)`` times the sum,
    over the windows reading the element, of ``dY · Y^(1−p)`` (``_spread_over_windows``).
    For p = 1 that is ``sign(X)`` times the spread dY (0 at 0, a subgradient); for p = 2,
    ``X`` times the spread ``dY / Y``. Where a window's norm is 0 and p > 1 the norm has no
    derivative, and the result is not finite (as ReduceL2's)."""
    grad = grads[0]
    x = op.input(0)
    if grad is None or not is_differentiable(x):
        return [None]
    if window_attributes(op, len(x.shape) - 2) is None:
        raise IrError(f"op {op.debug_name()} (LpPool): no gradient for auto_pad "
                      f"{op.attributes.get('auto_pad')!r}; explicit pads only")
    p = float(op.attributes.get("p", 2))
    if p < 1:
        raise IrError(f"op {op.debug_name()} (LpPool): no gradient for p = {p}; p >= 1")
    if p == 1:
        return [one(builder, "Mul", [one(builder, "Sign", [x]),
                                     _spread_over_windows(builder, op, x, grad)])]
    y = op.output(0)
    power = y if p == 2 else one(builder, "Pow", [y, scalar(builder, p - 1, y)])
    spread = _spread_over_windows(builder, op, x, one(builder, "Div", [grad, power]))
    if p == 2:
        return [one(builder, "Mul", [x, spread])]
    magnitude = one(builder, "Pow", [one(builder, "Abs", [x]), scalar(builder, p - 1, x)])
    return [one(builder, "Mul", [one(builder, "Mul", [one(builder, "Sign", [x]), magnitude]),
                                 spread])]


register(OpDef("MaxPool", infer=_infer_pool, fold=_fold_max_pool, layout=PoolRule(),
               gradient=_max_pool_gradient))
register(OpDef("AveragePool", infer=_infer_pool, fold=_fold_average_pool, layout=PoolRule(),
               gradient=_average_pool_gradient))
register(OpDef("LpPool", infer=_infer_pool, fold=_fold_lp_pool, layout=PoolRule(),
               gradient=_lp_pool_gradient))


# -- global pools ---------------------------------------------------------------------------
def _infer_global_pool(op: Op) -> list:
    x = spatial_input(op)
    return [(op.input(0).dtype, (x[0], x[1]) + (1,) * (len(x) - 2))]


def _global_axes(op: Op, rank: int) -> tuple[int, ...]:
    return tuple(range(2, rank))


# A global pool reduces each (n, c) plane: laid out and costed as a reduction over the
# spatial axes (popops::reduce's partials), docs/ipu-model.md.
def _fold_global_pool(op: Op, constants) -> list | None:
    """Each (n, c) plane's mean or maximum."""
    x = constants[0]
    if not small_constants(x) or x.ndim < 3 or x.dtype.kind != "f" or not x.size:
        return None
    meaning = np.mean if op.type.name == "GlobalAveragePool" else np.max
    return [meaning(x, axis=_global_axes(op, x.ndim), keepdims=True).astype(x.dtype)]


def _global_average_pool_gradient(builder: GradientBuilder, op: Op,
                                  grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX = dY broadcast over the plane, over the plane's size."""
    grad, x = grads[0], op.input(0)
    if grad is None or not is_differentiable(x):
        return [None]
    spread = one(builder, "Expand", [grad, int64s(builder, x.shape)])
    return [one(builder, "Mul", [spread, scalar(builder, 1.0 / prod(x.shape[2:]), x)])]


def _global_max_pool_gradient(builder: GradientBuilder, op: Op,
                              grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX = dY at each plane's maximum (shared evenly among tied maxima)."""
    grad, x = grads[0], op.input(0)
    if grad is None or not is_differentiable(x):
        return [None]
    return [shared_among_maxima(builder, x, op.output(0), grad,
                                _global_axes(op, len(x.shape)))]


for _pool, _gradient in (("GlobalAveragePool", _global_average_pool_gradient),
                         ("GlobalMaxPool", _global_max_pool_gradient)):
    register(OpDef(_pool, infer=_infer_global_pool, fold=_fold_global_pool,
                   layout=ReductionRule(_global_axes), gradient=_gradient))
register(OpDef("GlobalLpPool", infer=_infer_global_pool))
