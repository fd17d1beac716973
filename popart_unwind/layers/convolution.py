"""The convolution layers of a training step: each forward Conv with the convolutions that
compute its gradients on the same cube of work.

A convolution is the grouped matmul of its im2col, [G, M, K] x [G, K, N] with M = batch x
output positions, K = input channels per group x kernel positions, N = output channels per
group (``ops.conv``). Its weight gradient, as PopART's ConvWeightsGradOp computes it and
the PyTorch front end imports it (a Conv of the input, channels and batch swapped, over
the output gradient, stride and dilation swapped, its field ending where the last kernel
position's windows end: the data's unread tail cut off by a Slice where even no upper pad
is too many), is that same im2col transposed times the output gradient: its im2col matmul
is [G, K, M] x [G, M, N], the cube's weight-update pass ("kmn"), element for element.
The data gradient (a ConvTranspose of the output gradient with the
weights) is the backward pass ("mnk") of the same cube only for a pointwise convolution
(1 x ... x 1 kernel, stride 1, no padding); otherwise its im2col reads the dilated,
flipped field and has a cube of its own.

Poplibs plans the passes of a convolution separately: its joint plans are for fully
connected layers only (``createPlan`` in lib/poplin/ConvPlan.cpp: "we only support joint
plans for fully connected layers for now"). So PopART rearranges the weights for the data
gradient (ConvFlipWeights) and the update adds a gradient laid out by another plan. The
planner may plan the passes of such a layer on one partition of the cube instead
(``layers/plan_choice.py``); a layer found here says which ops can.
"""

from __future__ import annotations

import dataclasses
from math import prod

from popart_unwind.errors import ShapeError
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.layers.fully_connected import FWD_AXES, FullyConnectedLayer
from popart_unwind.layers.operand_views import (
    OperandView,
    equal_constants,
    permutation_form,
    view_of,
)
from popart_unwind.machine.interface import pass_dims
from popart_unwind.ops.conv import ConvGeometry, ConvRule, ConvTransposeRule
from popart_unwind.ops.registry import REGISTRY, OpRegistry
from popart_unwind.ops.slicing import is_slice, slice_plan

#: The cube axes of the data gradient and of the weight gradient.
BWD_AXES, WU_AXES = "mnk", "kmn"


@dataclasses.dataclass(frozen=True)
class ConvolutionLayer(FullyConnectedLayer):
    """A forward Conv and the convolutions computing its gradients on its cube; the cube's
    "lhs" is the forward im2col, whose tensor (the data) has ``data_elements``."""

    data_elements: int = 0

    #: Poplibs plans the passes of a convolution each alone (see the module docstring).
    poplibs_joint = False

    def tensor_elements(self, name: str) -> int:
        """Elements of the tensor that cube tensor ``name`` is read from."""
        return self.data_elements if name == "lhs" else super().tensor_elements(name)


@dataclasses.dataclass(frozen=True)
class _Conv:
    op: Op
    geometry: ConvGeometry
    data: OperandView
    weights: OperandView


def _convs(graph: Graph, registry: OpRegistry, kind: type) -> list[_Conv]:
    """The ops of ``graph`` whose layout rule is exactly ``kind`` and covers them, in
    schedule order."""
    found = []
    for op in graph.schedule():
        rule = registry.layout_rule(op)
        if type(rule) is not kind or not (op.has_input(0) and op.has_input(1)):
            continue
        geometry = rule.geometry(op)
        if geometry is not None:
            found.append(_Conv(op, geometry, view_of(op.input(0), registry),
                               view_of(op.input(1), registry)))
    return found


def _same_view(first: OperandView, second: OperandView) -> bool:
    """Whether two views read the same elements of one base in the same order, or equal
    values of two constants (``equal_constants``)."""
    if first.base is not second.base:
        return equal_constants(first.base, first.chain, second.base, second.chain)
    form = permutation_form(first.chain)
    return form is not None and form == permutation_form(second.chain)


