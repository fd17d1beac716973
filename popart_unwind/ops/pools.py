"""Op family: pools — MaxPool, AveragePool, LpPool and their global forms — with ONNX
semantics (window sizes as ``ops/windows.py`` counts them).

Layouts: windowed pools read each output's window from the tile holding the output, seen
as the depthwise convolution whose windows they reduce; global pools are reductions over
the spatial axes. docs/ipu-model.md ("Pools") states every choice and approximation. The
MaxPool fold gives its values in numpy (the front ends' oracle).
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.machine.exchange import read_need
from popart_unwind.machine.interface import ExchangeNeed, TileMachine
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, small_constants
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


register(OpDef("MaxPool", infer=_infer_pool, fold=_fold_max_pool, layout=PoolRule()))
for _pool in ("AveragePool", "LpPool"):
    register(OpDef(_pool, infer=_infer_pool, layout=PoolRule()))


# -- global pools ---------------------------------------------------------------------------
def _infer_global_pool(op: Op) -> list:
    x = spatial_input(op)
    return [(op.input(0).dtype, (x[0], x[1]) + (1,) * (len(x) - 2))]


def _global_axes(op: Op, rank: int) -> tuple[int, ...]:
    return tuple(range(2, rank))


# A global pool reduces each (n, c) plane: laid out and costed as a reduction over the
# spatial axes (popops::reduce's partials), docs/ipu-model.md.
for _pool in ("GlobalAveragePool", "GlobalMaxPool"):
    register(OpDef(_pool, infer=_infer_global_pool, layout=ReductionRule(_global_axes)))
register(OpDef("GlobalLpPool", infer=_infer_global_pool))
