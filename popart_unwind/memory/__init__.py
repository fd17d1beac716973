"""Element regions and chains of view ops (after poprithms' memory/chain).

Layering: ``sett`` (1-D periodic sets) <- ``region`` (products of them, and unions) <-
``chain_ops`` / ``chain`` (view ops applied to arrays and regions) <- ``canonical``
(meaning-preserving canonical forms of chains). Nothing here knows about graphs.
"""

from popart_unwind.memory.chain import Chain
from popart_unwind.memory.chain_ops import OP_ORDER, ChainOp
from popart_unwind.memory.region import DisjointRegions, Region
from popart_unwind.memory.sett import DisjointSetts, Sett, Stripe

__all__ = [
    "OP_ORDER",
    "Chain",
    "ChainOp",
    "DisjointRegions",
    "DisjointSetts",
    "Region",
    "Sett",
    "Stripe",
]
