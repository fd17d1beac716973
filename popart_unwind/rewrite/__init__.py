"""Changing the IR: the rewriter, and canonicalization built on it.

The :class:`Rewriter` is the one way transforms, patterns and folds change the IR, and it
records each change. Canonicalization (after MLIR's canonicalizer) is patterns registered
with op types, fold hooks, global rules and a greedy worklist driver that runs them to a
fixpoint. See docs/canonicalizer.md and docs/transforms.md.

This package knows ops only through the registry it is handed, never by importing
``popart_unwind.ops``.
"""

from popart_unwind.rewrite.constant_pool import is_constant
from popart_unwind.rewrite.driver import CanonicalizeStats, canonicalize
from popart_unwind.rewrite.pattern import FunctionPattern, Pattern, pattern
from popart_unwind.rewrite.rewriter import OpRegistryLike, Rewriter

__all__ = ["CanonicalizeStats", "FunctionPattern", "OpRegistryLike", "Pattern", "Rewriter",
           "canonicalize", "is_constant", "pattern"]
