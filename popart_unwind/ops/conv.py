"""Op family: sliding windows — Conv, ConvTranspose and the pools — with ONNX semantics.

Output sizes follow ONNX's rule for every window (``pads``, ``strides``, ``dilations``,
``auto_pad``, ``ceil_mode`` for pools, counted as ONNX's own shape inference counts them, so
imported shapes agree).

Layouts of Conv: Poplibs plans a matmul as a convolution (lib/poplin/MatMul.cpp); here the
converse holds: a convolution is the grouped matmul of its im2col, ``[G, M, K] x [G, K, N]``
with G the groups, M = batch x output positions, K = input channels per group x kernel
positions and N = output channels per group, so one partition model serves both. The
weights and the output are exact views of the matmul's RHS and output. The data input is
not (an element feeds several im2col positions, padding feeds none), so its wanted layout
and its exchange are derived from the im2col itself. ConvTranspose is the convolution
Poplibs computes for it: input dilation the stride, weights flipped (PopART's
ConvFlipWeights), so the same im2col model serves it with the data read where the dilated
field's real elements lie. Windowed pools read each output's window from the tile holding
the output; global pools are reductions over the spatial axes. docs/ipu-model.md
("Convolutions", "Transposed convolutions", "Pools") states every choice and
approximation. The folds give each op's values in numpy (the front ends' oracle).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from math import prod
from typing import Any, NamedTuple

import numpy as np

from popart_unwind.errors import PlanError, ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.machine.exchange import (
    axis_parts,
    block_need,
    broadcast_index,
    matmul_reader_blocks,
    read_need,
)
from popart_unwind.machine.interface import (
    REARRANGE_ABOVE_DESTINATIONS,
    ExchangeNeed,
    MatmulPlan,
    TileMachine,
    plan_operand_readers,
    plan_operand_tiles,
    rotated_per_tile,
)
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, input_shape
from popart_unwind.ops.layout_rule import (
    InputTiles,
    LayoutRule,
    OpWork,
    UnwindEmitter,
    count_equal,
    flat_tiles,
    known_shape,
)
from popart_unwind.ops.linalg import (
    chosen_or_alone,
    created_agreement,
    tie_created_operands,
)
from popart_unwind.ops.reduce import ReductionRule
from popart_unwind.ops.registry import HIGH_OUTLINE_VALUE, OpDef, register
from popart_unwind.validation import Shape

#: im2col positions enumerated at once when deriving what each tile reads.
CHUNK_POSITIONS = 1 << 22


# -- Conv, ConvTranspose, pools -------------------------------------------------------------
def _attribute(op: Op, name: str, default: Sequence[int], count: int) -> list[int]:
    values = list(op.attributes.get(name, default))
    if len(values) != count:
        raise ShapeError(f"op {op.debug_name()}: attribute {name} has {len(values)} "
                         f"value(s), expected {count}")
    return values


def _spatial_dims(op: Op, x: tuple[int, ...], kernel: Sequence[int], ceil_mode: bool = False
                  ) -> list[int]:
    """Output sizes of a sliding window over the spatial axes (ONNX conv/pool rule)."""
    n = len(kernel)
    strides = _attribute(op, "strides", [1] * n, n)
    dilations = _attribute(op, "dilations", [1] * n, n)
    auto_pad = op.attributes.get("auto_pad", "NOTSET")
    pads = _attribute(op, "pads", [0] * 2 * n, 2 * n) if auto_pad == "NOTSET" else [0] * 2 * n
    out = []
    for axis, (size, k, s, d) in enumerate(zip(x[2:], kernel, strides, dilations, strict=True)):
        if s < 1 or d < 1:
            raise ShapeError(f"op {op.debug_name()}: strides and dilations must be >= 1")
        window = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-size // s))
            continue
        padded = size + pads[axis] + pads[axis + n]
        if padded < window:
            raise ShapeError(f"op {op.debug_name()}: window {window} is larger than the "
                             f"padded spatial axis {axis} ({padded})")
        # As ONNX's own shape inference counts (it keeps a last ceil-mode window that would
        # start in the end padding, where PyTorch drops it): imported shapes must agree.
        count = -(-(padded - window) // s) if ceil_mode else (padded - window) // s
        out.append(count + 1)
    return out


def _spatial_input(op: Op, min_rank: int = 3) -> tuple[int, ...]:
    x = input_shape(op, 0)
    if len(x) < min_rank:
        raise ShapeError(f"op {op.debug_name()}: input must be N x C x spatial..., got {x}")
    return x


def _infer_conv(op: Op) -> list:
    x, w = _spatial_input(op), input_shape(op, 1)
    group = op.attributes.get("group", 1)
    if len(w) != len(x) or x[1] != w[1] * group or w[0] % group:
        raise ShapeError(f"op {op.debug_name()}: weights {w} do not fit input {x} with "
                         f"group {group}")
    if op.has_input(2) and input_shape(op, 2) != (w[0],):
        raise ShapeError(f"op {op.debug_name()}: bias must have shape ({w[0]},), got "
                         f"{input_shape(op, 2)}")
    kernel = _attribute(op, "kernel_shape", w[2:], len(x) - 2)
    return [(op.input(0).dtype, (x[0], w[0], *_spatial_dims(op, x, kernel)))]


def _infer_conv_transpose(op: Op) -> list:
    x, w = _spatial_input(op), input_shape(op, 1)
    group = op.attributes.get("group", 1)
    if len(w) != len(x) or x[1] != w[0]:
        raise ShapeError(f"op {op.debug_name()}: weights {w} do not fit input {x}")
    n = len(x) - 2
    if "output_shape" in op.attributes:
        spatial = list(op.attributes["output_shape"])[-n:]
    else:
        kernel = _attribute(op, "kernel_shape", w[2:], n)
        strides = _attribute(op, "strides", [1] * n, n)
        dilations = _attribute(op, "dilations", [1] * n, n)
        extra = _attribute(op, "output_padding", [0] * n, n)
        auto_pad = op.attributes.get("auto_pad", "NOTSET")
        pads = _attribute(op, "pads", [0] * 2 * n, 2 * n) if auto_pad == "NOTSET" else [0] * 2 * n
        spatial = []
        for axis in range(n):
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                spatial.append(x[2 + axis] * strides[axis])
            else:
                spatial.append(strides[axis] * (x[2 + axis] - 1) + extra[axis]
                               + (kernel[axis] - 1) * dilations[axis] + 1
                               - pads[axis] - pads[axis + n])
    return [(op.input(0).dtype, (x[0], w[1] * group, *spatial))]


def _infer_pool(op: Op) -> list:
    x = _spatial_input(op)
    if "kernel_shape" not in op.attributes:
        raise ShapeError(f"op {op.debug_name()}: attribute kernel_shape is required")
    kernel = _attribute(op, "kernel_shape", (), len(x) - 2)
    ceil_mode = bool(op.attributes.get("ceil_mode", 0))
    shape = (x[0], x[1], *_spatial_dims(op, x, kernel, ceil_mode))
    return [(op.input(0).dtype, shape), ("int64", shape)]


def _infer_global_pool(op: Op) -> list:
    x = _spatial_input(op)
    return [(op.input(0).dtype, (x[0], x[1]) + (1,) * (len(x) - 2))]


# -- folds: the ops' values in numpy (ONNX semantics; the front ends' numeric oracle) -------
def _window_attributes(op: Op, n: int) -> tuple[list[int], list[int], list[int]] | None:
    """Strides, dilations and pads (lower then upper) of an op with explicit pads, or None
    for ``auto_pad`` forms the folds leave alone."""
    if op.attributes.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return None
    strides = _attribute(op, "strides", [1] * n, n)
    dilations = _attribute(op, "dilations", [1] * n, n)
    pads = _attribute(op, "pads", [0] * 2 * n, 2 * n)
    return (strides, dilations, pads) if min(pads) >= 0 else None


def _small(*arrays: np.ndarray | None) -> bool:
    return all(a is not None and a.size <= FOLD_MAX_ELEMENTS for a in arrays)


def _positions(kk: Sequence[int], dilations: Sequence[int], count: Sequence[int],
               strides: Sequence[int]) -> tuple[slice, ...]:
    """The padded positions kernel position ``kk`` meets over ``count`` window positions,
    as an index of an N x C x spatial array."""
    return (slice(None), slice(None), *(
        slice(k * d, k * d + (c - 1) * s + 1, s)
        for k, d, c, s in zip(kk, dilations, count, strides, strict=True)))


def _conv_fold_operands(op: Op, constants) -> tuple | None:
    """(x, w, bias, output shape, spatial rank, strides, dilations, pads, group) of a Conv
    or ConvTranspose small enough to fold with every input constant, else None."""
    x, w = constants[0], constants[1]
    bias = constants[2] if len(constants) > 2 and op.has_input(2) else None
    out = op.output(0).shape
    if (not _small(x, w) or out is None or prod(out) > FOLD_MAX_ELEMENTS
            or (op.has_input(2) and bias is None)):
        return None
    n = x.ndim - 2
    window = _window_attributes(op, n)
    if window is None:
        return None
    return (x, w, bias, out, n, *window, int(op.attributes.get("group", 1)))


def _fold_conv(op: Op, constants) -> list | None:
    """y[b, g·N + n, o] = Σ over the group's channels c and kernel positions kk of
    x[b, g·C/g + c, o·stride − pad + kk·dilation] · w[g·N + n, c, kk] (zero outside)."""
    operands = _conv_fold_operands(op, constants)
    if operands is None:
        return None
    x, w, bias, out, n, strides, dilations, pads, group = operands
    padded = np.pad(x, [(0, 0), (0, 0)] + [(pads[a], pads[a + n]) for a in range(n)])
    per_group, cols = x.shape[1] // group, w.shape[0] // group
    y = np.zeros(out, dtype=np.result_type(x, w))
    for kk in np.ndindex(*w.shape[2:]):
        read = padded[_positions(kk, dilations, out[2:], strides)]
        for g in range(group):
            y[:, g * cols:(g + 1) * cols] += np.einsum(
                "bc...,nc->bn...", read[:, g * per_group:(g + 1) * per_group],
                w[(slice(g * cols, (g + 1) * cols), slice(None), *kk)])
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return [y.astype(x.dtype)]


def _fold_conv_transpose(op: Op, constants) -> list | None:
    """The transpose of Conv: each x[b, g·C/g + c, i] · w[g·C/g + c, n, kk] added at
    output position i·stride + kk·dilation − pad of channel g·N + n, over the full output
    (``output_padding`` extends its end); explicit pads only."""
    if "output_shape" in op.attributes:
        return None
    operands = _conv_fold_operands(op, constants)
    if operands is None:
        return None
    x, w, bias, out, n, strides, dilations, pads, group = operands
    per_group, cols = x.shape[1] // group, w.shape[1]
    full = [out[2 + a] + pads[a] + pads[a + n] for a in range(n)]
    y = np.zeros((out[0], out[1], *full), dtype=np.result_type(x, w))
    for kk in np.ndindex(*w.shape[2:]):
        written = _positions(kk, dilations, x.shape[2:], strides)
        for g in range(group):
            part = np.einsum("bc...,cn->bn...", x[:, g * per_group:(g + 1) * per_group],
                             w[(slice(g * per_group, (g + 1) * per_group), slice(None), *kk)])
            y[(slice(None), slice(g * cols, (g + 1) * cols), *written[2:])] += part
    y = y[(slice(None), slice(None),
           *(slice(pads[a], pads[a] + out[2 + a]) for a in range(n)))]
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return [np.ascontiguousarray(y).astype(x.dtype)]


def _fold_max_pool(op: Op, constants) -> list | None:
    """Each window's largest element (padding never chosen; the first of equal ones, in
    row-major kernel order) and, as output 1, its index into the whole flattened input
    (ONNX's ``storage_order`` 0)."""
    x = constants[0]
    out = op.output(0).shape
    if (not _small(x) or out is None or prod(out) > FOLD_MAX_ELEMENTS
            or not np.issubdtype(x.dtype, np.floating)
            or int(op.attributes.get("storage_order", 0)) != 0):
        return None
    n = x.ndim - 2
    kernel = _attribute(op, "kernel_shape", (), n)
    window = _window_attributes(op, n)
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
        where = _positions(kk, dilations, out[2:], strides)
        value, at = padded[where], flat[where]
        better = (at >= 0) & ((value > best) | (index < 0))
        best = np.where(better, value, best)
        index = np.where(better, at, index)
    return [best, index][:max(op.output_map(), default=0) + 1]


# -- layouts ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    """A convolution's sizes, with ONNX's defaults filled in (``pads`` are the lower pads;
    the upper ones only bound the output, which is given)."""

    batch: int
    in_channels: int
    out_channels: int
    groups: int
    field: Shape
    kernel: Shape
    out_field: Shape
    strides: Shape
    pads: Shape
    dilations: Shape
    dtype: str
    #: Poplibs' input dilation: the data's elements lie this far apart in the field the
    #: windows slide over, zeros between (a transposed convolution's stride); 1 for Conv.
    input_dilation: Shape = ()

    def dilated(self, axis: int) -> int:
        """The input dilation along spatial ``axis`` (1 when none is given)."""
        return self.input_dilation[axis] if self.input_dilation else 1

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """(G, M, K, N) of the im2col matmul."""
        return (self.groups, self.batch * prod(self.out_field),
                self.in_channels // self.groups * prod(self.kernel),
                self.out_channels // self.groups)

    @property
    def input_shape(self) -> Shape:
        return (self.batch, self.in_channels, *self.field)

    @property
    def output_shape(self) -> Shape:
        return (self.batch, self.out_channels, *self.out_field)

    @property
    def bias_shape(self) -> Shape:
        """The bias as it broadcasts against the output: one value per output channel."""
        return (1, self.out_channels) + (1,) * len(self.field)


def _window_shapes(op: Op) -> tuple[Shape, Shape, Shape, int] | None:
    """Data, weight and output shapes and the spatial rank of a Conv or ConvTranspose the
    model covers, or None: inputs or shapes unknown or empty, ranks that disagree, or an
    ``auto_pad`` other than NOTSET."""
    if not (op.has_input(0) and op.has_input(1) and op.has_output(0)):
        return None
    x, w, y = op.input(0).shape, op.input(1).shape, op.output(0).shape
    if x is None or w is None or y is None:
        return None
    n = len(x) - 2
    if n < 1 or len(w) != len(x) or len(y) != len(x) or min((*x, *w, *y)) < 1:
        return None
    if op.attributes.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return None
    return tuple(x), tuple(w), tuple(y), n


def _geometry_window(op: Op, n: int) -> tuple[Shape, Shape, Shape]:
    """Strides, dilations and pads as the folds read them (``_window_attributes``), as
    int tuples; ValueError where the model covers no such window (negative pads)."""
    window = _window_attributes(op, n)
    if window is None:
        raise ValueError(f"op {op.debug_name()}: no window the model covers")
    strides, dilations, pads = (tuple(int(v) for v in values) for values in window)
    return strides, dilations, pads


def conv_geometry(op: Op) -> ConvGeometry | None:
    """The geometry of a Conv the model covers, or None: unknown or empty shapes, an
    ``auto_pad`` other than NOTSET, attributes that do not fit the shapes."""
    shapes = _window_shapes(op)
    if shapes is None:
        return None
    x, w, y, n = shapes
    attributes = op.attributes
    try:
        group = int(attributes.get("group", 1))
        kernel = _exactly(attributes.get("kernel_shape", w[2:]), n)
        strides, dilations, pads = _geometry_window(op, n)
    except (ShapeError, TypeError, ValueError):
        return None
    if (group < 1 or x[1] != w[1] * group or w[0] % group or kernel != tuple(w[2:])
            or min(strides + dilations) < 1 or min(pads) < 0 or tuple(y[:2]) != (x[0], w[0])):
        return None
    for axis in range(n):
        window = (kernel[axis] - 1) * dilations[axis] + 1
        padded = x[2 + axis] + pads[axis] + pads[axis + n]
        if padded < window or (padded - window) // strides[axis] + 1 != y[2 + axis]:
            return None
    if op.has_input(2) and tuple(op.input(2).shape or ()) != (w[0],):
        return None
    return ConvGeometry(x[0], x[1], w[0], group, tuple(x[2:]), kernel, tuple(y[2:]), strides,
                        pads[:n], dilations, op.input(0).dtype)


def _exactly(values: Any, count: int) -> Shape:
    result = tuple(int(v) for v in values)
    if len(result) != count:
        raise ValueError(f"{count} values expected, got {len(result)}")
    return result


class ConvRule(LayoutRule):
    """ONNX Conv (N-d, grouped, strided, padded, dilated; ``auto_pad`` NOTSET) as PopART's
    ConvOpx lowers it: data and weights created by poplin (createInput, createWeights), the
    output laid out by the convolution's plan, a bias added per output channel.

    The plan is the im2col matmul's: the one chosen for the op (``target.chosen_plan``:
    a pass of a convolution layer sharing its cube, ``ops.conv_layers``) or, by default,
    its cheapest partition alone. Every layout and read below follows it."""

    kind = "conv"

    def geometry(self, op: Op) -> ConvGeometry | None:
        """The op's convolution, or None where the rule does not model it."""
        return conv_geometry(op)

    def models(self, op: Op) -> bool:
        return self.geometry(op) is not None

    def rhs_index(self, geometry: ConvGeometry) -> np.ndarray:
        """For each weight element (flat), its flat index in the im2col matmul's RHS
        ``[G, K, N]``: ``w[g*N + n, ci, *kk] = rhs[g, (ci, *kk), n]``."""
        groups, _, inner, cols = geometry.dims
        return np.arange(groups * inner * cols).reshape(groups, inner, cols).transpose(
            0, 2, 1).reshape(-1)

    def plan(self, op: Op, target: TileMachine) -> MatmulPlan:
        """The plan chosen for ``op``, or its im2col matmul's cheapest partition alone."""
        geometry = self.geometry(op)
        if geometry is None:
            raise PlanError(f"op {op.debug_name()} is no convolution the model covers and "
                            f"has no plan")
        return chosen_or_alone(op, geometry.dims, geometry.dtype, target)

    # -- layouts ---------------------------------------------------------------------------
    def weight_tiles(self, geometry: ConvGeometry, target: TileMachine,
                     plan: MatmulPlan | None = None) -> np.ndarray:
        """poplin's createWeights: the plan's RHS layout, seen through ``rhs_index``."""
        plan = plan or alone_plan(geometry, target)
        rhs = plan_operand_tiles(target, plan, "rhs", geometry.dtype)
        return np.ascontiguousarray(rhs[self.rhs_index(geometry)])

    def product_tiles(self, geometry: ConvGeometry, target: TileMachine,
                      plan: MatmulPlan | None = None) -> np.ndarray:
        """The plan's output layout, seen as ``y[b, g*N + n, *o] = out[g, (b, *o), n]``."""
        plan = plan or alone_plan(geometry, target)
        groups, _, _, cols = geometry.dims
        out = plan_operand_tiles(target, plan, "output", geometry.dtype)
        return np.ascontiguousarray(out.reshape(groups, geometry.batch, -1, cols)
                                    .transpose(1, 0, 3, 2)).reshape(-1)

    def data_tiles(self, geometry: ConvGeometry, target: TileMachine,
                   plan: MatmulPlan | None = None) -> np.ndarray:
        """poplin's createInput, approximated: each element on the LHS tile of the first
        im2col position reading it; unread elements (stride gaps) extend their preceding
        neighbour's tile, as Poplibs extends partial usage."""
        plan = plan or alone_plan(geometry, target)
        return target.remembered(("conv data", geometry, plan),
                                 lambda: _create_input_tiles(geometry, target, plan))

    def bias_tiles(self, geometry: ConvGeometry, output_tiles: np.ndarray,
                   target: TileMachine) -> np.ndarray:
        """poplin's createBiases: each output channel's bias where most of it lies."""
        return np.asarray(target.broadcast_operand_tiles(
            np.asarray(output_tiles).reshape(-1), geometry.output_shape, geometry.bias_shape)
        ).reshape(-1)

    def operand_tiles(self, op: Op, index: int, target: TileMachine) -> np.ndarray | None:
        """The layout poplin creates for input ``index`` (0 data, 1 weights, 2 bias)."""
        geometry = self.geometry(op)
        if geometry is None or not op.has_input(index) or index not in (0, 1, 2):
            return None
        plan = self.plan(op, target)
        if index == 0:
            return self.data_tiles(geometry, target, plan)
        if index == 1:
            return self.weight_tiles(geometry, target, plan)
        return self.bias_tiles(geometry, self.product_tiles(geometry, target, plan), target)

    def wanted_input_tiles(self, op: Op, in_index: int,
                           target: TileMachine) -> np.ndarray | None:
        return self.operand_tiles(op, in_index, target)

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """PopART's ConvOpx creates data and weights (poplin createInput, createWeights);
        the bias, split off into an AddBias op by PopART, is created there by
        createBiases. All at PopART's default priority, 0."""
        if in_index not in (0, 1, 2) or not op.has_input(in_index):
            return None
        return 0 if self.geometry(op) is not None else None

    # -- the unwinding problem -------------------------------------------------------------
    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        geometry = self.geometry(op)
        if geometry is None:
            emitter.barrier(op)
            return
        graph, values = emitter.graph, emitter.valuations
        operands = tie_created_operands(op, emitter, self.operand_tiles, ("data", "weights"))
        out = op.output(0)
        [product] = emitter.fixed_point(
            operands, [geometry.output_shape],
            [lambda target: self.product_tiles(geometry, target, self.plan(op, target))],
            f"{op.debug_name()} output")
        if not op.has_input(2):
            emitter.define(out, product)
            return
        bias = graph.reshape(emitter.tensor(op.input(2)), geometry.bias_shape)
        result = graph.sum_like([product, bias], [0], {"default": values.bias}, name=out.id)
        emitter.define(out, result.out)

    # -- costing ---------------------------------------------------------------------------
    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        """The plan's output layout; the bias is added in place."""
        geometry = self.geometry(op)
        if geometry is None:
            return super().output_tiles(op, input_tiles, target)
        return [self.product_tiles(geometry, target, self.plan(op, target))]

    def exchange(self, op: Op, input_tiles: InputTiles,
                 output_tiles: list[np.ndarray], target: TileMachine) -> ExchangeNeed:
        geometry = self.geometry(op)
        if geometry is None:
            return super().exchange(op, input_tiles, output_tiles, target)
        plan = self.plan(op, target)
        need = ExchangeNeed.none(target.num_tiles)
        weights = flat_tiles(input_tiles, 1)
        if weights is not None:
            grouped = np.empty_like(weights)
            grouped[self.rhs_index(geometry)] = weights  # the weights' tiles in RHS order
            need = need + plan_operand_readers(target, plan, "rhs", geometry.dtype, grouped)
        data = flat_tiles(input_tiles, 0)
        if data is not None:
            need = need + self.data_need(geometry, data, target, plan)
        bias = flat_tiles(input_tiles, 2)
        if bias is not None:
            need = need + read_need(
                np.asarray(output_tiles[0]).reshape(-1),
                broadcast_index(geometry.bias_shape, geometry.output_shape), bias,
                target.dtype_size(op.input(2).dtype), target.num_tiles)
        return need

    def plan_record(self, op: Op, target: TileMachine) -> dict[str, Any] | None:
        """The im2col matmul's plan."""
        return None if self.geometry(op) is None else self.plan(op, target).describe()

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """The im2col matmul's cost under its plan: multiply-accumulates, and the partial
        sums exchanged when the reduction is split over tiles."""
        geometry = self.geometry(op)
        if geometry is None:
            return super().work(op, input_tiles, output_tiles, target)
        plan = self.plan(op, target)
        cost = target.matmul_cost(*plan.dims, geometry.dtype, plan.own_partition)
        return OpWork(cost.compute_cycles, cost.reduction_cycles)

    def data_need(self, geometry: ConvGeometry, tiles: np.ndarray, target: TileMachine,
                  plan: MatmulPlan | None = None) -> ExchangeNeed:
        """What the partition's tiles receive of the data input laid out as ``tiles``: each
        tile the distinct elements its LHS block reads and it does not hold. Above
        ``REARRANGE_ABOVE_DESTINATIONS`` readers per element the data is first copied into
        the createInput layout and broadcast from there."""
        plan = plan or alone_plan(geometry, target)
        size = target.dtype_size(geometry.dtype)
        reads = target.remembered(("conv reads", geometry, plan),
                                  lambda: _read_structure(geometry, target, plan))
        name, _ = plan.cube_tensor("lhs")
        if plan.partition.broadcast_destinations(name) <= REARRANGE_ABOVE_DESTINATIONS:
            return reads.need(tiles, size, target.num_tiles)
        wanted = self.data_tiles(geometry, target, plan)
        copy = read_need(wanted, None, tiles, size, target.num_tiles)
        received, regions = target.remembered(
            ("conv broadcast", geometry, plan),
            lambda: reads.need(wanted, size, target.num_tiles).arrays())
        return copy + ExchangeNeed(received, regions)

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations: Any) -> tuple[float, float]:
        """Data and weights against what poplin creates (matmul value), the bias against
        its channels' tiles (bias value)."""
        geometry = self.geometry(op)
        if geometry is None:
            return 0.0, 0.0
        score, bound = created_agreement(op, input_tiles, target, valuations.matmul,
                                         self.operand_tiles)
        if op.has_input(2):
            bound += valuations.bias * geometry.out_channels
            tiles = flat_tiles(input_tiles, 2)
            if tiles is not None:
                score += valuations.bias * count_equal(tiles, self.operand_tiles(op, 2, target))
        return score, bound

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """What poplin creates: no rearrangement, every read element on a tile reading it,
        each bias value on a tile of its channel."""
        geometry = self.geometry(op)
        if geometry is None or index not in (0, 1, 2) or not op.has_input(index):
            return None
        if index == 2:
            return self.bias_tiles(geometry, output_tiles[0], target)
        return self.operand_tiles(op, index, target)


