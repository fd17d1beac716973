"""Op family: constants — ops whose value is known without running the model.

Our IR keeps constants as Const tensors, not ops (as PopART does), so each op here folds:
``Constant`` to its attribute value, ``ConstantOfShape`` and ``Range`` once their inputs are
constant, ``Shape``, ``Size`` and ``EyeLike`` as soon as the input's shape is known (shapes
are static).
"""

from __future__ import annotations

from math import prod

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX, ONNX_DTYPES, dtype_of_array, numpy_dtype
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, constant_input, input_shape
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register

#: Constant's value attributes and how each becomes an array.
_VALUE_ATTRIBUTES = {
    "value": lambda v: np.asarray(v),
    "value_float": lambda v: np.asarray(v, np.float32).reshape(()),
    "value_floats": lambda v: np.asarray(v, np.float32).reshape(-1),
    "value_int": lambda v: np.asarray(v, np.int64).reshape(()),
    "value_ints": lambda v: np.asarray(v, np.int64).reshape(-1),
}


def _typed(op: Op, array: np.ndarray) -> tuple[str, tuple[int, ...]]:
    if str(array.dtype) not in ONNX_DTYPES:
        raise ShapeError(f"op {op.debug_name()}: values of dtype {array.dtype} are not "
                         f"supported")
    return dtype_of_array(array, op.debug_name()), tuple(array.shape)


# -- Constant ---------------------------------------------------------------------------------
def _held_value(op: Op) -> np.ndarray:
    """The value a Constant op holds, from whichever value attribute it has."""
    given = [key for key in op.attributes if key.startswith(("value", "sparse_value"))]
    if len(given) != 1:
        raise ShapeError(f"op {op.debug_name()} needs exactly one value attribute, has "
                         f"{given or 'none'}")
    if given[0] not in _VALUE_ATTRIBUTES:
        raise ShapeError(f"op {op.debug_name()}: attribute {given[0]!r} is not supported")
    return _VALUE_ATTRIBUTES[given[0]](op.attributes[given[0]])


def _infer_constant(op: Op) -> InferredOutputs:
    return [_typed(op, _held_value(op))]


def _fold_constant(op: Op, constants: Constants) -> FoldResult:
    return [_held_value(op).copy()]


# -- ConstantOfShape --------------------------------------------------------------------------
def _fill(op: Op) -> np.ndarray:
    value = op.attributes.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        raise ShapeError(f"op {op.debug_name()}: 'value' must hold one element, has "
                         f"{value.size}")
    return value.reshape(-1)


def _target_shape(op: Op) -> tuple[int, ...]:
    dims = tuple(int(d) for d in np.asarray(constant_input(op, 0, "the shape")).reshape(-1))
    if any(d < 0 for d in dims):
        raise ShapeError(f"op {op.debug_name()}: negative dim in shape {dims}")
    return dims


def _infer_constant_of_shape(op: Op) -> InferredOutputs:
    return [(_typed(op, _fill(op))[0], _target_shape(op))]


def _fold_constant_of_shape(op: Op, constants: Constants) -> FoldResult:
    if not constants or constants[0] is None:
        return None
    fill = _fill(op)
    # a read-only broadcast of the one value: a fill's elements are never made (the light
    # model zoo's VGG-19 makes its 143 M weights so: 575 MB as arrays); a reader that
    # needs them whole copies them
    return [np.broadcast_to(np.asarray(fill[0], dtype=fill.dtype), _target_shape(op))]


