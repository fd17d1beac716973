"""Doors: where a lower layer reaches what a layer above provides, without importing it.

The IR core offers ``Ir.from_onnx``, ``Ir.from_torch`` and ``popart_unwind.ir.Builder``, and
builds subgraph ops as the classes their op family defines; the front ends and the op
families sit above it. They hand their entry points and op classes in when they are
imported. The package root hands in how to import them (``provide_loader``), so they load on
first use: importing one layer never loads the layers above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popart_unwind.errors import IrError

_ENTRY_POINTS: dict[str, Any] = {}
_loader: Callable[[], None] | None = None
_loaded = False


def provide(name: str, entry: Any) -> None:
    """Hand in a front end's entry point (``"onnx"``, ``"torch"`` or ``"Builder"``)."""
    _ENTRY_POINTS[name] = entry


def provide_loader(load: Callable[[], None]) -> None:
    """Say how to import the layers above (the package root does, once)."""
    global _loader
    _loader = load


def load_above() -> None:
    """Import the layers above (front ends and op families) unless that has happened."""
    global _loaded
    if not _loaded and _loader is not None:
        _loaded = True  # first: the import itself may come back through a door
        _loader()


def entry_point(name: str) -> Any:
    """The entry point handed in as ``name``, loading the front ends if need be."""
    if name not in _ENTRY_POINTS:
        load_above()
    try:
        return _ENTRY_POINTS[name]
    except KeyError:
        raise IrError(f"no front end provides {name!r} (known: "
                      f"{sorted(_ENTRY_POINTS)})") from None
