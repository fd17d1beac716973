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

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import IrError, PlanError, ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
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
from popart_unwind.ops.gradient import GradientBuilder, int64s, is_differentiable, one
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
    inherited_options,
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
    if window is None and op.type.name == "Conv":
        strides, pads, dilations, _ = explicit_window(op)
        window = strides, dilations, pads
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
        operands = tie_created_operands(op, emitter, self.operand_tiles, self.plan,
                                        ("data", "weights"))
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

    def has_plan(self, op: Op) -> bool:
        """A convolution the rule models (``geometry``): its im2col matmul's plan."""
        return self.geometry(op) is not None

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """The im2col matmul's cost under its plan: multiply-accumulates, and the partial
        sums exchanged when the reduction is split over tiles."""
        geometry = self.geometry(op)
        if geometry is None:
            return super().work(op, input_tiles, output_tiles, target)
        plan = self.plan(op, target)
        cost = target.matmul_cost(*plan.dims, geometry.dtype, plan.own_partition,
                                  plan.shared_operand, plan.memory_proportion)
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
                                         self.operand_tiles, self.plan)
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


# -- gradients ------------------------------------------------------------------------------
# The one home of a convolution's backward pass: the Conv gradient rule builds it, and the
# PyTorch front end lowers ``convolution_backward`` through it, so both give one form (the
# form ``layers.convolution`` recognises).
def transpose_padding(field: Sequence[int], out_field: Sequence[int], kernel: Sequence[int],
                      strides: Sequence[int], pads: Sequence[int],
                      dilations: Sequence[int]) -> tuple[list[int], list[int]]:
    """Pads (lower then upper) and ``output_padding`` of the ConvTranspose that spreads a
    window op's ``out_field`` gradient back over its ``field``: the forward's pads, and
    the positions past the last window as output padding; where the last window reaches
    past the padded field (a ceil-mode pool), its overhang is cropped as upper pad."""
    n = len(field)
    pads, extra = list(pads), []
    for a in range(n):
        reach = strides[a] * (out_field[a] - 1) + (kernel[a] - 1) * dilations[a] + 1
        left = field[a] + pads[a] + pads[a + n] - reach
        pads[a + n] -= min(left, 0)
        extra.append(max(left, 0))
    return pads, extra


def conv_data_gradient(builder: GradientBuilder, grad_out: Tensor, weight: Tensor,
                       field: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                       dilations: Sequence[int], group: int,
                       options: dict[str, Any] | None = None) -> Tensor:
    """dX of ``Y = Conv(X, W)`` (PopART's ConvDataGradOp): the gradient convolved with the
    flipped, transposed weights at input dilation the stride, i.e. ONNX's
    ``ConvTranspose(dY, W)`` with the forward's window and groups, ``output_padding`` the
    positions the forward's last window left unread, so that its shape is X's. ``options``:
    what it takes from the forward op (``linalg.inherited_options``)."""
    kernel = list(weight.shape[2:])
    pads, extra = transpose_padding(field, grad_out.shape[2:], kernel, strides, pads,
                                    dilations)
    return one(builder, "ConvTranspose", [grad_out, weight], {
        "strides": list(strides), "pads": pads, "dilations": list(dilations),
        "group": group, "kernel_shape": kernel, "output_padding": extra, **(options or {})})


