"""ATen converters for convolutions and max pooling, forward and backward:
``convolution_backward`` as ConvTranspose, Conv and ReduceSum (PopART's data-gradient and
weight-gradient convolutions), ``max_pool2d_with_indices`` as MaxPool and its backward as
ScatterElements. The backward passes are built by the ops' own gradient formulas
(``ops.conv``, ``ops.pools``), so a gradient rule and this front end give one form.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from popart_unwind.frontends.aten_table import argument, converts, ints
from popart_unwind.ir.dtypes import numpy_dtype
from popart_unwind.ops.conv import (
    conv_bias_gradient,
    conv_data_gradient,
    conv_weight_gradient,
    transpose_padding,
)
from popart_unwind.ops.pools import window_max_gradient


# -- convolutions ---------------------------------------------------------------------------
@converts("convolution.default")
def _convolution(ctx, node, args, kwargs):
    """A forward convolution as ONNX Conv (PopART's ConvOp); transposed ones stay opaque."""
    x, weight, bias, stride, padding, dilation, transposed, _, groups = args
    if transposed:
        return NotImplemented
    pads = [int(p) for p in padding] * 2
    attributes = {"strides": ints(stride), "pads": pads, "dilations": ints(dilation),
                  "group": int(groups), "kernel_shape": list(ctx.shape(weight)[2:])}
    return ctx.op(node, "Conv", [x, weight, bias], attributes)


@converts("convolution_backward.default")
def _convolution_backward(ctx, node, args, kwargs):
    """The three gradients of a forward convolution, each only if ``output_mask`` asks for
    it, built by the Conv gradient rule's own formulas (``ops.conv``): grad_input as
    PopART's ConvDataGradOp (a ConvTranspose of the gradient with the weights),
    grad_weight as its ConvWeightsGradOp (a Conv of the input over the gradient), grad_bias
    as a ReduceSum. Declined (kept opaque): transposed forward convolutions, and shapes no
    forward convolution of these arguments gives."""
    grad_out, x, weight = (ctx.tensor(value) for value in args[:3])
    stride, padding, dilation = ints(args[4]), ints(args[5]), ints(args[6])
    transposed, groups, mask = args[7], int(args[9]), list(args[10])
    n = len(x.shape) - 2
    if transposed or n < 1 or len(stride) != n or len(padding) != n or len(dilation) != n:
        return NotImplemented
    builder = ContextBuilder(ctx)
    results: list = [None, None, None]
    if mask[0]:
        pads, extra = transpose_padding(x.shape[2:], grad_out.shape[2:], weight.shape[2:],
                                        stride, padding * 2, dilation)
        if pads != padding * 2 or any(e >= max(s, d) for e, s, d in zip(
                extra, stride, dilation, strict=True)):
            return NotImplemented
        results[0] = conv_data_gradient(builder, grad_out, weight, x.shape[2:], stride,
                                        padding * 2, dilation, groups)
    if mask[1]:
        results[1] = conv_weight_gradient(builder, grad_out, x, weight.shape, stride, padding,
                                          dilation, groups)
    if mask[2]:
        results[2] = conv_bias_gradient(builder, grad_out)
    return results


class ContextBuilder:
    """A converter's context seen as the ``GradientBuilder`` the ops' gradient formulas
    take (``ops.conv``, ``ops.pools``): unnamed ops shaped by their rules, shared
    constants."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def op(self, op_type: str, inputs, attributes=None, *, num_outputs: int = 1) -> list:
        made = self.ctx.op(None, op_type, list(inputs), attributes, num_outputs)
        return [made] if num_outputs == 1 else list(made)

    def constant(self, value, dtype: str):
        return self.ctx.constant(np.asarray(value, dtype=numpy_dtype(dtype)))


# -- max pooling ----------------------------------------------------------------------------
@converts("max_pool2d_with_indices.default")
def _max_pool_with_indices(ctx, node, args, kwargs):
    """ONNX MaxPool, with its Indices output only when a later op reads torch's indices.
    ONNX counts an index over the whole flattened NCHW input, torch over each (n, c)
    plane's H·W, so the indices are taken modulo H·W. Declined: inputs without a batch
    axis, and ceil mode where it changes the output (ONNX and torch count its last window
    differently)."""
    plain = _max_pool_attributes(ctx, node, args, kwargs)
    if plain is None:
        return NotImplemented
    x, attributes = plain
    used = any(user.target is operator.getitem and user.args[1] == 1 for user in node.users)
    if not used:
        return [ctx.op(None, "MaxPool", [x], attributes), None]
    values, indices = ctx.op(None, "MaxPool", [x], attributes, num_outputs=2)
    plane = int(np.prod(ctx.shape(x)[2:]))
    return [values, ctx.op(None, "Mod", [indices, ctx.int_constant(plane)])]


def _max_pool_attributes(ctx, node, args, kwargs):
    """The input and the ONNX MaxPool attributes of a 2-d max pool's arguments (kernel,
    stride (the kernel when empty), padding, dilation, ceil mode), or None where ONNX's
    MaxPool does not give torch's output shape."""
    x = args[0]
    shape = ctx.shape(x)
    kernel = _pair(argument(args, kwargs, 1, "kernel_size", None))
    stride = _pair(argument(args, kwargs, 2, "stride", [])) or kernel
    padding = _pair(argument(args, kwargs, 3, "padding", 0))
    dilation = _pair(argument(args, kwargs, 4, "dilation", 1))
    if len(shape) != 4 or not (len(kernel) == len(stride) == len(padding) == len(dilation) == 2):
        return None
    floor = [(size + 2 * p - (k - 1) * d - 1) // s + 1 for size, k, s, p, d in zip(
        shape[2:], kernel, stride, padding, dilation, strict=True)]
    if tuple(floor) != tuple(ctx.out_shapes(node)[0][2:]):
        return None  # ceil mode kept a last window: ONNX would count it differently
    return x, {"kernel_shape": kernel, "strides": stride, "pads": padding * 2,
               "dilations": dilation}


def _pair(value: Any) -> list[int]:
    values = [value] if isinstance(value, int) else ints(value)
    return values * 2 if len(values) == 1 else values


@converts("max_pool2d_with_indices_backward.default")
def _max_pool_backward(ctx, node, args, kwargs):
    """The gradient of a max pool: each output gradient added at the input position its
    index names (torch's index within its (n, c) plane), i.e. ScatterElements with "add"
    into zeros[N, C, H·W] along the plane (``ops.pools.window_max_gradient``, as MaxPool's
    gradient rule builds it), reshaped to the input's shape. The pool's geometry does not
    enter: the indices say where every window's maximum lay."""
    grad_out, x, indices = (ctx.tensor(value) for value in (args[0], args[1], args[7]))
    shape = x.shape
    if len(shape) != 4 or indices.shape != grad_out.shape:
        return NotImplemented
    scattered = window_max_gradient(ContextBuilder(ctx), grad_out, indices, shape)
    return ctx.op(node, "Reshape", [scattered, ctx.int_constant(list(shape))])
