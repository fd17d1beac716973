"""Op family: ops that draw random numbers (Dropout, RandomUniform, RandomNormal,
RandomUniformLike, RandomNormalLike), with ONNX semantics.

Two such ops give different values from the same inputs, so their OpDefs say ``random``
and they are never merged; outside training Dropout is the identity and folds away.
RandomUniformLike and RandomNormalLike read only their input's type and shape;
RandomUniform and RandomNormal take no input, their shape and type being attributes.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, constant_value, input_shape
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


register(OpDef("Dropout", infer=_infer_dropout, fold=_fold_dropout, random=True))


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
