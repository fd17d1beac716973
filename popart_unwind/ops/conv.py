"""Op family: convolutions — Conv and ConvTranspose — with ONNX semantics (window sizes as
``ops/windows.py`` counts them; the pools are ``ops/pools.py``).

Layouts of Conv: Poplibs plans a matmul as a convolution (lib/poplin/MatMul.cpp); here the
converse holds: a convolution is the grouped matmul of its im2col, ``[G, M, K] x [G, K, N]``
with G the groups, M = batch x output positions, K = input channels per group x kernel
positions and N = output channels per group, so one partition model serves both. The
weights and the output are exact views of the matmul's RHS and output. The data input is
not (an element feeds several im2col positions, padding feeds none), so its wanted layout
and its exchange are derived from the im2col itself (``ops/im2col.py``). ConvTranspose is
the convolution Poplibs computes for it: input dilation the stride, weights flipped
(PopART's ConvFlipWeights), so the same im2col model serves it with the data read where the
dilated field's real elements lie. docs/ipu-model.md ("Convolutions", "Transposed
convolutions") states every choice and approximation. The folds give each op's values in
numpy (the front ends' oracle).
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import PlanError, ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.machine.exchange import broadcast_index, read_need
from popart_unwind.machine.interface import (
    REARRANGE_ABOVE_DESTINATIONS,
    ExchangeNeed,
    MatmulPlan,
    TileMachine,
    plan_operand_readers,
    plan_operand_tiles,
)
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, input_shape, small_constants
from popart_unwind.ops.im2col import created_data_tiles, im2col_reads
from popart_unwind.ops.layout_rule import (
    InputTiles,
    LayoutRule,
    OpWork,
    UnwindEmitter,
    count_equal,
    flat_tiles,
)
from popart_unwind.ops.linalg import (
    chosen_or_alone,
    created_agreement,
    tie_created_operands,
)
from popart_unwind.ops.registry import HIGH_OUTLINE_VALUE, OpDef, register
from popart_unwind.ops.windows import (
    ConvGeometry,
    exactly,
    shape_window,
    spatial_dims,
    spatial_input,
    window_attribute,
    window_attributes,
    window_positions,
)
from popart_unwind.validation import Shape


# -- Conv -----------------------------------------------------------------------------------
def _infer_conv(op: Op) -> list:
    x, w = spatial_input(op), input_shape(op, 1)
    group = op.attributes.get("group", 1)
    if len(w) != len(x) or x[1] != w[1] * group or w[0] % group:
        raise ShapeError(f"op {op.debug_name()}: weights {w} do not fit input {x} with "
                         f"group {group}")
    if op.has_input(2) and input_shape(op, 2) != (w[0],):
        raise ShapeError(f"op {op.debug_name()}: bias must have shape ({w[0]},), got "
                         f"{input_shape(op, 2)}")
    kernel = window_attribute(op, "kernel_shape", w[2:], len(x) - 2)
    return [(op.input(0).dtype, (x[0], w[0], *spatial_dims(op, x, kernel)))]


def _conv_fold_operands(op: Op, constants) -> tuple | None:
    """(x, w, bias, output shape, spatial rank, strides, dilations, pads, group) of a Conv
    or ConvTranspose small enough to fold with every input constant, else None."""
    x, w = constants[0], constants[1]
    bias = constants[2] if len(constants) > 2 and op.has_input(2) else None
    out = op.output(0).shape
    if (not small_constants(x, w) or out is None or prod(out) > FOLD_MAX_ELEMENTS
            or (op.has_input(2) and bias is None)):
        return None
    n = x.ndim - 2
    window = window_attributes(op, n)
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
        read = padded[window_positions(kk, dilations, out[2:], strides)]
        for g in range(group):
            y[:, g * cols:(g + 1) * cols] += np.einsum(
                "bc...,nc->bn...", read[:, g * per_group:(g + 1) * per_group],
                w[(slice(g * cols, (g + 1) * cols), slice(None), *kk)])
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return [y.astype(x.dtype)]


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


def _window_settings(op: Op, w: Shape, n: int) -> tuple[int, Shape, Shape, Shape, Shape]:
    """Group, kernel, strides, dilations and pads of a Conv or ConvTranspose with weights
    of shape ``w``, the window as the folds read it (``window_attributes``), as ints.
    Raises ValueError where the model covers no such window (negative pads), and whatever
    reading an attribute that does not fit raises."""
    attributes = op.attributes
    group = int(attributes.get("group", 1))
    kernel = exactly(attributes.get("kernel_shape", w[2:]), n)
    window = window_attributes(op, n)
    if window is None:
        raise ValueError(f"op {op.debug_name()}: no window the model covers")
    strides, dilations, pads = (tuple(int(v) for v in values) for values in window)
    return group, kernel, strides, dilations, pads


def conv_geometry(op: Op) -> ConvGeometry | None:
    """The geometry of a Conv the model covers, or None: unknown or empty shapes, an
    ``auto_pad`` other than NOTSET, attributes that do not fit the shapes."""
    shapes = _window_shapes(op)
    if shapes is None:
        return None
    x, w, y, n = shapes
    try:
        group, kernel, strides, dilations, pads = _window_settings(op, w, n)
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


class ConvRule(LayoutRule):
    """ONNX Conv (N-d, grouped, strided, padded, dilated; ``auto_pad`` NOTSET) as PopART's
    ConvOpx lowers it: data and weights created by poplin (createInput, createWeights), the
    output laid out by the convolution's plan, a bias added per output channel.

    The plan is the im2col matmul's: the one chosen for the op (``target.chosen_plan``:
    a pass of a convolution layer sharing its cube, ``layers.convolution``) or, by default,
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
                                 lambda: created_data_tiles(geometry, target, plan))

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
                                  lambda: im2col_reads(geometry, target, plan))
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


