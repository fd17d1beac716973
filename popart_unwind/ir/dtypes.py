"""Element types of IR tensors, named as numpy names them, with ONNX's numbering."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from popart_unwind.errors import IrError

#: ONNX ``TensorProto.DataType`` numbers of the dtypes the IR knows.
ONNX_DTYPES: dict[str, int] = {
    "float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7,
    "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13, "bfloat16": 16,
    "float8_e4m3fnuz": 18, "float8_e5m2fnuz": 20,
}
DTYPE_OF_ONNX: dict[int, str] = {number: name for name, number in ONNX_DTYPES.items()}

#: PopART's two float8 types (``DataType::FLOAT8_143``, ``FLOAT8_152``) as the IR names
#: them. Their encodings are those of ONNX's FLOAT8E4M3FNUZ and FLOAT8E5M2FNUZ: exponent
#: biases 8 and 16, subnormals, largest values 240 and 57344, smallest 2^-10 and 2^-17, as
#: PopXL's documentation lists them; no infinities, and 0x80 the one NaN code, as the paper
#: both follow defines them (PopART's sources do not spell the NaN out). So the IR gives them
#: ONNX's numbers and ``ml_dtypes``' value types (docs/popart-operators.md, "Element types").
POPART_FLOAT8: dict[str, str] = {"FLOAT8_143": "float8_e4m3fnuz",
                                 "FLOAT8_152": "float8_e5m2fnuz"}
FLOAT8_DTYPES = frozenset(POPART_FLOAT8.values())
_ML_DTYPES = {name: np.dtype(getattr(ml_dtypes, name)) for name in FLOAT8_DTYPES}

#: How PopART's ONNX import treats the ONNX element types the IR does not model (its
#: ``onnxutil::getDataType``): string and complex tensors it takes as types of its own;
#: everything else it refuses, ONNX's four float8 types among them (it predates them). Two
#: of these the IR models all the same, as PopART's own float8 types (above); ONNX's
#: FLOAT8E4M3FN (17) and FLOAT8E5M2 (19) encode values otherwise, so no PopART type holds
#: them and they stay refused.
_POPART_TAKES = {8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128"}
_OTHER_FLOAT8 = {
    17: "its FLOAT8_143 has exponent bias 8, not 7, a single NaN code and no negative zero",
    19: "its FLOAT8_152 has exponent bias 16, not 15, no infinities and a single NaN code",
}


def popart_element_type_note(number: int) -> str:
    """Whether PopART's ONNX import takes the ONNX element type ``number``, which the IR
    does not model: a clause for the importer's refusal."""
    if number in _POPART_TAKES:
        return f"PopART's ONNX import takes it as its {_POPART_TAKES[number]} type"
    if number in _OTHER_FLOAT8:
        return ("PopART's ONNX import refuses it too, and no PopART type holds its values "
                f"({_OTHER_FLOAT8[number]})")
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
    """The numpy dtype holding values of ``dtype`` (bfloat16 widened to float32; the float8
    types as ``ml_dtypes`` defines them)."""
    if dtype in _ML_DTYPES:
        return _ML_DTYPES[dtype]
    return np.dtype("float32" if dtype == "bfloat16" else dtype)
