"""Canonicalization of Chains (after poprithms' chain notes), so that equivalent chains
become op-wise identical.

Rewrites, applied left to right until none applies:

1. an op that does nothing is removed (and a Reverse forgets axes of size 1; a DimShuffle
   that only moves size-1 axes is a Reshape);
2. neighbours of one type merge (DimShuffle p0 then p1 is q with q[i] = p0[p1[i]]; Reverses
   by symmetric difference; Reshape, Expand and Reduce keep the last shape; SettSamples and
   SettFillIntos compose their regions, which are always one product region here);
3. pairs that undo each other cancel, and pairs with one canonical form take it (a fill and
   a sample in either order; an expand then a sample of some broadcast copies; an expand
   then a reverse, which forgets the axes the expand broadcast; a sample then a fill of
   the same region when everything that reaches it lies inside);
4. neighbours out of the order ``OP_ORDER`` swap, when an exact rewrite exists
   (``canonical_swaps.SWAPS``);
5. a chain through which no input element reaches the output becomes one fixed form with
   the same input and output shapes.

Every rewrite must change the chain; one that reports a rewrite without changing anything,
or rewriting that does not stop within the cap, raises CanonicalizationError (both would be
bugs in a rule).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from popart_unwind.errors import CanonicalizationError
from popart_unwind.memory.canonical_swaps import SWAPS
from popart_unwind.memory.chain_ops import (
    OP_ORDER,
    ChainOp,
    Shape,
    expanded_axes,
    make_op,
)
from popart_unwind.memory.fill_sample import EMPTY, fill_sample_ops, fill_sample_sources
from popart_unwind.memory.region import DisjointRegions, Region

RANK = {name: rank for rank, name in enumerate(OP_ORDER)}


# ----- 1. single ops -------------------------------------------------------------------------
def simplify_op(op: ChainOp) -> list[ChainOp] | None:
    """Remove or simplify one op on its own; None when it is already simplest."""
    if op.rule.is_noop(op):
        return []
    if op.type == "Reverse":
        wide = tuple(d for d in op.attr if op.in_shape[d] > 1)
        return [make_op("Reverse", op.in_shape, wide)] if wide != op.attr else None
    if op.type == "DimShuffle":
        wide = [axis for axis in op.attr if op.in_shape[axis] != 1]
        if wide == sorted(wide):
            return [make_op("Reshape", op.in_shape, op.out_shape)]
    return None


# ----- 2. merges of one type -------------------------------------------------------------------
def merge(first: ChainOp, second: ChainOp) -> ChainOp:
    """One op with the meaning of two neighbouring ops of the same type."""
    kind = first.type
    if kind == "DimShuffle":
        composed = tuple(first.attr[i] for i in second.attr)
        return make_op(kind, first.in_shape, composed)
    if kind == "Reverse":
        return make_op(kind, first.in_shape, set(first.attr) ^ set(second.attr))
    if kind == "SettSample":
        return make_op(kind, first.in_shape, second.attr.sett_fill_into(first.attr))
    if kind == "SettFillInto":
        return make_op(kind, first.in_shape, first.attr.sett_fill_into(second.attr))
    return make_op(kind, first.in_shape, second.out_shape)


# ----- 3. cancellations and pair normal forms -----------------------------------------------------
def normalise_pair(
    first: ChainOp, second: ChainOp, reaching: DisjointRegions | None
) -> list[ChainOp] | None:
    """The canonical form of an in-order pair, or None when it already has it."""
    pair = (first.type, second.type)
    if pair == ("SettFillInto", "SettSample"):
        ops = fill_sample_ops(first.in_shape, fill_sample_sources(first.attr, second.attr))
        return None if ops == [first, second] else ops
    if pair == ("Expand", "SettSample"):
        return _sample_fewer_copies(first, second)
    if pair == ("Expand", "Reverse"):
        return _reverse_of_copies(first, second)
    if pair == ("SettSample", "SettFillInto") and first.attr == second.attr:
        assert reaching is not None
        return [] if first.attr.contains(reaching) else None
    return None


def _sample_fewer_copies(expand: ChainOp, sample: ChainOp) -> list[ChainOp] | None:
    """Sampling k broadcast copies of an axis is broadcasting it to k copies."""
    counts = sample.attr.nelms()
    partial = [a for a in expanded_axes(expand) if counts[a] != expand.out_shape[a]]
    if not partial:
        return None
    target = tuple(counts[a] if a in partial else d for a, d in enumerate(expand.out_shape))
    setts = list(sample.attr.setts)
    for axis in partial:
        setts[axis] = Region.full((counts[axis],)).setts[0]
    broadcast = make_op("Expand", expand.in_shape, target)
    return [broadcast, make_op("SettSample", target, Region(target, setts))]


def _reverse_of_copies(expand: ChainOp, reverse: ChainOp) -> list[ChainOp] | None:
    """Reversing an axis an Expand broadcast reorders copies of one element: nothing."""
    copies = set(expanded_axes(expand))
    kept = tuple(d for d in reverse.attr if d not in copies)
    if kept == reverse.attr:
        return None
    return [expand, make_op("Reverse", reverse.in_shape, kept)] if kept else [expand]


def _needs_reaching(first: ChainOp, second: ChainOp) -> bool:
    return (first.type, second.type) == ("SettSample", "SettFillInto") and first.attr == second.attr


def rewrite_pair(
    first: ChainOp, second: ChainOp, reaching: DisjointRegions | None
) -> list[ChainOp] | None:
    """Merge, normalise or swap two neighbours; None when nothing applies."""
    if first.type == second.type:
        return [merge(first, second)]
    normal = normalise_pair(first, second, reaching)
    if normal is not None:
        return normal
    if RANK[second.type] < RANK[first.type]:
        return SWAPS[(first.type, second.type)](first, second)
    return None


# ----- 5. chains that reach nothing --------------------------------------------------------------
def empty_chain(in_shape: Shape, out_shape: Shape) -> list[ChainOp]:
    """The fixed form of a chain through which no input element reaches the output.

    It keeps both shapes: a Reshape to the output's rank (when the ranks differ), then a
    fill into a scaffold of input and empty slots and a sample of the empty ones.
    """
    ops: list[ChainOp] = []
    rank = max(len(out_shape), 1)
    current = tuple(in_shape)
    if len(current) != rank:
        ops.append(make_op("Reshape", current, (math.prod(current),) + (1,) * (rank - 1)))
        current = ops[-1].out_shape
    target = tuple(out_shape) if out_shape else (1,)
    ops += fill_sample_ops(current, [np.full(size, EMPTY, dtype=np.int64) for size in target])
    if not out_shape:
        ops.append(make_op("Reshape", target, ()))
    return ops


def reached(in_shape: Shape, ops: Sequence[ChainOp]) -> DisjointRegions:
    """The elements that input elements reach after ``ops``."""
    regions = DisjointRegions(in_shape, [Region.full(in_shape)])
    for op in ops:
        regions = op.rule.apply_regions(op, regions)
    return regions


# ----- the driver --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1 << 16)
def canonical_ops(in_shape: Shape, ops: tuple[ChainOp, ...]) -> tuple[ChainOp, ...]:
    """Memoised ``canonicalize``: the same chains recur across a model's repeated blocks.

    Safe because ops compare by meaning (same shapes, equivalent regions) and hash alike.
    """
    return tuple(canonicalize(in_shape, ops))


def canonicalize(
    in_shape: Shape, ops: Sequence[ChainOp], max_rewrites: int | None = None
) -> list[ChainOp]:
    """Rewrite ``ops`` to their canonical form (see the module docstring)."""
    ops = list(ops)
    limit = max_rewrites if max_rewrites is not None else 64 + 8 * (len(ops) + 2) ** 2
    rewrites = 0
    while True:
        step = _first_rewrite(in_shape, ops)
        if step is None:
            return ops
        start, stop, replacement = step
        if replacement == ops[start:stop]:
            raise CanonicalizationError(
                f"a rewrite of {ops[start:stop]} reported success but changed nothing"
            )
        ops[start:stop] = replacement
        rewrites += 1
        if rewrites > limit:
            raise CanonicalizationError(
                f"canonicalization of a chain from {tuple(in_shape)} did not reach a fixpoint "
                f"within {limit} rewrites; last form: {ops}"
            )


def _first_rewrite(in_shape: Shape, ops: list[ChainOp]) -> tuple[int, int, list[ChainOp]] | None:
    """The leftmost applicable rewrite as (start, stop, replacement)."""
    for index, op in enumerate(ops):
        simpler = simplify_op(op)
        if simpler is not None:
            return index, index + 1, simpler
    for index in range(len(ops) - 1):
        first, second = ops[index], ops[index + 1]
        reaching = reached(in_shape, ops[:index]) if _needs_reaching(first, second) else None
        replacement = rewrite_pair(first, second, reaching)
        if replacement is not None:
            return index, index + 2, replacement
    if ops and reached(in_shape, ops).total_elms() == 0:
        fixed = empty_chain(in_shape, ops[-1].out_shape)
        if fixed != ops:
            return 0, len(ops), fixed
    return None
