"""Front ends: ways to get a model's graph into popart-unwind (ONNX files, PyTorch modules,
the Builder). Importing this package hands their entry points to the IR's doors
(``Ir.from_onnx``, ``Ir.from_torch``, ``popart_unwind.ir.Builder``).

Each front end imports its third-party dependency lazily, so that importing ``popart_unwind``
never pulls in torch or onnx; the ``torch`` extra installs what the PyTorch front end needs.
"""

from popart_unwind import doors
from popart_unwind.frontends.builder import Builder
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.frontends.torch_import import import_torch

doors.provide("onnx", import_onnx)
doors.provide("torch", import_torch)
doors.provide("Builder", Builder)

__all__ = ["Builder", "import_onnx", "import_torch"]