def alone_plan(geometry: ConvGeometry, target: TileMachine) -> MatmulPlan:
    """The im2col matmul planned alone: its own cube, its cheapest partition."""
    return MatmulPlan(geometry.dims, target.matmul_plan(*geometry.dims, geometry.dtype))


def transpose_geometry(op: Op) -> ConvGeometry | None:
    """A ConvTranspose as the convolution Poplibs computes for it, or None where the model
    does not cover it (``auto_pad`` other than NOTSET, an ``output_shape`` attribute,
    unknown or empty shapes, attributes that do not fit them).

    ``y = ConvTranspose(x, w)`` with strides s, dilations d and pads p is the convolution
    of x dilated by s (its elements s apart, zeros between), with stride 1, dilation d,
    lower pad ``(k - 1)·d − p_lower`` (negative: the field cropped) and the weights
    flipped along every kernel axis and transposed per group (PopART's ConvFlipWeights):
    output position o reads x[i] at kernel position kk exactly when
    ``o + p_lower = i·s + (k − 1 − kk')·d`` for the flipped position kk'."""
    shapes = _window_shapes(op)
    if shapes is None or "output_shape" in op.attributes:
        return None
    x, w, y, n = shapes
    attributes = op.attributes
    try:
        group = int(attributes.get("group", 1))
        kernel = _exactly(attributes.get("kernel_shape", w[2:]), n)
        strides, dilations, pads = _geometry_window(op, n)
        extra = _exactly(attributes.get("output_padding", [0] * n), n)
    except (TypeError, ValueError):
        return None
    if (group < 1 or x[1] != w[0] or w[0] % group or kernel != tuple(w[2:])
            or min(strides + dilations) < 1 or min(pads + extra) < 0
            or tuple(y[:2]) != (x[0], w[1] * group)):
        return None
    for axis in range(n):
        full = strides[axis] * (x[2 + axis] - 1) + extra[axis] + (kernel[axis] - 1) \
            * dilations[axis] + 1
        if full - pads[axis] - pads[axis + n] != y[2 + axis]:
            return None
    if op.has_input(2) and tuple(op.input(2).shape or ()) != (y[1],):
        return None
    lower = tuple((k - 1) * d - p for k, d, p in zip(kernel, dilations, pads[:n], strict=True))
    return ConvGeometry(x[0], x[1], y[1], group, tuple(x[2:]), kernel, tuple(y[2:]),
                        (1,) * n, lower, dilations, op.input(0).dtype, strides)


