"""popart-unwind: a layout planner for tile-based accelerators.

It decides which tile holds each element of every producer-less tensor of a model (weights,
inputs, constants, subgraph boundaries) by *unwinding* preferred layouts backwards through
view-changing ops, and writes the result as Poplar-format tile mappings.

The front ends and the op definitions load on first use (``Ir.from_onnx``, ``Ir.from_torch``,
``popart_unwind.ir.Builder``, building an op): the package root tells the IR core's doors
how (``popart_unwind.doors``), so importing one layer never loads the layers above it.
"""

from popart_unwind import doors as _doors
from popart_unwind.version import __version__


def _load_front_ends() -> None:
    """Import the op families and the front ends, which register themselves."""
    from popart_unwind import frontends, ops  # noqa: F401


_doors.provide_loader(_load_front_ends)

__all__ = ["__version__"]