# -- Shape, Size ------------------------------------------------------------------------------
def _shape_window(op: Op, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Shape-15's start/end window, clamped as Python slices clamp."""
    if op.type.version < 15:
        return shape
    start = int(op.attributes.get("start", 0))
    end = op.attributes.get("end")
    return shape[start:None if end is None else int(end)]


def _infer_shape(op: Op) -> InferredOutputs:
    return [("int64", (len(_shape_window(op, input_shape(op, 0))),))]


def _fold_shape(op: Op, constants: Constants) -> FoldResult:
    shape = op.input(0).shape
    return None if shape is None else [np.array(_shape_window(op, shape), np.int64)]


def _infer_size(op: Op) -> InferredOutputs:
    input_shape(op, 0)
    return [("int64", ())]


def _fold_size(op: Op, constants: Constants) -> FoldResult:
    shape = op.input(0).shape
    return None if shape is None else [np.array(prod(shape), np.int64)]


# -- EyeLike ----------------------------------------------------------------------------------
def _eye_shape(op: Op) -> tuple[int, int]:
    shape = input_shape(op, 0)
    if len(shape) != 2:
        raise ShapeError(f"op {op.debug_name()} reads a 2-D tensor, got shape {shape}")
    return shape[0], shape[1]


def _eye_dtype(op: Op) -> str:
    """The ``dtype`` attribute's type, else the input's (ONNX's EyeLike)."""
    if "dtype" not in op.attributes:
        return op.input(0).dtype
    code = int(op.attributes["dtype"])
    if code not in DTYPE_OF_ONNX:
        raise ShapeError(f"op {op.debug_name()}: 'dtype' is {code}, not an ONNX dtype number")
    return DTYPE_OF_ONNX[code]


def _infer_eye_like(op: Op) -> InferredOutputs:
    return [(_eye_dtype(op), _eye_shape(op))]


def _fold_eye_like(op: Op, constants: Constants) -> FoldResult:
    """Ones on diagonal ``k``: known once the input's shape is (its values are not read)."""
    if op.input(0).shape is None or prod(op.input(0).shape) > FOLD_MAX_ELEMENTS:
        return None
    dtype = _eye_dtype(op)
    if dtype == "bfloat16":
        return None
    rows, columns = _eye_shape(op)
    return [np.eye(rows, columns, k=int(op.attributes.get("k", 0)), dtype=numpy_dtype(dtype))]


# -- Range ------------------------------------------------------------------------------------
def _range_operands(op: Op) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start, limit, delta = (constant_input(op, i, what)
                           for i, what in enumerate(("start", "limit", "delta")))
    for what, value in (("start", start), ("limit", limit), ("delta", delta)):
        if value.size != 1:
            raise ShapeError(f"op {op.debug_name()}: {what} must be a scalar, has shape "
                             f"{value.shape}")
    if delta.reshape(-1)[0] == 0:
        raise ShapeError(f"op {op.debug_name()}: delta is 0")
    return start.reshape(()), limit.reshape(()), delta.reshape(())


#: Float ranges up to this many elements take their length from numpy.arange itself.
EXACT_RANGE_ELEMENTS = 1 << 24


def range_length(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    """ONNX Range: max(ceil((limit - start) / delta), 0), exactly for integers and, for
    floats, as numpy.arange counts (ONNX's reference evaluator and onnxruntime agree with
    it). No one formula in float32 or double gives numpy's count in every case (from 1/3 to
    9 by 1/3 is 26 elements, from 2 down to -1.19e-7 by 1 is 2, from 0 to 1.4e-45 by 2 is
    1), so a range of a plausible size is counted by numpy.arange; a larger one, which the
    size checks then judge, by the quotient in double."""
    if start.dtype.kind in "iu":
        first, last, step = int(start), int(limit), int(delta)
        return max(-((first - last) // step), 0)
    with np.errstate(all="ignore"):
        count = np.ceil(np.float64(limit - start) / np.float64(delta))
    if not np.isfinite(count):
        raise ShapeError(f"a range from {start} to {limit} by {delta} has no finite length")
    if count <= EXACT_RANGE_ELEMENTS:
        return int(np.arange(start, limit, delta).size)
    return max(int(count), 0)


def _infer_range(op: Op) -> InferredOutputs:
    start, limit, delta = _range_operands(op)
    try:
        return [(op.input(0).dtype, (range_length(start, limit, delta),))]
    except ShapeError as error:
        raise ShapeError(f"op {op.debug_name()}: {error}") from None


def _fold_range(op: Op, constants: Constants) -> FoldResult:
    if len(constants) < 3 or any(c is None for c in constants[:3]):
        return None
    start, limit, delta = _range_operands(op)
    count = range_length(start, limit, delta)
    with np.errstate(all="ignore"):
        return [(start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)]


register(OpDef("Constant", infer=_infer_constant, fold=_fold_constant))
register(OpDef("ConstantOfShape", infer=_infer_constant_of_shape, fold=_fold_constant_of_shape))
register(OpDef("Shape", infer=_infer_shape, fold=_fold_shape))
register(OpDef("Size", infer=_infer_size, fold=_fold_size))
register(OpDef("Range", infer=_infer_range, fold=_fold_range))
register(OpDef("EyeLike", infer=_infer_eye_like, fold=_fold_eye_like))
