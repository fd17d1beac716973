"""Session options: which transforms run, and how layouts are unwound.

Modelled on PopART's ``SessionOptions`` (one flat object of settings handed to the session,
each with a default); docs/transforms.md says field by field which PopART setting each one
corresponds to and which are ours alone.
"""

from __future__ import annotations

import dataclasses

#: The transform pipeline, in order (each transform is applied once).
DEFAULT_PIPELINE: tuple[str, ...] = ("InferShapes", "Canonicalize", "Prune", "MergeDuplicateOps")


@dataclasses.dataclass(frozen=True)
class UnwindValuations:
    """Values of the ValuedPairs the planner builds (the v's of poprithms' unwinding notes),
    per kind of agreement.

    Defaults rank what costs most on the IPU when missed: a matmul operand in the wrong
    layout is rearranged by exchange before every use; elementwise partners disagreeing
    cost one copy; a bias off its channel's tiles costs a broadcast exchange.
    """

    matmul: float = 10.0
    elementwise: float = 1.0
    bias: float = 2.0
    call_copy: float = 1.0
    sliceable: float = 4.0


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """Settings of one planning session (PopART: ``popart.SessionOptions``)."""

    #: Transforms to run, in order, each once (PopART fixes the order in ``Ir::prepare``
    #: and switches transforms on with flags; here the order itself is the setting).
    #: ``UnwindLayouts`` is appended when ``enable_unwind_layouts`` is set.
    pipeline: tuple[str, ...] = DEFAULT_PIPELINE
    #: Run the layout planner (a flag in the manner of PopART's ``enableOutlining``).
    enable_unwind_layouts: bool = True
    #: The unwind solver: ``greedy0``, ``deferral``, ``restarts``, ``hybrid`` (default) or
    #: ``exact``.
    unwind_algorithm: str = "hybrid"
    unwind_valuations: UnwindValuations = UnwindValuations()
    #: Spread small layouts over lightly used tiles when the plan is realized (ours alone;
    #: docs/planner.md, "Tile memory"): a broadcast operand (a bias, a norm's scale) takes,
    #: among the tiles that save it equal exchange, the one holding the fewest bytes of the
    #: tensors realized before it. It never changes what the unwinding problem's solution
    #: scores; off, plans are as without it. Off by default: on the tiny benchmark models
    #: it lowers every busiest tile's peak at +0.003 % exchanged bytes at most, but the
    #: busiest tile's received bytes move too (ResNet's training step: +1.9 % exchange
    #: cycles), above the 1 % of exchange the option may trade.
    balance_tile_memory: bool = False
    #: Canonicalizer caps (MLIR's: iterations and rewrites), and whether reaching the
    #: iteration cap without a fixpoint is an error.
    canonicalize_max_iterations: int = 10
    canonicalize_max_rewrites: int = 100_000
    canonicalize_test_convergence: bool = False
    #: Check each transform's declared assumptions, guarantees and preserved conditions
    #: around it (a debugging aid, like PopART's ``opxAliasChecking``/``opxModifyChecking``).
    check_transform_conditions: bool = False

    def __post_init__(self) -> None:
        # Accept any sequence of names (a list from a config file, say) but keep the
        # options hashable and immutable; a bare string is left for the registry to refuse.
        if not isinstance(self.pipeline, str | tuple):
            object.__setattr__(self, "pipeline", tuple(self.pipeline))
