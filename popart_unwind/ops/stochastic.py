"""Op family: ops that draw random numbers (Dropout, RandomUniform, RandomNormal,
RandomUniformLike, RandomNormalLike), with ONNX semantics.

Two such ops give different values from the same inputs, so their OpDefs say ``random``
and they are never merged; outside training Dropout is the identity and folds away. Its
gradient in training reads the mask output (``_dropout_gradient``).
RandomUniformLike and RandomNormalLike read only their input's type and shape;
RandomUniform and RandomNormal take no input, their shape and type being attributes.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError, TransformError
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX, ONNX_DTYPES
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import (
    FOLD_MAX_ELEMENTS,
    computed_value,
    constant_value,
    input_shape,
)
from popart_unwind.ops.gradient import GradientBuilder, gets_gradient, one, scalar
from popart_unwind.ops.layout_rule import LayoutRule
from popart_unwind.ops.registry import OpDef, register


def _infer_dropout(op: Op) -> list:
    shape = input_shape(op, 0)
    mask_dtype = "bool" if op.type.version >= 10 else op.input(0).dtype
    return [(op.input(0).dtype, shape), (mask_dtype, shape)]


def _fold_dropout(op: Op, constants) -> list | None:
    """Outside training (opset >= 12, training_mode absent or a constant false) Dropout is
    the identity and its mask all true."""
    if op.type.version < 12:
        return None
    if op.has_input(2):
        training = constant_value(op.input(2))
        if training is None or bool(np.asarray(training).reshape(-1)[0]):
            return None
    replacements: list = [op.input(0)]
    if op.has_output(1):
        shape = op.input(0).shape
        if shape is None or math.prod(shape) > FOLD_MAX_ELEMENTS:
            return None
        replacements.append(np.ones(shape, dtype=bool))
    return replacements


def _dropout_ratio(op: Op) -> float:
    """The drop probability: input 1 from opset 12 (0.5 when absent), an attribute before."""
    if op.type.version < 12:
        return float(op.attributes.get("ratio", 0.5))
    if not op.has_input(1):
        return 0.5
    value = computed_value(op.input(1))
    if value is None:
        raise TransformError(f"Dropout {op.debug_name()}: its ratio {op.input(1).id!r} is "
                             f"not known before running; its gradient needs it")
    return float(np.asarray(value).reshape(-1)[0])


def _dropout_trains(op: Op) -> bool:
    """Whether the op drops: from opset 12 as its training_mode input says (false when
    absent); before, unless ``is_test`` says it is a test (PopART drops in a training
    session)."""
    if op.type.version < 12:
        return not (op.type.version < 7 and op.attributes.get("is_test", 0))
    if not op.has_input(2):
        return False
    value = computed_value(op.input(2))
    if value is None:
        raise TransformError(f"Dropout {op.debug_name()}: its training_mode "
                             f"{op.input(2).id!r} is not known before running; its gradient "
                             f"needs it")
    return bool(np.asarray(value).reshape(-1)[0])


def _dropout_gradient(builder: GradientBuilder, op: Op, grads) -> list:
    """The identity where the op drops nothing; when it drops, dY · mask / (1 - ratio)
    (PopART's DropoutGradOp), the mask read from the op's mask output. PopART's grad op
    draws the mask again from the forward's seed, which ONNX ops cannot say: a dropping
    Dropout without a mask output is refused (TransformError naming it)."""
    grad, x = grads[0], op.input(0)
    rest = [None] * max(op.input_map())
    if grad is None or not gets_gradient(x):
        return [None, *rest]
    ratio = _dropout_ratio(op) if _dropout_trains(op) else 0.0
    if ratio == 0.0:
        return [grad, *rest]
    if not op.has_output(1):
        raise TransformError(f"Dropout {op.debug_name()} drops (ratio {ratio}) and has no "
                             f"mask output, which its gradient reads: keep the mask output")
    mask = one(builder, "Cast", [op.output(1)], {"to": ONNX_DTYPES[grad.dtype]})
    scaled = one(builder, "Mul", [grad, scalar(builder, 1.0 / (1.0 - ratio), grad)])
    return [one(builder, "Mul", [scaled, mask]), *rest]


register(OpDef("Dropout", infer=_infer_dropout, fold=_fold_dropout, random=True,
               gradient=_dropout_gradient))


def _infer_random_like(op: Op) -> list:
    """The input's shape; the ``dtype`` attribute's type, else the input's."""
    shape = input_shape(op, 0)
    code = op.attributes.get("dtype")
    if code is None:
        return [(op.input(0).dtype, shape)]
    if code not in DTYPE_OF_ONNX:
        raise ShapeError(f"op {op.debug_name()}: 'dtype' is {code!r}, expected an ONNX dtype "
                         f"number among {sorted(DTYPE_OF_ONNX)}")
    return [(DTYPE_OF_ONNX[code], shape)]


def _infer_random(op: Op) -> list:
    """The ``shape`` attribute; the ``dtype`` attribute's type (float32 by default)."""
    shape = op.attributes.get("shape")
    if shape is None or any(int(n) < 0 for n in shape):
        raise ShapeError(f"op {op.debug_name()} needs a 'shape' of non-negative sizes, got "
                         f"{shape!r}")
    code = op.attributes.get("dtype", 1)
    if DTYPE_OF_ONNX.get(code) not in ("float16", "bfloat16", "float32", "float64"):
        raise ShapeError(f"op {op.debug_name()}: 'dtype' is {code!r}, expected an ONNX float "
                         f"type number")
    return [(DTYPE_OF_ONNX[code], tuple(int(n) for n in shape))]


class RandomLikeRule(LayoutRule):
    """RandomUniformLike, RandomNormalLike: no input value is read, so nothing is
    exchanged and the input gets no pair; the result is mapped linearly, as PopART does
    (its pattern turns the op into RandomUniform / RandomNormal, whose Opx draws into a
    linearly mapped reference tensor: ``willow/src/popx/op/randomuniformx.cpp``). That is
    the base rule's behaviour, stated here as this op's own."""

    kind = "random"


RANDOM_LIKE = RandomLikeRule()

for _name in ("RandomUniformLike", "RandomNormalLike"):
    register(OpDef(_name, infer=_infer_random_like, random=True, layout=RANDOM_LIKE))
# RandomUniform and RandomNormal read no tensor: the same rule (PopART's Opx draws into a
# linearly mapped tensor) holds for them.
for _name in ("RandomUniform", "RandomNormal"):
    register(OpDef(_name, infer=_infer_random, random=True, layout=RANDOM_LIKE))