def _regrouped(view: OperandView, shape: tuple[int, ...], groups: int,
               order: tuple[int, int, int], merged: tuple[int, int]) -> OperandView:
    """``view`` (a [A, G x C, *S] tensor) split as [A, G, C, *S], its three leading axes
    put in ``order`` and reshaped to ``merged`` + S. A weight gradient reads the data (A
    the batch, C the channels per group) as [C, G x A] (order (2, 1, 0)) and the output
    gradient as [G x C, A] (order (1, 2, 0))."""
    spatial = list(shape[2:])
    chain = view.chain.copy()
    chain.reshape([shape[0], groups, shape[1] // groups, *spatial])
    chain.dim_shuffle([*order, *range(3, 3 + len(spatial))])
    chain.reshape([*merged, *spatial])
    return OperandView(view.base, chain)


def _is_weight_update(forward: _Conv, candidate: _Conv, registry: OpRegistry) -> bool:
    """Whether ``candidate`` is ``forward``'s weight gradient, element for element its
    cube's "kmn" pass (the module docstring)."""
    f, w = forward.geometry, candidate.geometry
    per_group = f.in_channels // f.groups
    if (w.groups, w.batch, w.in_channels, w.out_channels) != \
            (f.groups, per_group, f.groups * f.batch, f.out_channels):
        return False
    if (w.kernel, w.out_field, w.strides, w.dilations, w.pads) != \
            (f.out_field, f.kernel, f.dilations, f.strides, f.pads) or w.input_dilation:
        return False
    data = candidate.data
    if w.field != f.field:
        data = _uncropped(candidate.op, f, registry)
        if data is None:
            return False
    expected = _regrouped(forward.data, f.input_shape, f.groups, (2, 1, 0),
                          (per_group, f.groups * f.batch))
    return _same_view(expected, data)


def _uncropped(op: Op, forward: ConvGeometry, registry: OpRegistry) -> OperandView | None:
    """The view a weight gradient's data is cropped from, or None if it is not: the data
    is a Slice, step 1 from position 0, of spatial axes only, of a tensor with the forward's
    field, and the crop keeps every position the forward convolution reads (its last
    window ends inside the cropped field), so every element read is where it was."""
    crop = op.input(0).producer
    if crop is None or not is_slice(crop) or crop.input(0).shape is None:
        return None
    source = tuple(crop.input(0).shape)
    try:
        plan = slice_plan(crop, source)
    except (ShapeError, KeyError):
        return None
    if source[2:] != forward.field or any(
            start != 0 or step != 1 or (axis < 2 and size != source[axis])
            for axis, (start, _, step, size) in enumerate(plan)):
        return None
    for axis, (_, _, _, size) in enumerate(plan[2:]):
        last = ((forward.kernel[axis] - 1) * forward.dilations[axis] - forward.pads[axis]
                + (forward.out_field[axis] - 1) * forward.strides[axis])
        if size < forward.field[axis] and last >= size:
            return None
    return view_of(crop.input(0), registry)


def _is_data_gradient(forward: _Conv, candidate: _Conv) -> bool:
    """Whether ``candidate`` (a ConvTranspose) is ``forward``'s data gradient as the cube's
    "mnk" pass: a pointwise forward convolution, the same weights read the same way."""
    f, t = forward.geometry, candidate.geometry
    pointwise = all(k == 1 for k in f.kernel) and all(s == 1 for s in f.strides) \
        and not any(f.pads) and f.out_field == f.field
    return (pointwise and t.dims == pass_dims(f.dims, BWD_AXES) and t.groups == f.groups
            and t.field == f.out_field and t.out_field == f.field
            and not any(t.pads) and all(d == 1 for d in t.input_dilation)
            and _same_view(forward.weights, candidate.weights))


def _one_gradient(forward: _Conv, bwd: _Conv, wu: _Conv) -> bool:
    """Whether the data and weight gradients read one output gradient: the weight
    gradient's kernel is the data gradient's input with batch and channels swapped."""
    f = forward.geometry
    expected = _regrouped(bwd.data, f.output_shape, f.groups, (1, 2, 0),
                          (f.out_channels, f.batch))
    return _same_view(expected, wu.weights)


def _graph_layers(graph: Graph, registry: OpRegistry) -> list[ConvolutionLayer]:
    """Walking the schedule, each Conv not yet in a layer is a forward pass. Its data
    gradient is found by its weights; its weight gradient by its data and, when the data
    gradient is found, by the output gradient both read. Without a data gradient, sibling
    convolutions of one shape reading one input cannot be told apart by structure; the
    first weight gradient that fits is taken (its cube is the same)."""
    convs = _convs(graph, registry, ConvRule)
    transposes = _convs(graph, registry, ConvTransposeRule)
    assigned: set[int] = set()
    layers = []
    for forward in convs:
        if forward.op.id in assigned:
            continue
        bwd = next((t for t in transposes if t.op.id not in assigned
                    and _is_data_gradient(forward, t)), None)
        wu = next((c for c in convs if c.op.id not in assigned and c is not forward
                   and _is_weight_update(forward, c, registry)
                   and (bwd is None or _one_gradient(forward, bwd, c))), None)
        if bwd is None and wu is None:
            continue
        present = [(forward, FWD_AXES), (bwd, BWD_AXES), (wu, WU_AXES)]
        present = [(conv, axes) for conv, axes in present if conv is not None]
        producerless = {"lhs": forward.data.base.producer is None,
                        "rhs": forward.weights.base.producer is None}
        gradient = bwd.data if bwd is not None else wu.weights  # type: ignore[union-attr]
        producerless["output"] = gradient.base.producer is None
        layers.append(ConvolutionLayer(
            forward.op, bwd.op if bwd else None, wu.op if wu else None,
            forward.geometry.dims, tuple((conv.op.id, axes) for conv, axes in present),
            frozenset(name for name, free in producerless.items() if free),
            forward.weights.base.id if producerless["rhs"] else None,
            prod(forward.geometry.input_shape)))
        assigned.update(conv.op.id for conv, _ in present)
    return layers


def convolution_layers(ir: Ir, registry: OpRegistry = REGISTRY) -> list[ConvolutionLayer]:
    """The convolution layers of every graph of ``ir``, graph by graph, each graph's in the
    schedule order of their forward ops. A forward Conv with neither gradient found as a
    pass of its cube is no layer (its passes are planned alone)."""
    return [layer for graph in ir.graphs for layer in _graph_layers(graph, registry)]