class ConvTransposeRule(ConvRule):
    """ONNX ConvTranspose as PopART lowers it (``ConvTransposePattern``): ConvFlipWeights
    on the weights, then a convolution of the data with input dilation the stride
    (``transpose_geometry``). The convolution is planned as Conv's im2col matmul, its data
    read where the dilated field's real elements lie; the weights are a view of the
    matmul's RHS through the flip, so they are created, tied and read as Conv's."""

    def geometry(self, op: Op) -> ConvGeometry | None:
        return transpose_geometry(op)

    def rhs_index(self, geometry: ConvGeometry) -> np.ndarray:
        """``w[g*Cg + c, n, *kk] = rhs[g, (c, *flipped kk), n]`` (Cg input channels per
        group, N output channels per group)."""
        groups, _, inner, cols = geometry.dims
        per_group = geometry.in_channels // groups
        n = len(geometry.kernel)
        index = np.arange(groups * inner * cols).reshape(groups, per_group,
                                                         *geometry.kernel, cols)
        index = np.flip(index, axis=tuple(range(2, 2 + n)))
        return np.ascontiguousarray(
            index.transpose(0, 1, 2 + n, *range(2, 2 + n))).reshape(-1)


# -- pools ----------------------------------------------------------------------------------
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
        kernel = _exactly(attributes["kernel_shape"], n)
        strides = _exactly(attributes.get("strides", [1] * n), n)
        dilations = _exactly(attributes.get("dilations", [1] * n), n)
        pads = _exactly(attributes.get("pads", [0] * 2 * n), 2 * n)
        expected = _spatial_dims(op, x, kernel, bool(attributes.get("ceil_mode", 0)))
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
        out_strides = _strides(geometry.out_field)
        m_part = np.zeros((1,) * n, dtype=np.int64)
        read = np.ones((1,) * n, dtype=bool)
        for axis in range(n):
            first, _ = _first_readers(geometry.field[axis], geometry.out_field[axis],
                                      geometry.kernel[axis], geometry.strides[axis],
                                      geometry.pads[axis], geometry.dilations[axis])
            shape = [1] * n
            shape[axis] = -1
            m_part = m_part + (first * out_strides[axis]).reshape(shape)
            read = read & (first >= 0).reshape(shape)
        planes = geometry.batch * geometry.in_channels
        shape = (planes, *geometry.field)
        flat = np.broadcast_to(np.arange(planes).reshape((-1,) + (1,) * n)
                               * prod(geometry.out_field) + m_part[None], shape).reshape(-1)
        read = np.broadcast_to(read[None], shape).reshape(-1)
        if not read.any():
            return np.zeros(flat.size, dtype=np.asarray(output_tiles).dtype)
        nearest = np.where(read, np.arange(flat.size), -1)
        np.maximum.accumulate(nearest, out=nearest)
        nearest[nearest < 0] = int(np.argmax(read))
        return np.ascontiguousarray(np.asarray(output_tiles).reshape(-1)[flat[nearest]])

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
    out_index, _, offset = _window(geometry)
    planes = geometry.batch * geometry.in_channels
    plane = np.arange(planes, dtype=np.int64)[:, None]
    readers = plane * prod(geometry.out_field) + out_index[None, :]
    elements = plane * prod(geometry.field) + offset[None, :]
    return readers.reshape(-1), elements.reshape(-1)


