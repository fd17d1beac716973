"""Op family: PopART's ai.graphcore losses L1 and Nll (its Builder's ``l1loss`` and
``nllloss``), with PopART's meaning. (IdentityLoss is ``graphcore.py``'s.)

L1 is ``lambda`` times |x|, summed (``reduction`` "Sum"), averaged over every element
("Mean") or kept per element ("None"). Nll reads probabilities ``[..., C]`` (the classes the
last axis) and integer labels of the leading shape: the loss of an element is
``-log(p[label] + 1e-7)`` (PopART's NllOpx adds the 1e-7; ``-p[label]`` when
``inputIsLogProbability`` is set), 0 where the label is
``ignoreIndex``; "Mean" divides the sum by the number of labels not ignored (PopART's
NllOpx scales so), "Sum" does not, "None" keeps one loss per label.

Both are rewritten before planning into the ONNX ops that compute them (Abs, Mul and a
reduction; GatherElements, Log, Neg, Where and reductions), each with its layout rule, so
neither is a barrier to the planner although the registry's entry has no rule of its own.
Both have gradient rules, as PopART's L1GradOp and NllGradOp compute them: L1's
``lambda · sign(x) · dY`` (over the element count for "Mean"), Nll's ``-dL / (p + 1e-7)``
at each label's class (``-dL`` for log-probabilities), 0 elsewhere and at ignored labels.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import ONNX_DTYPES, numpy_dtype
from popart_unwind.ir.op import DEFAULT_ONNX_OPSET, GRAPHCORE_DOMAIN, ONNX_DOMAIN, Op, OpType
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import input_shape, small_constants
from popart_unwind.ops.gradient import GradientBuilder, gets_gradient, int64s, one, scalar
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register
from popart_unwind.rewrite import Rewriter, pattern


def _reduction(op: Op) -> str:
    reduction = op.attributes.get("reduction", "Mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("Sum", "Mean", "None"):
        raise ShapeError(f"op {op.debug_name()}: reduction {reduction!r} is not Sum, Mean or "
                         f"None")
    return reduction


def _onnx(rewriter: Rewriter, like: Op, name: str, inputs: list, **attributes) -> Tensor:
    return rewriter.create_op(like.graph, OpType(ONNX_DOMAIN, name, DEFAULT_ONNX_OPSET),
                              inputs, attributes, like=like).output(0)


def _all_axes(rewriter: Rewriter, op: Op, rank: int) -> Tensor:
    return rewriter.constant(op.graph, np.arange(rank, dtype=np.int64))


# -- L1 ---------------------------------------------------------------------------------------
def _lambda(op: Op) -> float:
    if "lambda" not in op.attributes:
        raise ShapeError(f"op {op.debug_name()} needs a 'lambda' attribute")
    return float(op.attributes["lambda"])


def _infer_l1(op: Op) -> InferredOutputs:
    shape = input_shape(op, 0)
    _lambda(op)
    return [(op.input(0).dtype, shape if _reduction(op) == "None" else ())]


def _fold_l1(op: Op, constants: Constants) -> FoldResult:
    x = constants[0]
    if not small_constants(x):
        return None
    losses = _lambda(op) * np.abs(x.astype(np.float64))
    reduction = _reduction(op)
    value = (losses if reduction == "None" else losses.sum() if reduction == "Sum"
             else losses.mean())
    return [np.asarray(value).astype(x.dtype)]


@pattern("L1", name="expand-l1-loss")
def _expand_l1(op: Op, rewriter: Rewriter) -> bool:
    x = op.input(0)
    if x.shape is None:
        return False
    scale = rewriter.constant(op.graph, np.asarray(_lambda(op), numpy_dtype(x.dtype)))
    loss = _onnx(rewriter, op, "Mul", [_onnx(rewriter, op, "Abs", [x]), scale])
    reduction = _reduction(op)
    if reduction != "None":
        kind = "ReduceSum" if reduction == "Sum" else "ReduceMean"
        loss = _onnx(rewriter, op, kind, [loss, _all_axes(rewriter, op, len(x.shape))],
                     keepdims=0)
    rewriter.replace_op(op, [loss])
    return True


def _l1_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """lambda · sign(x) · dY, dY broadcast from the scalar loss; over the element count for
    "Mean" (PopART's L1GradOp)."""
    grad, x = grads[0], op.input(0)
    if grad is None or not gets_gradient(x):
        return [None]
    factor = _lambda(op)
    if _reduction(op) == "Mean":
        factor /= max(math.prod(x.shape), 1)
    local = one(builder, "Mul", [one(builder, "Sign", [x]), scalar(builder, factor, x)])
    return [one(builder, "Mul", [local, grad])]


# -- Nll --------------------------------------------------------------------------------------
#: What PopART's NllOpx adds to a probability before its log, so that no log is of 0.
_EPSILON = 1e-7


def _ignored(op: Op) -> int | None:
    ignored = op.attributes.get("ignoreIndex")
    return None if ignored is None else int(ignored)


def _log_input(op: Op) -> bool:
    return bool(op.attributes.get("inputIsLogProbability", 0))


def _infer_nll(op: Op) -> InferredOutputs:
    probs, label = input_shape(op, 0), input_shape(op, 1)
    if len(probs) < 1 or label != probs[:-1] or op.input(1).dtype not in (
            "int32", "uint32", "int64"):
        raise ShapeError(f"op {op.debug_name()}: probabilities {probs} ([..., classes]) and "
                         f"integer labels {label} ({op.input(1).dtype}) of the leading shape "
                         f"do not match")
    return [(op.input(0).dtype, label if _reduction(op) == "None" else ())]


def _fold_nll(op: Op, constants: Constants) -> FoldResult:
    probs, label = constants[0], constants[1]
    if not small_constants(probs, label):
        return None
    ignored = _ignored(op)
    kept = np.ones(label.shape, bool) if ignored is None else label != ignored
    safe = np.where(kept, label, 0).astype(np.int64)
    if np.any((safe < 0) | (safe >= probs.shape[-1])):
        return None  # a label outside the classes: PopART's result is not stated
    picked = np.take_along_axis(probs.astype(np.float64), safe[..., None], axis=-1)[..., 0]
    with np.errstate(divide="ignore"):
        losses = np.where(kept, -(picked if _log_input(op) else np.log(picked + _EPSILON)),
                          0.0)
    reduction = _reduction(op)
    if reduction == "None":
        value = losses
    elif reduction == "Sum":
        value = losses.sum()
    else:
        value = losses.sum() / max(int(kept.sum()), 1)
    return [np.asarray(value).astype(probs.dtype)]


@pattern("Nll", name="expand-nll")
def _expand_nll(op: Op, rewriter: Rewriter) -> bool:
    probs, label = op.input(0), op.input(1)
    if probs.shape is None or label.shape is None:
        return False
    graph, dtype = op.graph, numpy_dtype(probs.dtype)
    ignored = _ignored(op)
    safe, hit = label, None
    if ignored is not None:
        label_dtype = numpy_dtype(label.dtype)
        hit = _onnx(rewriter, op, "Equal", [label, rewriter.constant(
            graph, np.asarray(ignored, label_dtype))])
        safe = _onnx(rewriter, op, "Where", [hit, rewriter.constant(
            graph, np.asarray(0, label_dtype)), label])
    if safe.dtype != "int64":
        safe = _onnx(rewriter, op, "Cast", [safe], to=7)
    last = rewriter.constant(graph, np.asarray([-1], np.int64))
    picked = _onnx(rewriter, op, "Squeeze", [_onnx(
        rewriter, op, "GatherElements", [probs, _onnx(rewriter, op, "Unsqueeze", [safe, last])],
        axis=-1), last])
    if not _log_input(op):
        picked = _onnx(rewriter, op, "Log", [_onnx(rewriter, op, "Add", [
            picked, rewriter.constant(graph, np.asarray(_EPSILON, dtype))])])
    loss = _onnx(rewriter, op, "Neg", [picked])
    if hit is not None:
        loss = _onnx(rewriter, op, "Where", [hit, rewriter.constant(
            graph, np.asarray(0, dtype)), loss])
    reduction = _reduction(op)
    if reduction != "None":
        axes = _all_axes(rewriter, op, len(label.shape))
        loss = _onnx(rewriter, op, "ReduceSum", [loss, axes], keepdims=0)
        if reduction == "Mean":
            if hit is None:
                count = rewriter.constant(graph, np.asarray(max(math.prod(label.shape), 1),
                                                            dtype))
            else:
                kept = _onnx(rewriter, op, "Cast", [_onnx(rewriter, op, "Not", [hit])],
                             to=ONNX_DTYPES[probs.dtype])
                count = _onnx(rewriter, op, "Max", [_onnx(
                    rewriter, op, "ReduceSum", [kept, axes], keepdims=0),
                    rewriter.constant(graph, np.asarray(1, dtype))])
            loss = _onnx(rewriter, op, "Div", [loss, count])
    rewriter.replace_op(op, [loss])
    return True


register(OpDef("L1", domain=GRAPHCORE_DOMAIN, infer=_infer_l1, fold=_fold_l1,
               patterns=(_expand_l1,), reduces_input=True, gradient=_l1_gradient))
def _nll_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """At each label's class ``-dL / p`` (``-dL`` for log-probabilities), 0 at the other
    classes and at ignored labels; ``dL`` is dY per label ("None"), dY ("Sum") or dY over the
    labels not ignored ("Mean") — what PopART's NllGradOp computes."""
    grad, probs, label = grads[0], op.input(0), op.input(1)
    if grad is None or not gets_gradient(probs):
        return [None, None]
    classes = probs.shape[-1]
    last = int64s(builder, [-1])
    ignored = _ignored(op)
    safe, kept = label, None
    if ignored is not None:
        hit = one(builder, "Equal", [label, builder.constant(
            np.asarray(ignored, numpy_dtype(label.dtype)), label.dtype)])
        safe = one(builder, "Where", [hit, builder.constant(
            np.asarray(0, numpy_dtype(label.dtype)), label.dtype), label])
        kept = one(builder, "Cast", [one(builder, "Not", [hit])],
                   {"to": ONNX_DTYPES[probs.dtype]})
    if safe.dtype != "int64":
        safe = one(builder, "Cast", [safe], {"to": ONNX_DTYPES["int64"]})
    picked = one(builder, "Cast", [one(builder, "Equal", [
        one(builder, "Unsqueeze", [safe, last]),
        builder.constant(np.arange(classes, dtype=np.int64), "int64")])],
        {"to": ONNX_DTYPES[probs.dtype]})
    per_label = grad
    if _reduction(op) == "Mean":
        count = (scalar(builder, max(math.prod(label.shape), 1), probs) if kept is None
                 else one(builder, "Max", [one(builder, "ReduceSum", [
                     kept, int64s(builder, range(len(label.shape)))], {"keepdims": 0}),
                     scalar(builder, 1.0, probs)]))
        per_label = one(builder, "Div", [per_label, count])
    if kept is not None:
        per_label = one(builder, "Mul", [kept, per_label])
    elif _reduction(op) != "None":
        per_label = one(builder, "Expand", [per_label, int64s(builder, label.shape)])
    spread = one(builder, "Mul", [picked, one(builder, "Unsqueeze", [per_label, last])])
    if _log_input(op):
        return [one(builder, "Neg", [spread]), None]
    shifted = one(builder, "Add", [probs, scalar(builder, _EPSILON, probs)])
    return [one(builder, "Neg", [one(builder, "Div", [spread, shifted])]), None]


register(OpDef("Nll", domain=GRAPHCORE_DOMAIN, infer=_infer_nll, fold=_fold_nll,
               patterns=(_expand_nll,), reduces_input=True, gradient=_nll_gradient))
