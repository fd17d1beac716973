"""Canonicalization patterns: local rewrites rooted at ops of given types (MLIR's RewritePattern).

A pattern is registered with the op types it roots at, through their ``OpDef``s, so each op
family states its canonicalizations beside its other rules. It must make every change
through the :class:`~popart_unwind.rewrite.rewriter.Rewriter` it is handed and return True
exactly when it changed the IR; the driver checks that claim against the rewriter's record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from popart_unwind.ir.op import Op
    from popart_unwind.rewrite.rewriter import Rewriter

RewriteFunction = Callable[["Op", "Rewriter"], bool]


class Pattern:
    """Base of canonicalization patterns; subclasses set ``name`` and ``op_types``."""

    #: Names the pattern in statistics and in the errors the driver raises about it.
    name: str = ""
    #: ONNX op names the pattern is rooted at (empty: any op it is registered with).
    op_types: tuple[str, ...] = ()

    def match_and_rewrite(self, op: Op, rewriter: Rewriter) -> bool:
        """Rewrite around ``op`` if it matches; True iff the IR changed."""
        raise NotImplementedError(f"pattern {self.name!r} does not define match_and_rewrite")

    def roots_at(self, op: Op) -> bool:
        return not self.op_types or op.type.name in self.op_types

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r} on {', '.join(self.op_types) or 'any op'})"


class FunctionPattern(Pattern):
    """A pattern written as a plain function ``(op, rewriter) -> bool``."""

    def __init__(self, name: str, op_types: tuple[str, ...], function: RewriteFunction) -> None:
        self.name = name
        self.op_types = tuple(op_types)
        self.function = function
        self.__doc__ = function.__doc__

    def match_and_rewrite(self, op: Op, rewriter: Rewriter) -> bool:
        return self.function(op, rewriter)


def pattern(*op_types: str, name: str | None = None) -> Callable[[RewriteFunction],
                                                                   FunctionPattern]:
    """Decorator turning ``def f(op, rewriter) -> bool`` into a :class:`FunctionPattern`
    named ``name`` (default: the function's name, with hyphens)."""

    def wrap(function: RewriteFunction) -> FunctionPattern:
        label = name or function.__name__.strip("_").replace("_", "-")
        return FunctionPattern(label, op_types, function)

    return wrap
