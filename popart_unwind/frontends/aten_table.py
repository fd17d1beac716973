"""The one table of ATen converters: each converter module (``aten_views``, ``aten_math``,
``aten_conv``, ``aten_values``) enters its functions here by ATen op name with
``@converts``, and ``aten_ops`` loads them all. A converter takes the import's context, the
graph node, its positional and keyword arguments, and returns the IR value(s) of the node,
or ``NotImplemented`` to leave the op opaque.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popart_unwind.frontends.torch_values import TorchContext

Converter = Callable[[TorchContext, Any, tuple, dict], Any]
CONVERTERS: dict[str, Converter] = {}


def converts(*names: str) -> Callable[[Converter], Converter]:
    """Enter the decorated converter in ``CONVERTERS`` under each ATen op name."""
    def register(function: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = function
        return function
    return register


def ints(values: Any) -> list[int]:
    """An ATen argument's integers as Python ints."""
    return [int(v) for v in values]


def argument(args: tuple, kwargs: dict, position: int, name: str, default: Any) -> Any:
    """An ATen argument given by position or by keyword; ``default`` when absent or None."""
    value = args[position] if len(args) > position else kwargs.get(name)
    return default if value is None else value

