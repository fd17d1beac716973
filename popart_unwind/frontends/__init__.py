"""Front ends: ways to get a model's graph into popart-unwind (ONNX files, PyTorch modules).

Each front end imports its third-party dependency lazily, so that importing ``popart_unwind``
never pulls in torch or onnx; the ``torch`` extra installs what the PyTorch front end needs.
"""
