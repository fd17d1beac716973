"""Element types of IR tensors, named as numpy names them, with ONNX's numbering."""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import IrError

#: ONNX ``TensorProto.DataType`` numbers of the dtypes the IR knows.
ONNX_DTYPES: dict[str, int] = {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13, "bfloat16": 16,
}
DTYPE_OF_ONNX: dict[int, str] = {number: name for name, number in ONNX_DTYPES.items()}

#: How PopART's ONNX import treats the ONNX element types the IR does not model (its
#: ``onnxutil::getDataType``): string and complex tensors it takes as types of its own; the
#: float8 types it refuses, though its IR has two (FLOAT8_143 and FLOAT8_152), which no ONNX
#: element type maps to; everything else it refuses.
_POPART_TAKES = {8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128"}
_FLOAT8 = frozenset({17, 18, 19, 20})


def popart_element_type_note(number: int) -> str:
    """Whether PopART's ONNX import takes the ONNX element type ``number``, which the IR
    does not model: a clause for the importer's refusal."""
    if number in _POPART_TAKES:
        return f"PopART's ONNX import takes it as its {_POPART_TAKES[number]} type"
    if number in _FLOAT8:
        return ("PopART's ONNX import refuses it too (no ONNX element type maps to PopART's "
                "float8 types FLOAT8_143 and FLOAT8_152)")
    return "PopART's ONNX import refuses it too"


def check_dtype(dtype: str, tensor_id: str) -> str:
    if dtype not in ONNX_DTYPES:
        raise IrError(f"tensor {tensor_id!r}: unknown dtype {dtype!r}; "
                      f"expected one of {sorted(ONNX_DTYPES)}")
    return dtype


def dtype_of_array(array: np.ndarray, tensor_id: str) -> str:
    """The IR dtype of a numpy array (bfloat16 arrays are not representable in numpy)."""
    return check_dtype(str(array.dtype), tensor_id)


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype holding values of ``dtype`` (bfloat16 widened to float32)."""
    return np.dtype("float32" if dtype == "bfloat16" else dtype)
