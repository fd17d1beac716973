"""Op family: PopART's float8 casts, ai.graphcore Pow2ScaleThenCast and CastThenPow2Scale,
with PopART's meaning.

Both read a data tensor and a log2 scale ``s``, an integer scalar (PopART's definition
names int8; PopXL passes int32, so any integer type of one element is taken).
Pow2ScaleThenCast gives ``float8(x * 2**s)`` from float16 or float32 ``x``, its ``to``
attribute ("FLOAT8_143" or "FLOAT8_152") naming the float8 type; CastThenPow2Scale gives
``float16(x) * 2**s`` from float8 ``x`` (PopART's ONNX creator reads its ``to`` attribute
and always makes float16, as here). The result has the data's shape.

The IR's float8 types are PopART's (``popart_unwind.ir.dtypes.POPART_FLOAT8``), with
``ml_dtypes``' values: the folds compute the product exactly and round once, to nearest with
ties to even. Approximate where PopART leaves it to Poplar: a value beyond the float8 type's
range becomes NaN, as PopART's host conversion gives it by default (``nan_on_overflow``);
what the device gives there is not restated. A constant scale outside [-32, 32) is not
folded: PopART's program stops there at run time (``throwIfLog2ScaleTensorNotInRange``).

Layouts: both are elementwise in their data (the log2 scale is a scalar operand, read
whole), so the elementwise family's rule lays them out; PopART's Opxs for them keep the
default creator type (a dead end), so its creator search stops there. No gradient rule:
PopART's ops throw for training (float8 is for inference there).
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import FLOAT8_DTYPES, POPART_FLOAT8, numpy_dtype
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ops.common import input_shape
from popart_unwind.ops.elementwise import ElementwiseRule
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register

#: Elementwise in input 0 only; PopART's creator search stops at the op (the default
#: ``Opx::getInputCreatorType``, a dead end, which neither Opx overrides).
FLOAT8_CAST = ElementwiseRule(data_inputs=(0,), popart_unwinds=False)
#: The log2 scales PopART's programs accept (outside, they stop at run time).
SCALE_RANGE = range(-32, 32)


def _check_scale(op: Op) -> None:
    scale = op.input(1) if op.has_input(1) else None
    if scale is None or not np.issubdtype(numpy_dtype(scale.dtype), np.integer) or \
            int(np.prod(input_shape(op, 1))) != 1:
        got = "none" if scale is None else f"{input_shape(op, 1)} ({scale.dtype})"
        raise ShapeError(f"op {op.debug_name()}: input 1, the log2 scale, must be an integer "
                         f"scalar, got {got}")


def _float8_target(op: Op) -> str:
    to = op.attributes.get("to")
    to = to.decode() if isinstance(to, bytes) else to
    if to not in POPART_FLOAT8:
        raise ShapeError(f"op {op.debug_name()}: 'to' is {to!r}, expected one of "
                         f"{sorted(POPART_FLOAT8)}")
    return POPART_FLOAT8[to]


def _infer_pow2_scale_then_cast(op: Op) -> InferredOutputs:
    if op.input(0).dtype not in ("float16", "float32"):
        raise ShapeError(f"op {op.debug_name()}: casts float16 or float32 data to float8, "
                         f"got {op.input(0).dtype}")
    _check_scale(op)
    return [(_float8_target(op), input_shape(op, 0))]


def _infer_cast_then_pow2_scale(op: Op) -> InferredOutputs:
    if op.input(0).dtype not in FLOAT8_DTYPES:
        raise ShapeError(f"op {op.debug_name()}: casts from a float8 type "
                         f"({', '.join(sorted(POPART_FLOAT8))}), got {op.input(0).dtype}")
    _check_scale(op)
    return [("float16", input_shape(op, 0))]


def _scale(constants: Constants) -> int | None:
    """The constant log2 scale, if it is one PopART's program accepts."""
    if constants[0] is None or constants[1] is None:
        return None
    scale = int(np.asarray(constants[1]).reshape(-1)[0])
    return scale if scale in SCALE_RANGE else None


def _fold_pow2_scale_then_cast(op: Op, constants: Constants) -> FoldResult:
    scale = _scale(constants)
    if scale is None:
        return None
    exact = np.asarray(constants[0]).astype(np.float64) * 2.0 ** scale  # exact in float64
    return [exact.astype(numpy_dtype(_float8_target(op)))]  # beyond range: NaN


def _fold_cast_then_pow2_scale(op: Op, constants: Constants) -> FoldResult:
    scale = _scale(constants)
    if scale is None:
        return None
    exact = np.asarray(constants[0]).astype(np.float64) * 2.0 ** scale
    with np.errstate(over="ignore"):  # beyond float16's range: infinity
        return [exact.astype(np.float16)]


register(OpDef("Pow2ScaleThenCast", domain=GRAPHCORE_DOMAIN,
               infer=_infer_pow2_scale_then_cast, fold=_fold_pow2_scale_then_cast,
               layout=FLOAT8_CAST))
register(OpDef("CastThenPow2Scale", domain=GRAPHCORE_DOMAIN,
               infer=_infer_cast_then_pow2_scale, fold=_fold_cast_then_pow2_scale,
               layout=FLOAT8_CAST))