register(OpDef("Conv", infer=_infer_conv, fold=_fold_conv, layout=ConvRule(),
               outline_value=HIGH_OUTLINE_VALUE))


# -- ConvTranspose --------------------------------------------------------------------------
def _infer_conv_transpose(op: Op) -> list:
    x, w = spatial_input(op), input_shape(op, 1)
    group = op.attributes.get("group", 1)
    if len(w) != len(x) or x[1] != w[0]:
        raise ShapeError(f"op {op.debug_name()}: weights {w} do not fit input {x}")
    n = len(x) - 2
    if "output_shape" in op.attributes:
        spatial = list(op.attributes["output_shape"])[-n:]
    else:
        kernel = window_attribute(op, "kernel_shape", w[2:], n)
        strides, dilations, auto_pad, pads = shape_window(op, n)
        extra = window_attribute(op, "output_padding", [0] * n, n)
        spatial = []
        for axis in range(n):
            if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                spatial.append(x[2 + axis] * strides[axis])
            else:
                spatial.append(strides[axis] * (x[2 + axis] - 1) + extra[axis]
                               + (kernel[axis] - 1) * dilations[axis] + 1
                               - pads[axis] - pads[axis + n])
    return [(op.input(0).dtype, (x[0], w[1] * group, *spatial))]


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
        written = window_positions(kk, dilations, x.shape[2:], strides)
        for g in range(group):
            part = np.einsum("bc...,cn->bn...", x[:, g * per_group:(g + 1) * per_group],
                             w[(slice(g * per_group, (g + 1) * per_group), slice(None), *kk)])
            y[(slice(None), slice(g * cols, (g + 1) * cols), *written[2:])] += part
    y = y[(slice(None), slice(None),
           *(slice(pads[a], pads[a] + out[2 + a]) for a in range(n)))]
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return [np.ascontiguousarray(y).astype(x.dtype)]


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
    try:
        group, kernel, strides, dilations, pads = _window_settings(op, w, n)
        extra = exactly(op.attributes.get("output_padding", [0] * n), n)
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


register(OpDef("ConvTranspose", infer=_infer_conv_transpose, fold=_fold_conv_transpose,
               layout=ConvTransposeRule(), outline_value=HIGH_OUTLINE_VALUE))