def conv_weight_gradient(builder: GradientBuilder, grad_out: Tensor, x: Tensor,
                         w_shape: Sequence[int], strides: Sequence[int],
                         lower_pads: Sequence[int], dilations: Sequence[int],
                         group: int, options: dict[str, Any] | None = None) -> Tensor:
    """dW of ``Y = Conv(X, W)`` (PopART's ConvWeightsGradOp, Poplibs' weight-delta
    convolution): ``dW[g·N + n, c, kk] = Σ_b,o X[b, g·C/g + c, o·stride − pad +
    kk·dilation] · dY[b, g·N + n, o]``, a Conv whose batch is X's channels per group, whose
    input channels are (group, batch) and whose weights are dY as [(group, output channel),
    batch, *O], in groups, stride and dilation swapped; its output, transposed, is W's.
    Its field ends where the last kernel position's windows end (as Poplibs truncates it):
    the upper pad is cut to fit, and where even none is too many, X's unread trailing
    positions are sliced off, so that it computes exactly the kernel's positions."""
    x_shape, g_shape = tuple(x.shape), tuple(grad_out.shape)
    n = len(x_shape) - 2
    batch, channels, out_channels = x_shape[0], x_shape[1], g_shape[1]
    per_group, cols = channels // group, out_channels // group
    spatial = list(range(3, n + 3))
    data = one(builder, "Reshape", [x, int64s(builder, [batch, group, per_group,
                                                        *x_shape[2:]])])
    data = one(builder, "Transpose", [data], {"perm": [2, 1, 0, *spatial]})
    data = one(builder, "Reshape", [data, int64s(builder, [per_group, group * batch,
                                                           *x_shape[2:]])])
    # positions up to (k − 1)·dilation − pad + (O − 1)·stride are read, no further
    upper = [(w_shape[2 + a] - 1) * dilations[a] + (g_shape[2 + a] - 1) * strides[a] + 1
             - x_shape[2 + a] - lower_pads[a] for a in range(n)]
    if min(upper) < 0:
        cropped = [a for a in range(n) if upper[a] < 0]
        data = one(builder, "Slice", [
            data, int64s(builder, [0] * len(cropped)),
            int64s(builder, [x_shape[2 + a] + upper[a] for a in cropped]),
            int64s(builder, [2 + a for a in cropped])])
    kernel = one(builder, "Reshape", [grad_out, int64s(builder, [batch, group, cols,
                                                                 *g_shape[2:]])])
    kernel = one(builder, "Transpose", [kernel], {"perm": [1, 2, 0, *spatial]})
    kernel = one(builder, "Reshape", [kernel, int64s(builder, [out_channels, batch,
                                                               *g_shape[2:]])])
    delta = one(builder, "Conv", [data, kernel], {
        "strides": list(dilations), "pads": list(lower_pads) + [max(u, 0) for u in upper],
        "dilations": list(strides), "group": group, "kernel_shape": list(g_shape[2:]),
        **(options or {})})
    return one(builder, "Transpose", [delta], {"perm": [1, 0, *range(2, n + 2)]})


def conv_bias_gradient(builder: GradientBuilder, grad_out: Tensor) -> Tensor:
    """dB of a convolution: dY summed over batch and spatial axes."""
    n = len(grad_out.shape) - 2
    return one(builder, "ReduceSum", [grad_out, int64s(builder, [0, *range(2, n + 2)])],
               {"keepdims": 0})


def explicit_window(op: Op) -> tuple[list[int], list[int], list[int], int]:
    """Strides, pads (lower then upper), dilations and group of a Conv, its ``auto_pad``
    resolved to the pads ONNX states for it (SAME_UPPER puts the odd one at the end)."""
    x, w, y = input_shape(op, 0), input_shape(op, 1), op.output(0).shape
    n = len(x) - 2
    strides, dilations, auto_pad, pads = shape_window(op, n)
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * 2 * n
        for a in range(n):
            total = max((y[2 + a] - 1) * strides[a] + (w[2 + a] - 1) * dilations[a] + 1
                        - x[2 + a], 0)
            small = total // 2
            pads[a], pads[a + n] = ((small, total - small) if auto_pad == "SAME_UPPER"
                                    else (total - small, small))
    return strides, pads, dilations, int(op.attributes.get("group", 1))


