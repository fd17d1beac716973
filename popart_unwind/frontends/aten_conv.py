"""ATen converters for convolutions and max pooling, forward and backward:
``convolution_backward`` as ConvTranspose, Conv and ReduceSum (PopART's data-gradient and
weight-gradient convolutions), ``max_pool2d_with_indices`` as MaxPool and its backward as
ScatterElements.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from popart_unwind.frontends.aten_table import argument, converts, ints


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
    """The three gradients of a forward convolution, as the convolutions PopART lowers them
    to, each only if ``output_mask`` asks for it.

    - grad_input: PopART's ConvDataGradOp, a convolution of the gradient with the flipped,
      transposed weights and input dilation the forward stride: ONNX's
      ``ConvTranspose(grad_out, weight)`` with the forward strides, pads, dilations and
      groups, ``output_padding`` the rows the forward's last window left unread, so that its
      shape is the input's;
    - grad_weight: PopART's ConvWeightsGradOp (Poplibs' weight-delta convolution): a Conv
      of the input over the gradient, batch as the channels summed over, with stride and
      dilation swapped (the forward dilation steps the kernel position, the forward stride
      the output position) and groups kept as groups; its output, channels first as the
      input's channels per group then the output channels, is transposed to the weights'
      order and sliced to the kernel (the field may leave positions past it);
    - grad_bias: ReduceSum of the gradient over batch and spatial axes.

    Transposed forward convolutions are declined (they stay opaque)."""
    grad_out, x, weight = args[0], args[1], args[2]
    stride, padding, dilation = ints(args[4]), ints(args[5]), ints(args[6])
    transposed, groups, mask = args[7], int(args[9]), list(args[10])
    x_shape, w_shape, g_shape = ctx.shape(x), ctx.shape(weight), ctx.shape(grad_out)
    n = len(x_shape) - 2
    if transposed or n < 1 or len(stride) != n or len(padding) != n or len(dilation) != n:
        return NotImplemented
    results: list = [None, None, None]
    if mask[0]:
        extra = [x_shape[2 + a] - (stride[a] * (g_shape[2 + a] - 1)
                                   + (w_shape[2 + a] - 1) * dilation[a] + 1 - 2 * padding[a])
                 for a in range(n)]
        if min(extra) < 0 or any(e >= max(s, d) for e, s, d in zip(extra, stride, dilation,
                                                                   strict=True)):
            return NotImplemented
        results[0] = ctx.op(None, "ConvTranspose", [grad_out, weight], {
            "strides": stride, "pads": padding * 2, "dilations": dilation, "group": groups,
            "kernel_shape": list(w_shape[2:]), "output_padding": extra})
    if mask[1]:
        results[1] = _weight_gradient(ctx, grad_out, x, w_shape, stride, padding, dilation,
                                      groups)
    if mask[2]:
        axes = ctx.int_constant([0, *range(2, n + 2)])
        results[2] = ctx.op(None, "ReduceSum", [grad_out, axes], {"keepdims": 0})
    return results


def _weight_gradient(ctx, grad_out, x, w_shape, stride, padding, dilation, groups):
    """grad_w[g·N + n, c, kk] = Σ_b,o x[b, g·C/g + c, o·stride − pad + kk·dilation] ·
    grad_out[b, g·N + n, o]: a Conv whose batch is the input's channels per group, whose
    input channels are (group, batch) and whose weights are the gradient as
    [(group, output channel), batch, *O], in groups. Its field ends where the last kernel
    position's windows end (Poplibs truncates the weight-delta convolution's input the
    same way): its upper pad is cut to fit, and where even none is too many, the data's
    unread trailing positions are sliced off, so that it computes exactly the kernel's
    positions."""
    x_shape, g_shape = ctx.shape(x), ctx.shape(grad_out)
    n = len(x_shape) - 2
    batch, channels, out_channels = x_shape[0], x_shape[1], g_shape[1]
    per_group, cols = channels // groups, out_channels // groups
    spatial = list(range(3, n + 3))
    data = ctx.op(None, "Reshape", [x, ctx.int_constant(
        [batch, groups, per_group, *x_shape[2:]])])
    data = ctx.op(None, "Transpose", [data], {"perm": [2, 1, 0, *spatial]})
    data = ctx.op(None, "Reshape", [data, ctx.int_constant(
        [per_group, groups * batch, *x_shape[2:]])])
    # positions up to (k − 1)·dilation − pad + (O − 1)·stride are read, no further
    upper = [(w_shape[2 + a] - 1) * dilation[a] + (g_shape[2 + a] - 1) * stride[a] + 1
             - x_shape[2 + a] - padding[a] for a in range(n)]
    if min(upper) < 0:
        cropped = [a for a in range(n) if upper[a] < 0]
        data = ctx.op(None, "Slice", [
            data, ctx.int_constant([0] * len(cropped)),
            ctx.int_constant([x_shape[2 + a] + upper[a] for a in cropped]),
            ctx.int_constant([2 + a for a in cropped])])
    kernel = ctx.op(None, "Reshape", [grad_out, ctx.int_constant(
        [batch, groups, cols, *g_shape[2:]])])
    kernel = ctx.op(None, "Transpose", [kernel], {"perm": [1, 2, 0, *spatial]})
    kernel = ctx.op(None, "Reshape", [kernel, ctx.int_constant(
        [out_channels, batch, *g_shape[2:]])])
    delta = ctx.op(None, "Conv", [data, kernel], {
        "strides": dilation, "pads": list(padding) + [max(u, 0) for u in upper],
        "dilations": stride, "group": groups, "kernel_shape": list(g_shape[2:])})
    return ctx.op(None, "Transpose", [delta], {"perm": [1, 0, *range(2, n + 2)]})



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
    into zeros[N, C, H·W] along the plane, reshaped to the input's shape. The pool's
    geometry does not enter: the indices say where every window's maximum lay."""
    grad_out, x, indices = args[0], args[1], args[7]
    shape, g_shape = ctx.shape(x), ctx.shape(grad_out)
    if len(shape) != 4 or ctx.shape(indices) != g_shape:
        return NotImplemented
    batch, channels = shape[:2]
    plane = [batch, channels, int(np.prod(shape[2:]))]
    flat = ctx.int_constant([batch, channels, int(np.prod(g_shape[2:]))])
    zeros = ctx.constant(np.zeros(plane, dtype=ctx.dtype(grad_out)))
    scattered = ctx.op(None, "ScatterElements", [
        zeros, ctx.op(None, "Reshape", [indices, flat]),
        ctx.op(None, "Reshape", [grad_out, flat])], {"axis": 2, "reduction": "add"})
    return ctx.op(node, "Reshape", [scattered, ctx.int_constant(list(shape))])