def _global_axes(op: Op, rank: int) -> tuple[int, ...]:
    return tuple(range(2, rank))


# -- the data input's layout --------------------------------------------------------------
def _first_readers(size: int, out: int, kernel: int, stride: int, pad: int, dilation: int,
                   input_dilation: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Along one spatial axis: for each input position, the first (lowest) output position
    reading it and the kernel position it is read at; -1 where none reads it. With an
    input dilation the element at position i lies at i·input_dilation of the field the
    windows slide over (a negative ``pad`` crops that field)."""
    position = np.arange(size) * input_dilation
    first = np.full(size, -1, dtype=np.int64)
    at = np.full(size, -1, dtype=np.int64)
    for k in range(kernel - 1, -1, -1):  # a larger kernel position means an earlier output
        shifted = position + pad - k * dilation
        o = shifted // stride
        hit = (first < 0) & (shifted >= 0) & (shifted % stride == 0) & (o < out)
        first[hit], at[hit] = o[hit], k
    return first, at


def _create_input_tiles(geometry: ConvGeometry, target: TileMachine,
                        plan: MatmulPlan) -> np.ndarray:
    groups, rows, inner, _ = geometry.dims
    lhs = plan_operand_tiles(target, plan, "lhs", geometry.dtype)
    n = len(geometry.field)
    out_strides, kernel_strides = _strides(geometry.out_field), _strides(geometry.kernel)
    # The lowest flat LHS index reading an element has the lowest output position m, and
    # output positions are row-major: axis by axis, the first output position reading it.
    m_part = np.zeros((1,) * n, dtype=np.int64)
    k_part = np.zeros((1,) * n, dtype=np.int64)
    read = np.ones((1,) * n, dtype=bool)
    for axis in range(n):
        first, at = _first_readers(geometry.field[axis], geometry.out_field[axis],
                                   geometry.kernel[axis], geometry.strides[axis],
                                   geometry.pads[axis], geometry.dilations[axis],
                                   geometry.dilated(axis))
        shape = [1] * n
        shape[axis] = -1
        m_part = m_part + (first * out_strides[axis]).reshape(shape)
        k_part = k_part + (at * kernel_strides[axis]).reshape(shape)
        read = read & (first >= 0).reshape(shape)
    per_group = geometry.in_channels // groups
    channel = np.arange(geometry.in_channels).reshape((1, -1) + (1,) * n)
    batch = np.arange(geometry.batch).reshape((-1, 1) + (1,) * n)
    flat = (((channel // per_group) * rows + batch * prod(geometry.out_field)
             + m_part[None, None]) * inner
            + (channel % per_group) * prod(geometry.kernel) + k_part[None, None])
    shape = geometry.input_shape
    flat = np.broadcast_to(flat, shape).reshape(-1)
    read = np.broadcast_to(read[None, None], shape).reshape(-1)
    if not read.any():  # no position reads anything: all padding; on the plan's first tile
        return np.full(flat.size, plan.start_tile % target.num_tiles, dtype=lhs.dtype)
    # Unread elements take the tile of the read element before them (the first read one
    # for those before it): Poplibs' extension of partial usage to neighbours.
    nearest = np.where(read, np.arange(flat.size), -1)
    np.maximum.accumulate(nearest, out=nearest)
    nearest[nearest < 0] = int(np.argmax(read))
    return np.ascontiguousarray(lhs[flat[nearest]])


def _strides(shape: Shape) -> list[int]:
    return [prod(shape[axis + 1:]) for axis in range(len(shape))]


# -- what each tile reads of the data input -------------------------------------------------
class _Reads(NamedTuple):
    """The distinct (LHS block, data element) pairs of the im2col, sorted by block then
    element, and which block each tile reads; layout independent, so computed once."""

    block: np.ndarray  # per pair (int32)
    element: np.ndarray  # per pair
    starts: np.ndarray  # per pair: a new block or a gap in the elements begins here
    block_sizes: np.ndarray  # distinct elements per block
    tile_block: np.ndarray  # per tile: the block it reads, -1 when idle

    def need(self, tiles: np.ndarray, element_bytes: int, num_tiles: int) -> ExchangeNeed:
        """What the tiles receive of the data laid out as ``tiles``: each its block's
        distinct elements less those it holds, by runs, as a matmul operand's readers."""
        held = np.asarray(tiles).reshape(-1)[self.element]
        return block_need(held, self.block, self.starts, self.block_sizes, self.tile_block,
                          element_bytes, num_tiles)


def _window(geometry: ConvGeometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over (output position, kernel position) pairs that read a real element (not
    padding, nor a zero of the input dilation): the flat output position, flat kernel
    position and flat spatial offset read."""
    n = len(geometry.field)
    outs = np.indices(geometry.out_field).reshape(n, -1)
    kernel = np.indices(geometry.kernel).reshape(n, -1)
    offset = np.zeros((outs.shape[1], kernel.shape[1]), dtype=np.int64)
    valid = np.ones(offset.shape, dtype=bool)
    for axis, stride in enumerate(_strides(geometry.field)):
        position = ((outs[axis] * geometry.strides[axis] - geometry.pads[axis])[:, None]
                    + (kernel[axis] * geometry.dilations[axis])[None, :])
        step = geometry.dilated(axis)
        valid &= ((position >= 0) & (position % step == 0)
                  & (position // step < geometry.field[axis]))
        offset += position // step * stride
    out_index, kernel_index = np.nonzero(valid)
    return out_index, kernel_index, offset[out_index, kernel_index]


def _read_structure(geometry: ConvGeometry, target: TileMachine,
                    chosen: MatmulPlan) -> _Reads:
    groups, rows, inner, _ = geometry.dims
    plan = chosen.own_partition
    per_group = geometry.in_channels // groups
    positions, kernel_size = prod(geometry.out_field), prod(geometry.kernel)
    spatial = prod(geometry.field)
    numel = prod(geometry.input_shape)
    out_index, kernel_index, offset = _window(geometry)
    row_block, inner_block = axis_parts(rows, plan.rows), axis_parts(inner, plan.inner)
    group_block = axis_parts(groups, plan.groups)
    # Blocks are numbered as the cube tensor the LHS is: (g, row, inner) blocks, or
    # (g, inner, row) ones where the pass holds that tensor transposed.
    name, transposed = chosen.cube_tensor("lhs")
    group_weight = plan.rows * plan.inner
    row_weight, inner_weight = (1, plan.rows) if transposed else (plan.inner, 1)
    # k = (ci, kk): the inner block of each (input channel, readable window pair)
    inner_part = inner_block.reshape(per_group, kernel_size)[:, kernel_index] \
        * inner_weight  # [Cg, V]
    # Enumerate im2col rows (b, g), and their input channels, in chunks of at most
    # CHUNK_POSITIONS pairs: element ids of different rows or channels never meet.
    pairs = max(out_index.size, 1)
    channel_step = max(1, min(per_group, CHUNK_POSITIONS // pairs))
    step = max(1, CHUNK_POSITIONS // (per_group * pairs))
    chunks = []
    for first in range(0, geometry.batch * groups, step):
        row = np.arange(first, min(first + step, geometry.batch * groups))
        b, g = row // groups, row % groups
        m = (b * positions)[:, None] + out_index[None, :]  # [R, V]
        row_part = group_block[g][:, None] * group_weight + row_block[m] * row_weight
        for low in range(0, per_group, channel_step):
            channels = np.arange(low, min(low + channel_step, per_group))
            base = ((b * geometry.in_channels + g * per_group)[:, None]
                    + channels[None, :]) * spatial  # [R, C]
            block = row_part[:, None, :] + inner_part[None, channels, :]  # [R, C, V]
            element = base[:, :, None] + offset[None, None, :]
            chunks.append(_distinct(block.reshape(-1) * numel + element.reshape(-1)))
    # one array of keys sorted in place, and block and element written straight into
    # narrow arrays: the pairs of a 224 x 224 layer run to tens of millions
    keys = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    del chunks
    keys.sort()
    num_blocks = plan.groups * plan.rows * plan.inner
    block = np.empty(keys.size, np.int32)  # at most one block per tile
    np.floor_divide(keys, numel, out=block, casting="unsafe")
    element = np.empty(keys.size, np.int32 if numel < 2**31 else np.int64)
    np.remainder(keys, numel, out=element, casting="unsafe")
    del keys
    starts = np.ones(block.size, dtype=bool)
    np.not_equal(block[1:], block[:-1], out=starts[1:])
    starts[1:] |= np.diff(element) != 1
    return _Reads(block, element, starts,
                  np.bincount(block, minlength=num_blocks).astype(np.int64),
                  rotated_per_tile(matmul_reader_blocks(chosen.partition, name,
                                                        target.num_tiles), chosen.start_tile))


def _distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (numpy's sort is far faster than np.unique's hash)."""
    keys = np.sort(keys)
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys


register(OpDef("Conv", infer=_infer_conv, fold=_fold_conv, layout=ConvRule(),
               outline_value=HIGH_OUTLINE_VALUE))
register(OpDef("ConvTranspose", infer=_infer_conv_transpose, fold=_fold_conv_transpose,
               layout=ConvTransposeRule(), outline_value=HIGH_OUTLINE_VALUE))
register(OpDef("MaxPool", infer=_infer_pool, fold=_fold_max_pool, layout=PoolRule()))
for _pool in ("AveragePool", "LpPool"):
    register(OpDef(_pool, infer=_infer_pool, layout=PoolRule()))
# A global pool reduces each (n, c) plane: laid out and costed as a reduction over the
# spatial axes (popops::reduce's partials), docs/ipu-model.md.
for _pool in ("GlobalAveragePool", "GlobalMaxPool"):
    register(OpDef(_pool, infer=_infer_global_pool, layout=ReductionRule(_global_axes)))
register(OpDef("GlobalLpPool", infer=_infer_global_pool))