def _conv_gradient(builder: GradientBuilder, op: Op,
                   grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX, dW and dB of ``Y = Conv(X, W, B)`` (PopART's ConvDataGradOp, ConvWeightsGradOp
    and the bias's reduction), each built as above."""
    grad = grads[0]
    if grad is None:
        return [None, None, None]
    x, w = op.input(0), op.input(1)
    strides, pads, dilations, group = explicit_window(op)
    n = len(x.shape) - 2
    found: list[Tensor | None] = [None, None, None]
    if is_differentiable(x):
        found[0] = conv_data_gradient(builder, grad, w, x.shape[2:], strides, pads,
                                      dilations, group, inherited_options(op))
    if is_differentiable(w):
        found[1] = conv_weight_gradient(builder, grad, x, w.shape, strides, pads[:n],
                                        dilations, group, inherited_options(op))
    if op.has_input(2) and is_differentiable(op.input(2)):
        found[2] = conv_bias_gradient(builder, grad)
    return found


register(OpDef("Conv", infer=_infer_conv, fold=_fold_conv, layout=ConvRule(),
               outline_value=HIGH_OUTLINE_VALUE, gradient=_conv_gradient))


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


def _reached(op: Op) -> list[int]:
    """Per spatial axis, how many leading positions of a ConvTranspose's output some input
    element reaches: up to (X − 1)·stride + (k − 1)·dilation − the lower pad."""
    x, w = op.input(0).shape, op.input(1).shape
    n = len(x) - 2
    _, kernel, strides, dilations, pads = _window_settings(op, w, n)
    return [(x[2 + a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a] + 1 - pads[a]
            for a in range(n)]


def _conv_transpose_gradient(builder: GradientBuilder, op: Op,
                             grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """dX, dW and dB of ``Y = ConvTranspose(X, W, B)``, the adjoint of Conv's data gradient:
    dX is ``Conv(dY, W)`` with the op's strides, pads, dilations and groups; dW is the
    weight-delta correlation of dY with X, ``conv_weight_gradient`` of that Conv; dB the
    reduce-sum. The trailing output positions no window of X reaches (``output_padding``
    past the upper pad: only the bias reaches them) are read by no window of the Conv,
    their gradient sliced off. The forms the fold leaves alone (``auto_pad`` other than
    NOTSET, ``output_shape``) are refused, naming the op."""
    grad = grads[0]
    if grad is None:
        return [None, None, None]
    if transpose_geometry(op) is None or min(_reached(op)) < 1:
        raise IrError(f"op {op.debug_name()} (ConvTranspose): no gradient rule for this "
                      f"form; explicit pads only (auto_pad NOTSET, no output_shape), with "
                      f"known shapes the attributes fit")
    x, w = op.input(0), op.input(1)
    n = len(x.shape) - 2
    group, kernel, strides, dilations, pads = _window_settings(op, w.shape, n)
    found: list[Tensor | None] = [None, None, None]
    if is_differentiable(x):
        reached = _reached(op)
        read = grad
        cropped = [a for a in range(n) if reached[a] < grad.shape[2 + a]]
        if cropped:
            read = one(builder, "Slice", [
                grad, int64s(builder, [0] * len(cropped)),
                int64s(builder, [reached[a] for a in cropped]),
                int64s(builder, [2 + a for a in cropped])])
        upper = [reached[a] - read.shape[2 + a] for a in range(n)]
        found[0] = one(builder, "Conv", [read, w], {
            "strides": list(strides), "pads": list(pads[:n]) + upper,
            "dilations": list(dilations), "group": group, "kernel_shape": list(kernel),
            **inherited_options(op)})
    if is_differentiable(w):
        found[1] = conv_weight_gradient(builder, x, grad, w.shape, strides, pads[:n],
                                        dilations, group, inherited_options(op))
    if op.has_input(2) and is_differentiable(op.input(2)):
        found[2] = conv_bias_gradient(builder, grad)
    return found


register(OpDef("ConvTranspose", infer=_infer_conv_transpose, fold=_fold_conv_transpose,
               layout=ConvTransposeRule(), outline_value=HIGH_OUTLINE_VALUE,
               gradient=_conv_transpose_gradient))
