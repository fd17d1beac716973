"""popart-unwind: a layout planner for tile-based accelerators.

It decides which tile holds each element of every producer-less tensor of a model (weights,
inputs, constants, subgraph boundaries) by *unwinding* preferred layouts backwards through
view-changing ops, and writes the result as Poplar-format tile mappings.

Importing the package loads the op definitions and the front ends, which register
themselves with the IR core (the classes of ops that run subgraphs, ``Ir.from_onnx``,
``Ir.from_torch``, ``popart_unwind.ir.Builder``).
"""

from popart_unwind import frontends  # noqa: F401  (registers the front ends and ops)
from popart_unwind.version import __version__

__all__ = ["__version__"]
