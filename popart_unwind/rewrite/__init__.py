"""Canonicalization (seed 003): patterns registered with op types, fold hooks, global rules
and a greedy worklist driver that runs them to a fixpoint. See docs/canonicalizer.md.

This package knows ops only through the registry it is handed, never by importing
``popart_unwind.ops``.
"""

from popart_unwind.rewrite.driver import CanonicalizeStats, canonicalize
from popart_unwind.rewrite.pattern import FunctionPattern, Pattern, pattern
from popart_unwind.rewrite.rewriter import OpRegistryLike, Rewriter, is_constant

__all__ = ["CanonicalizeStats", "FunctionPattern", "OpRegistryLike", "Pattern", "Rewriter",
           "canonicalize", "is_constant", "pattern"]
