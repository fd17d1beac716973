"""Where the IR core meets its front ends without depending on them.

``Ir.from_onnx``, ``Ir.from_torch`` and ``popart_unwind.ir.Builder`` are doors: the front ends
(``popart_unwind.frontends``, which sit above the op definitions they build with) hand their
entry points in here when ``popart_unwind`` is imported, so the IR core never imports a layer
above it.
"""

from __future__ import annotations

from typing import Any

from popart_unwind.errors import IrError

_ENTRY_POINTS: dict[str, Any] = {}


def provide(name: str, entry: Any) -> None:
    """Hand in a front end's entry point (``"onnx"``, ``"torch"`` or ``"Builder"``)."""
    _ENTRY_POINTS[name] = entry


def entry_point(name: str) -> Any:
    """The entry point handed in as ``name``."""
    try:
        return _ENTRY_POINTS[name]
    except KeyError:
        raise IrError(f"no front end provides {name!r}: import popart_unwind (the package) "
                      f"to load the front ends") from None
