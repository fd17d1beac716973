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
