"""Conversions between popart_unwind.memory values and the plain values of the C++ core.

Regions cross as (shape, per dimension a list of [first, last) runs, empty flag); chains as
an input shape and (op type, input shape, attribute) triples; the core returns ops as
(op type, input shape, output shape, attribute). Both sides are turned into one comparable
form: per-dimension on indices for regions, tuples for shapes and axes.
"""

from __future__ import annotations

import numpy as np
from popart_unwind._hooks import unwind_core as core

from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.memory.chain_ops import ChainOp
from popart_unwind.memory.random_chains import random_region

REGION_OPS = ("SettSample", "SettFillInto")


def runs(ons: list[int]) -> list[tuple[int, int]]:
    """Sorted indices as half-open runs of consecutive indices."""
    out: list[tuple[int, int]] = []
    for i in ons:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def region_value(region: Region) -> tuple:
    """A Python region as the core's plain region value."""
    return (region.shape, [runs(o) for o in region.get_ons()], region.is_empty())


def to_core(region: Region) -> core.Region:
    return core.Region(*region_value(region))


def to_core_all(regions: DisjointRegions) -> core.Regions:
    return core.Regions(regions.shape, [to_core(r) for r in regions.regions])


def ons_of(dims_runs: list) -> list[list[int]]:
    return [[i for lo, hi in d for i in range(lo, hi)] for d in dims_runs]


def python_value(regions: DisjointRegions | Region) -> tuple:
    """Comparable form of Python regions: shape and each non-empty piece, in order."""
    members = [regions] if isinstance(regions, Region) else list(regions.regions)
    return (regions.shape,
            [(r.shape, r.get_ons(), r.is_empty()) for r in members if not r.is_empty()])


def core_value(value: tuple) -> tuple:
    """Comparable form of the core's Regions.value()."""
    shape, members = value
    return (tuple(shape), [(tuple(s), ons_of(d), e) for s, d, e in members])


def chain_to_core(chain: Chain) -> core.Chain:
    """The same chain in the C++ core."""
    ops = []
    for op in chain.ops:
        attr = region_value(op.attr) if op.type in REGION_OPS else tuple(op.attr)
        ops.append((op.type, op.in_shape, attr))
    return core.Chain(chain.in_shape, ops)


def python_ops_value(ops: tuple[ChainOp, ...] | list[ChainOp]) -> list[tuple]:
    """Comparable form of Python ops: type, shapes and attribute (regions by on indices)."""
    out = []
    for op in ops:
        if op.type in REGION_OPS:
            attr: object = (op.attr.shape, op.attr.get_ons(), op.attr.is_empty())
        else:
            attr = tuple(op.attr)
        out.append((op.type, op.in_shape, op.out_shape, attr))
    return out


def core_ops_value(ops: list[tuple]) -> list[tuple]:
    """Comparable form of the core's Chain.ops()."""
    out = []
    for name, in_shape, out_shape, attr in ops:
        if name in REGION_OPS:
            shape, dims, empty = attr
            attr = (tuple(shape), ons_of(dims), empty)
        else:
            attr = tuple(attr)
        out.append((name, tuple(in_shape), tuple(out_shape), attr))
    return out


def disjoint(rng: np.random.Generator, shape: tuple[int, ...]) -> DisjointRegions:
    """A union of a few random disjoint regions (made disjoint by subtraction)."""
    acc = DisjointRegions(shape)
    for _ in range(int(rng.integers(1, 4))):
        piece = random_region(rng, shape)
        acc = DisjointRegions(shape, [*acc.regions, piece.subtract(acc)])
    return acc
