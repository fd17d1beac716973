"""Canonicalize: the canonicalizer (patterns, folds, dead code; after MLIR's canonicalize
pass) as one transform."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, TypeVar

from popart_unwind.rewrite import canonicalize

from .base import ALL_CONDITIONS, Transform
from .conditions import Condition
from .registry import register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph
    from popart_unwind.rewrite import Rewriter

T = TypeVar("T")


@register
@dataclasses.dataclass(frozen=True)
class Canonicalize(Transform):
    """Rewrites every graph of the IR to its canonical form (a fixpoint, or the caps).

    Options left at ``None`` come from the session (``canonicalize_max_iterations``,
    ``canonicalize_max_rewrites``, ``canonicalize_test_convergence``).

    Assumes SHAPES_KNOWN: the ops it creates get their shapes from their inputs'. Preserves
    every condition: created ops inherit the placement and scope of the op they replace
    (so VGRAPH/PSTAGE/EPHASE/BPHASE stay true, and a region that sat on one IPU stays on
    it, keeping NO_IMPLICIT_COPY); patterns create only ordinary ONNX ops (no in-place
    ops, no IpuCopy); folded values become Const tensors, which have shapes; and removing
    ops cannot break any condition.
    """

    id = 2
    name = "Canonicalize"
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = ALL_CONDITIONS

    max_iterations: int | None = None
    max_rewrites: int | None = None
    test_convergence: bool | None = None

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        options = graph.ir.options
        stats = canonicalize(
            graph.ir, self.op_registry,
            max_iterations=_pick(self.max_iterations, options.canonicalize_max_iterations),
            max_rewrites=_pick(self.max_rewrites, options.canonicalize_max_rewrites),
            test_convergence=_pick(self.test_convergence,
                                   options.canonicalize_test_convergence),
            rewriter=rewriter)
        return stats.changed


def _pick(option: T | None, session_default: T) -> T:
    return session_default if option is None else option
