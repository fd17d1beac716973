"""ATen converters for arithmetic: matmuls, elementwise maps, norms and softmaxes, and
reductions, written as the ONNX ops PopART would see (``addmm`` as MatMul + Add, PopART's
Gemm decomposition).
"""

from __future__ import annotations

import numpy as np

from popart_unwind.frontends.aten_table import Converter, converts
from popart_unwind.frontends.torch_values import scalar_constant


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


# -- norms and softmaxes -------------------------------------------------------------------
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



# -- reductions -----------------------------------------------------------------------------
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


