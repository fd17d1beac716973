"""How each ATen op of a ``torch.export`` graph becomes IR ops, one converter per op.

The IR speaks ONNX's op vocabulary (PopART imports ONNX), so ATen ops are written as the
ONNX ops PopART would see for the same computation: ``view`` → Reshape, ``permute`` →
Transpose, ``addmm`` → MatMul + Add (PopART's Gemm decomposition), ``embedding`` → Gather,
advanced indexing (``index``) → Gather, ``slice_scatter`` → Concat of Slices,
``index_put`` with ``accumulate=True`` (an embedding's gradient) → ScatterND with reduction
"add", ``convolution_backward`` → ConvTranspose, Conv and ReduceSum (PopART's data-gradient
and weight-gradient convolutions), ``max_pool2d_with_indices`` → MaxPool and its backward →
ScatterElements.
Static values (``arange``, ``full``, scalars) become Const tensors. ATen ops with no ONNX
counterpart here (most backward kernels; any converter may decline by returning
``NotImplemented``) stay opaque ops in the ``aten`` domain, carrying
the shapes torch computed — the planner treats them as barriers, never as errors. A
converter writes an ATen op as other ops only when they compute exactly its values
(``index_put`` without accumulation, whose result torch leaves unspecified for duplicate
indices, stays opaque).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from popart_unwind.errors import ModelImportError
from popart_unwind.frontends.torch_values import TorchContext, scalar_constant

Converter = Callable[[TorchContext, Any, tuple, dict], Any]
CONVERTERS: dict[str, Converter] = {}


def converts(*names: str) -> Callable[[Converter], Converter]:
    def register(function: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = function
        return function
    return register


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def _argument(args: tuple, kwargs: dict, position: int, name: str, default: Any) -> Any:
    """An ATen argument given by position or by keyword; ``default`` when absent or None."""
    value = args[position] if len(args) > position else kwargs.get(name)
    return default if value is None else value


# -- views ------------------------------------------------------------------------------
@converts("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default")
def _reshape(ctx: TorchContext, node, args, kwargs):
    shape = ctx.out_shape(node)
    return ctx.op(node, "Reshape", [args[0], ctx.int_constant(shape)])


@converts("permute.default", "permute_copy.default")
def _permute(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    return ctx.op(node, "Transpose", [args[0]], {"perm": [d % rank for d in _ints(args[1])]})


@converts("t.default")
def _t(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    return ctx.op(node, "Transpose", [args[0]], {"perm": list(range(rank))[::-1]})


@converts("transpose.int")
def _transpose(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    perm = list(range(rank))
    a, b = args[1] % rank, args[2] % rank
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.op(node, "Transpose", [args[0]], {"perm": perm})


@converts("unsqueeze.default")
def _unsqueeze(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0])) + 1
    return ctx.op(node, "Unsqueeze", [args[0], ctx.int_constant([args[1] % rank])])


@converts("squeeze.dims", "squeeze.dim", "squeeze.default")
def _squeeze(ctx, node, args, kwargs):
    shape = ctx.shape(args[0])
    if len(args) > 1:
        dims = [args[1]] if isinstance(args[1], int) else list(args[1])
        dims = [d % max(len(shape), 1) for d in dims if shape and shape[d] == 1]
    else:
        dims = [d for d, size in enumerate(shape) if size == 1]
    if not dims:
        return ctx.op(node, "Identity", [args[0]])
    return ctx.op(node, "Squeeze", [args[0], ctx.int_constant(dims)])


@converts("expand.default", "expand_copy.default")
def _expand(ctx, node, args, kwargs):
    return ctx.op(node, "Expand", [args[0], ctx.int_constant(ctx.out_shape(node))])


@converts("slice.Tensor", "slice_copy.Tensor")
def _slice(ctx, node, args, kwargs):
    dim = args[1] if len(args) > 1 else 0
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else np.iinfo(np.int64).max
    step = args[4] if len(args) > 4 else 1
    inputs = [args[0], ctx.int_constant([start]), ctx.int_constant([min(end, 2**62)]),
              ctx.int_constant([dim % len(ctx.shape(args[0]))]), ctx.int_constant([step])]
    return ctx.op(node, "Slice", inputs)


@converts("slice_scatter.default")
def _slice_scatter(ctx, node, args, kwargs):
    """``src`` written over ``input[start:end:step]`` along ``dim`` (the backward of a
    slice). With step 1 the result is the base before the slice, ``src`` and the base after
    it, concatenated (PopART's Concat of Slices); with a larger step every written position
    reads its row of ``src`` through a Gather along ``dim``, and a constant mask of the
    written positions picks between that and the base (Where)."""
    base, src = args[0], args[1]
    shape = ctx.shape(base)
    rank = len(shape)
    dim = _argument(args, kwargs, 2, "dim", 0) % rank
    start = _argument(args, kwargs, 3, "start", None)
    end = _argument(args, kwargs, 4, "end", None)
    step = _argument(args, kwargs, 5, "step", 1)
    if step <= 0 or ctx.dtype(src) != ctx.dtype(base):
        return NotImplemented
    size = shape[dim]
    written = range(*slice(start, end, step).indices(size))
    expected = (*shape[:dim], len(written), *shape[dim + 1:])
    if ctx.shape(src) != expected:
        raise ModelImportError(
            f"{node.name} (aten.slice_scatter): src has shape {ctx.shape(src)}, expected "
            f"{expected} (input {shape}, dim {dim}, slice {start}:{end}:{step})")
    if not written:
        return ctx.op(node, "Identity", [base])
    if len(written) == 1 or step == 1:
        first, stop = written[0], written[-1] + 1
        parts = [_axis_slice(ctx, base, dim, 0, first)] if first > 0 else []
        parts.append(src)
        if stop < size:
            parts.append(_axis_slice(ctx, base, dim, stop, size))
        if len(parts) == 1:
            return ctx.op(node, "Identity", [src])
        return ctx.op(node, "Concat", parts, {"axis": dim})
    rows = np.zeros(size, dtype=np.int64)
    rows[list(written)] = np.arange(len(written))
    mask = np.zeros(size, dtype=bool)
    mask[list(written)] = True
    column = [1] * rank
    column[dim] = size
    spread = ctx.op(None, "Gather", [src, ctx.int_constant(rows)], {"axis": dim})
    return ctx.op(node, "Where", [ctx.constant(mask.reshape(column)), spread, base])


def _axis_slice(ctx, tensor, dim: int, start: int, end: int):
    return ctx.op(None, "Slice", [tensor, ctx.int_constant([start]), ctx.int_constant([end]),
                                  ctx.int_constant([dim])])


@converts("select.int")
def _select(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    dim, index = args[1] % rank, args[2] % ctx.shape(args[0])[args[1]]
    sliced = ctx.op(None, "Slice", [args[0], ctx.int_constant([index]),
                                    ctx.int_constant([index + 1]), ctx.int_constant([dim])])
    return ctx.op(node, "Squeeze", [sliced, ctx.int_constant([dim])])


@converts("cat.default")
def _cat(ctx, node, args, kwargs):
    tensors = [t for t in args[0] if ctx.shape(t) != (0,)]
    rank = len(ctx.out_shape(node))
    axis = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % rank
    return ctx.op(node, "Concat", tensors, {"axis": axis})


@converts("split_with_sizes.default", "split.Tensor")
def _split(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % rank
    sizes = [shape[dim] for shape in ctx.out_shapes(node)]
    return ctx.op(node, "Split", [args[0], ctx.int_constant(sizes)], {"axis": dim},
                  num_outputs=len(sizes))


@converts("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
          "contiguous.default")
def _identity(ctx, node, args, kwargs):
    return ctx.op(node, "Identity", [args[0]])


@converts("_to_copy.default", "to.dtype")
def _to_copy(ctx, node, args, kwargs):
    if ctx.dtype(args[0]) == ctx.out_dtype(node):
        return ctx.op(node, "Identity", [args[0]])
    return ctx.op(node, "Cast", [args[0]], {"to": ctx.onnx_dtype(ctx.out_dtype(node))})


# -- linear algebra ---------------------------------------------------------------------
@converts("mm.default", "bmm.default", "matmul.default")
def _matmul(ctx, node, args, kwargs):
    return ctx.op(node, "MatMul", [args[0], args[1]])


@converts("addmm.default", "baddbmm.default")
def _addmm(ctx, node, args, kwargs):
    """bias + mat1 @ mat2 as MatMul then Add, as PopART decomposes Gemm."""
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    product = ctx.op(None, "MatMul", [args[1], args[2]])
    if alpha != 1:
        product = ctx.op(None, "Mul", [product, scalar_constant(ctx, alpha, args[1])])
    bias = args[0]
    if beta != 1:
        bias = ctx.op(None, "Mul", [bias, scalar_constant(ctx, beta, args[0])])
    return ctx.op(node, "Add", [product, bias])


@converts("convolution.default")
def _convolution(ctx, node, args, kwargs):
    """A forward convolution as ONNX Conv (PopART's ConvOp); transposed ones stay opaque."""
    x, weight, bias, stride, padding, dilation, transposed, _, groups = args
    if transposed:
        return NotImplemented
    pads = [int(p) for p in padding] * 2
    attributes = {"strides": _ints(stride), "pads": pads, "dilations": _ints(dilation),
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
    stride, padding, dilation = _ints(args[4]), _ints(args[5]), _ints(args[6])
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
    kernel = _pair(_argument(args, kwargs, 1, "kernel_size", None))
    stride = _pair(_argument(args, kwargs, 2, "stride", [])) or kernel
    padding = _pair(_argument(args, kwargs, 3, "padding", 0))
    dilation = _pair(_argument(args, kwargs, 4, "dilation", 1))
    if len(shape) != 4 or not (len(kernel) == len(stride) == len(padding) == len(dilation) == 2):
        return None
    floor = [(size + 2 * p - (k - 1) * d - 1) // s + 1 for size, k, s, p, d in zip(
        shape[2:], kernel, stride, padding, dilation, strict=True)]
    if tuple(floor) != tuple(ctx.out_shapes(node)[0][2:]):
        return None  # ceil mode kept a last window: ONNX would count it differently
    return x, {"kernel_shape": kernel, "strides": stride, "pads": padding * 2,
               "dilations": dilation}


def _pair(value: Any) -> list[int]:
    values = [value] if isinstance(value, int) else _ints(value)
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


# -- elementwise ------------------------------------------------------------------------
COMPARISONS = {"Equal", "NotEqual", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
               "And", "Or"}


def _binary(onnx_name: str) -> Converter:
    """Python scalars become 0-d constants; arithmetic runs in the result's dtype (torch's
    type promotion), so operands of another dtype are cast first."""
    def convert(ctx, node, args, kwargs):
        a, b = args[0], args[1]
        like = a if ctx.is_tensor(a) else b
        compute = ctx.dtype(like) if onnx_name in COMPARISONS else ctx.out_dtype(node)
        operands = []
        for value in (a, b):
            if not ctx.is_tensor(value):
                value = ctx.constant(np.asarray(value, dtype=compute))
            elif ctx.dtype(value) != compute:
                value = ctx.op(None, "Cast", [value], {"to": ctx.onnx_dtype(compute)})
            operands.append(value)
        alpha = kwargs.get("alpha", 1)
        if alpha != 1:
            scale = ctx.constant(np.asarray(alpha, dtype=compute))
            operands[1] = ctx.op(None, "Mul", [operands[1], scale])
        return ctx.op(node, onnx_name, operands)
    return convert


for _aten, _onnx in {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
    "eq": "Equal", "lt": "Less", "gt": "Greater", "le": "LessOrEqual",
    "ge": "GreaterOrEqual", "bitwise_and": "And", "bitwise_or": "Or", "logical_and": "And",
    "logical_or": "Or", "maximum": "Max", "minimum": "Min", "remainder": "Mod",
}.items():
    converts(f"{_aten}.Tensor", f"{_aten}.Scalar", f"{_aten}.Tensor_Scalar",
             f"{_aten}.Tensor_Tensor", f"{_aten}.default")(_binary(_onnx))


@converts("ne.Tensor", "ne.Scalar")
def _not_equal(ctx, node, args, kwargs):
    """ONNX has no NotEqual: Not(Equal)."""
    return ctx.op(node, "Not", [_binary("Equal")(ctx, None, args, kwargs)])


@converts("clamp.default", "clamp.Tensor", "clamp_min.default", "clamp_max.default",
          "clamp_min.Tensor", "clamp_max.Tensor")
def _clamp(ctx, node, args, kwargs):
    """Clip; a Python bound becomes a 0-d constant of the input's dtype, a missing one an
    absent input."""
    name = str(node.target).split(".")[1]  # "aten.clamp_min.default" -> "clamp_min"
    x = args[0]
    if name == "clamp":
        low = args[1] if len(args) > 1 else kwargs.get("min")
        high = args[2] if len(args) > 2 else kwargs.get("max")
    elif name == "clamp_min":
        low, high = args[1], None
    else:
        low, high = None, args[1]
    bounds = [None if v is None else v if ctx.is_tensor(v) else scalar_constant(ctx, v, x)
              for v in (low, high)]
    return ctx.op(node, "Clip", [x, *bounds])


@converts("bernoulli.p", "bernoulli.default")
def _bernoulli(ctx, node, args, kwargs):
    """1 with probability p, else 0: a uniform draw shaped like the input, compared with p
    (``bernoulli.default`` takes p elementwise from the input) and cast back."""
    x = args[0]
    p = args[1] if len(args) > 1 else kwargs.get("p", x)
    draw = ctx.op(None, "RandomUniformLike", [x])
    bound = p if ctx.is_tensor(p) else scalar_constant(ctx, p, x)
    below = ctx.op(None, "Less", [draw, bound])
    return ctx.op(node, "Cast", [below], {"to": ctx.onnx_dtype(ctx.out_dtype(node))})


@converts("rsqrt.default")
def _rsqrt(ctx, node, args, kwargs):
    """ONNX has no Rsqrt: Reciprocal(Sqrt)."""
    return ctx.op(node, "Reciprocal", [ctx.op(None, "Sqrt", [args[0]])])


@converts("rsub.Scalar", "rsub.Tensor")
def _rsub(ctx, node, args, kwargs):
    return _binary("Sub")(ctx, node, (args[1], args[0]), kwargs)


def _unary(onnx_name: str) -> Converter:
    def convert(ctx, node, args, kwargs):
        return ctx.op(node, onnx_name, [args[0]])
    return convert


for _aten, _onnx in {
    "relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "sqrt": "Sqrt",
    "exp": "Exp", "log": "Log", "neg": "Neg", "abs": "Abs",
    "reciprocal": "Reciprocal", "bitwise_not": "Not", "logical_not": "Not", "sin": "Sin",
    "cos": "Cos", "floor": "Floor", "ceil": "Ceil", "isnan": "IsNaN", "silu": "Silu",
}.items():
    converts(f"{_aten}.default")(_unary(_onnx))


@converts("gelu.default")
def _gelu(ctx, node, args, kwargs):
    approximate = kwargs.get("approximate", "none")
    return ctx.op(node, "Gelu", [args[0]], {"approximate": approximate})


@converts("where.self")
def _where(ctx, node, args, kwargs):
    like = next(v for v in args[1:] if ctx.is_tensor(v)) if any(
        ctx.is_tensor(v) for v in args[1:]) else None
    values = [v if ctx.is_tensor(v) else scalar_constant(ctx, v, like, node) for v in args[1:]]
    return ctx.op(node, "Where", [args[0], *values])


# -- normalisation, softmax, embedding, reductions ---------------------------------------
@converts("native_layer_norm.default")
def _layer_norm(ctx, node, args, kwargs):
    x, normalized_shape, weight, bias, eps = args
    axis = len(ctx.shape(x)) - len(normalized_shape)
    inputs = [x, weight if weight is not None else ctx.float_constant(
        np.ones(normalized_shape), x), bias]
    # ATen returns the mean and inverse deviation in the input's type (float16 for a
    # float16 model); ONNX's stash_type says so (its default, 1, is float32).
    stash = {"float16": 10, "bfloat16": 16, "float64": 11}.get(ctx.dtype(x), 1)
    attributes = {"axis": axis, "epsilon": float(eps),
                  **({"stash_type": stash} if stash != 1 else {})}
    return ctx.op(node, "LayerNormalization", inputs, attributes, num_outputs=3)


def _per_channel(ctx, value, x, fill: float):
    """A batch norm's per-channel operand, or a constant ``fill`` for each channel."""
    if value is not None:
        return value
    return ctx.float_constant(np.full(ctx.shape(x)[1], fill), x)


@converts("_native_batch_norm_legit_no_training.default")
def _batch_norm_inference(ctx, node, args, kwargs):
    """BatchNormalization with the running statistics; the two saved statistics this ATen
    op also returns are empty in inference and become empty constants."""
    x, weight, bias, running_mean, running_var, _, eps = args[:7]
    y = ctx.op(node, "BatchNormalization",
               [x, _per_channel(ctx, weight, x, 1.0), _per_channel(ctx, bias, x, 0.0),
                running_mean, running_var], {"epsilon": float(eps)})
    empty = [ctx.constant(np.zeros(0, dtype=ctx.dtype(x))) for _ in range(2)]
    return [y, *empty]


@converts("_native_batch_norm_legit_functional.default")
def _batch_norm_training(ctx, node, args, kwargs):
    """A training-mode batch norm, decomposed into ops with layout rules (ONNX's
    BatchNormalization cannot return the saved mean and inverse standard deviation the
    backward pass reads): the batch mean and biased variance are ReduceMeans over every
    axis but the channels, Y = (x - mean) · rsqrt(var + eps) · weight + bias, and the
    running statistics move by ``momentum`` towards the batch's (the variance unbiased)."""
    x, weight, bias, running_mean, running_var, training, momentum, eps = args[:8]
    if not training:  # the running statistics normalise and stay as they are
        y, *empty = _batch_norm_inference(ctx, node, [x, weight, bias, running_mean,
                                                      running_var, momentum, eps], kwargs)
        return [y, *empty, running_mean, running_var]
    shape = ctx.shape(x)
    channels = shape[1]
    axes = ctx.int_constant([0, *range(2, len(shape))])
    count = int(np.prod(shape)) // channels
    column = ctx.int_constant([1, channels] + [1] * (len(shape) - 2))
    flat = ctx.int_constant([channels])

    def scalar(value):
        return ctx.float_constant(np.asarray(value), x)

    mean = ctx.op(None, "ReduceMean", [x, axes], {"keepdims": 1})
    centered = ctx.op(None, "Sub", [x, mean])
    var = ctx.op(None, "ReduceMean", [ctx.op(None, "Mul", [centered, centered]), axes],
                 {"keepdims": 1})
    invstd = ctx.op(None, "Reciprocal", [ctx.op(None, "Sqrt", [
        ctx.op(None, "Add", [var, scalar(eps)])])])
    y = ctx.op(None, "Mul", [centered, invstd])
    if weight is not None:
        y = ctx.op(None, "Mul", [y, ctx.op(None, "Reshape", [weight, column])])
    if bias is not None:
        y = ctx.op(None, "Add", [y, ctx.op(None, "Reshape", [bias, column])])
    saved_mean = ctx.op(None, "Reshape", [mean, flat])
    saved_invstd = ctx.op(None, "Reshape", [invstd, flat])
    unbiased = ctx.op(None, "Mul", [ctx.op(None, "Reshape", [var, flat]),
                                    scalar(count / max(count - 1, 1))])
    keep, step = scalar(1.0 - momentum), scalar(momentum)

    def moved(running, batch):
        return ctx.op(None, "Add", [ctx.op(None, "Mul", [running, keep]),
                                    ctx.op(None, "Mul", [batch, step])])

    return [y, saved_mean, saved_invstd, moved(running_mean, saved_mean),
            moved(running_var, unbiased)]


@converts("_softmax.default", "softmax.int")
def _softmax(ctx, node, args, kwargs):
    return ctx.op(node, "Softmax", [args[0]], {"axis": args[1] % len(ctx.shape(args[0]))})


@converts("_log_softmax.default", "log_softmax.int")
def _log_softmax(ctx, node, args, kwargs):
    return ctx.op(node, "LogSoftmax", [args[0]], {"axis": args[1] % len(ctx.shape(args[0]))})


@converts("embedding.default")
def _embedding(ctx, node, args, kwargs):
    return ctx.op(node, "Gather", [args[0], args[1]], {"axis": 0})


@converts("index.Tensor")
def _index(ctx, node, args, kwargs):
    """Advanced indexing ``input[..., i, j, ...]`` by integer tensors (None for a whole
    axis), as ONNX's Gather.

    One index tensor on axis d is ``Gather(input, i, axis=d)``: torch's result shape
    ``input[:d] + i.shape + input[d+1:]`` is Gather's. Several index tensors address the
    axes they index together: the indices broadcast against each other, are counted from
    the end where negative, and combine row-major into one index into those axes merged by
    a Reshape, which one Gather reads. torch puts the broadcast index shape where the
    indexed axes were when they are adjacent, and first otherwise, so apart ones are moved
    to the front (Transpose) first. Boolean masks select a data-dependent number of
    elements and stay opaque."""
    data, indices = args[0], list(args[1])
    shape = ctx.shape(data)
    picked = [(axis, index) for axis, index in enumerate(indices) if index is not None]
    if not picked or len(indices) > len(shape) or any(
            ctx.dtype(index) not in ("int64", "int32") for _, index in picked):
        return NotImplemented
    if len(picked) == 1:
        axis, index = picked[0]
        return ctx.op(node, "Gather", [data, index], {"axis": axis})
    axes = [axis for axis, _ in picked]
    if axes != list(range(axes[0], axes[-1] + 1)):
        rest = [axis for axis in range(len(shape)) if axis not in axes]
        data = ctx.op(None, "Transpose", [data], {"perm": axes + rest})
        shape = tuple(shape[axis] for axis in axes + rest)
        axes = list(range(len(axes)))
    first, count = axes[0], len(axes)
    sizes = shape[first:first + count]
    flat = _flat_index(ctx, [index for _, index in picked], sizes)
    merged = (*shape[:first], int(np.prod(sizes, dtype=np.int64)), *shape[first + count:])
    data = ctx.op(None, "Reshape", [data, ctx.int_constant(merged)])
    return ctx.op(node, "Gather", [data, flat], {"axis": first})


def _flat_index(ctx: TorchContext, picked: list, sizes: tuple[int, ...]) -> Any:
    """Index tensors into adjacent axes of ``sizes`` combined row-major into one int64 index
    into those axes merged, each counted from the end where negative (they broadcast)."""
    flat = None
    for position, index in enumerate(picked):
        if ctx.dtype(index) != "int64":
            index = ctx.op(None, "Cast", [index], {"to": ctx.onnx_dtype("int64")})
        negative = ctx.op(None, "Less", [index, ctx.int_constant(0)])
        index = ctx.op(None, "Where", [negative, ctx.op(None, "Add", [
            index, ctx.int_constant(sizes[position])]), index])
        stride = int(np.prod(sizes[position + 1:], dtype=np.int64))
        if stride != 1:
            index = ctx.op(None, "Mul", [index, ctx.int_constant(stride)])
        flat = index if flat is None else ctx.op(None, "Add", [flat, index])
    return flat


@converts("index_put.default", "index_put_.default", "_unsafe_index_put.default")
def _index_put(ctx, node, args, kwargs):
    """``input[i, j, ...] += values`` with ``accumulate=True`` (an embedding's gradient:
    ``embedding_dense_backward`` is ``index_put(zeros, [ids], grad, True)``) as ONNX's
    ScatterND with reduction "add", which accumulates duplicate indices as torch does.

    The index tensors must address the leading axes (no None before or between them):
    one is ScatterND's index column as it is; several broadcast and combine row-major
    into one index into those axes merged by a Reshape (as ``index`` does), the result
    reshaped back. ``values`` broadcast to the indexed shape (Expand). Declined, and kept
    opaque: ``accumulate=False`` (with duplicate indices torch leaves the result
    unspecified, so no op here can be shown to give its values), boolean masks, indices
    on later axes, and values of another dtype."""
    data, indices, values = args[0], list(args[1]), args[2]
    accumulate = bool(_argument(args, kwargs, 3, "accumulate", False))
    shape = ctx.shape(data)
    picked = [index for index in indices if index is not None]
    count = len(picked)
    if (not accumulate or not picked or count > len(shape) or len(indices) > len(shape)
            or any(index is None for index in indices[:count])
            or any(ctx.dtype(index) not in ("int64", "int32") for index in picked)
            or ctx.dtype(values) != ctx.dtype(data)):
        return NotImplemented
    try:
        index_shape = tuple(np.broadcast_shapes(*(ctx.shape(index) for index in picked)))
        updates_shape = (*index_shape, *shape[count:])
        if tuple(np.broadcast_shapes(ctx.shape(values), updates_shape)) != updates_shape:
            return NotImplemented
    except ValueError:
        return NotImplemented
    if ctx.shape(values) != updates_shape:
        values = ctx.op(None, "Expand", [values, ctx.int_constant(updates_shape)])
    if count == 1:
        column = ctx.op(None, "Unsqueeze", [picked[0], ctx.int_constant([len(index_shape)])])
        return ctx.op(node, "ScatterND", [data, column, values], {"reduction": "add"})
    flat = _flat_index(ctx, picked, shape[:count])
    if ctx.shape(flat) != index_shape:
        flat = ctx.op(None, "Expand", [flat, ctx.int_constant(index_shape)])
    column = ctx.op(None, "Unsqueeze", [flat, ctx.int_constant([len(index_shape)])])
    merged = (int(np.prod(shape[:count], dtype=np.int64)), *shape[count:])
    table = ctx.op(None, "Reshape", [data, ctx.int_constant(merged)])
    scattered = ctx.op(None, "ScatterND", [table, column, values], {"reduction": "add"})
    return ctx.op(node, "Reshape", [scattered, ctx.int_constant(shape)])


@converts("scatter.value", "scatter.src")
def _scatter(ctx, node, args, kwargs):
    """``input.scatter(dim, index, value_or_src)`` (a cross-entropy's backward writes its
    -1s at the targets this way) as ONNX's ScatterElements, which overwrites as torch
    does; a scalar value is broadcast to the index's shape first (a constant)."""
    data, dim, index, source = args[:4]
    if kwargs.get("reduce") is not None:
        return None
    if isinstance(source, int | float | bool):  # scatter.value
        array = np.full(ctx.shape(index), source, dtype=ctx.dtype(data))
        source = ctx.constant(array)
    return ctx.op(node, "ScatterElements", [data, index, source],
                  {"axis": dim % len(ctx.shape(data))})


@converts("constant_pad_nd.default")
def _constant_pad(ctx, node, args, kwargs):
    """``F.pad(x, pad, value=v)``: torch lists (before, after) pairs from the last axis
    back. Built as Poplar's ``popops::pad`` builds it, a Concat of ``x`` with constant
    blocks of ``v`` along each padded axis (so the result is laid out where ``x`` lies)."""
    data, pad = args[0], list(args[1])
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    shape = list(ctx.shape(data))
    rank = len(shape)
    if len(pad) % 2 or len(pad) > 2 * rank or min(pad, default=0) < 0:
        return None  # cropping (a negative pad) is no pad
    widths = {rank - 1 - pair: (pad[2 * pair], pad[2 * pair + 1])
              for pair in range(len(pad) // 2)}  # axis -> (before, after)
    padded = [axis for axis in sorted(widths) if widths[axis] != (0, 0)]
    result = data
    for count, axis in enumerate(padded):
        before, after = widths[axis]
        parts = []
        for width in (before, after):
            block = np.full([*shape[:axis], width, *shape[axis + 1:]], value,
                            dtype=ctx.dtype(data))
            parts.append(ctx.constant(block) if width else None)
        pieces = [p for p in (parts[0], result, parts[1]) if p is not None]
        result = ctx.op(node if count == len(padded) - 1 else None, "Concat", pieces,
                        {"axis": axis})
        shape[axis] += before + after
    if not padded:
        return ctx.op(node, "Identity", [data])
    return result


@converts("gather.default")
def _gather(ctx, node, args, kwargs):
    return ctx.op(node, "GatherElements", [args[0], args[2]],
                  {"axis": args[1] % len(ctx.shape(args[0]))})


@converts("sum.dim_IntList", "mean.dim", "amax.default", "amin.default")
def _reduce(ctx, node, args, kwargs):
    name = {"sum": "ReduceSum", "mean": "ReduceMean", "amax": "ReduceMax",
            "amin": "ReduceMin"}[str(node.target).split(".")[1]]
    rank = len(ctx.shape(args[0]))
    dims = args[1] if len(args) > 1 and args[1] is not None else list(range(rank))
    dims = sorted({d % rank for d in ([dims] if isinstance(dims, int) else dims)})
    keepdims = int(bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False)))
    return ctx.op(node, name, [_promoted(ctx, node, args[0]), ctx.int_constant(dims)],
                  {"keepdims": keepdims})


@converts("sum.default")
def _reduce_all(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    return ctx.op(node, "ReduceSum", [_promoted(ctx, node, args[0]),
                                      ctx.int_constant(list(range(rank)))], {"keepdims": 0})


def _promoted(ctx, node, value):
    """``value`` cast to the dtype torch reduces it in (a sum of bools counts in int64;
    ONNX reduces in the input's own dtype)."""
    dtype = ctx.out_dtype(node)
    if ctx.dtype(value) == dtype:
        return value
    return ctx.op(None, "Cast", [value], {"to": ctx.onnx_dtype(dtype)})


# -- static values ----------------------------------------------------------------------
@converts("arange.start_step", "arange.default", "arange.start", "full.default",
          "scalar_tensor.default", "zeros.default", "ones.default")
def _static(ctx, node, args, kwargs):
    """Values fixed at trace time: evaluated now, kept as a Const tensor."""
    return ctx.static_value(node)


@converts("zeros_like.default", "ones_like.default", "full_like.default")
def _filled_like(ctx, node, args, kwargs):
    """A tensor filled with one value: shapes are static, so it is a constant here."""
    kind = str(node.target).split(".")[1]
    fill = {"zeros_like": 0, "ones_like": 1}.get(kind)
    if fill is None:
        fill = args[1]
    array = np.full(ctx.out_shape(node), fill, dtype=ctx.out_dtype(node))
    return ctx.graph.add_constant(ctx.graph.unique_id(node.name), array)


@converts("empty.memory_format", "empty_like.default", "empty_permuted.default",
          "empty_strided.default", "new_empty.default", "new_empty_strided.default")
def _empty(ctx, node, args, kwargs):
    """Uninitialised memory, as a Const of zeros.

    Its contents are unspecified, so any fill is a valid value for it, but running the op
    (``torch.empty``) would put whatever bytes the allocator returned into the IR: the
    import, and every fold of those bytes, would differ from one run to the next (dropout's
    ``bernoulli(expand(empty([])), p)`` in a training step). Zeros make it a function of
    the model alone.
    """
    array = np.zeros(ctx.out_shape(node), dtype=ctx.out_dtype(node))
    return ctx.graph.add_constant(ctx.graph.unique_id(node.name), array)


@converts("_assert_tensor_metadata.default", "_assert_scalar.default",
          "sym_constrain_range_for_size.default")
def _assertion(ctx, node, args, kwargs):
    return None  # a trace-time check with no value; nothing to plan
