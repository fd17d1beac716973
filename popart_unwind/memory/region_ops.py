"""Helpers of :mod:`popart_unwind.memory.region` that work on per-dimension tuples.

A *dims* tuple holds one canonical DisjointSetts per dimension (see
:mod:`popart_unwind.memory.sett_bounded`); these helpers stay free of the Region classes so
that the reshape and the set operations can be shared by Region and DisjointRegions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import index

import numpy as np

from popart_unwind.errors import RegionError
from popart_unwind.memory import sett_bounded as sb
from popart_unwind.memory.region_reshape import Dims
from popart_unwind.memory.sett import DisjointSetts, Sett
from popart_unwind.validation import Shape, as_shape


def as_ints(values: Iterable[int], what: str) -> tuple[int, ...]:
    try:
        return tuple(index(n) for n in values)
    except TypeError:
        raise RegionError(f"{what} {values!r} must be a sequence of integers") from None


def check_shape(shape: Iterable[int], what: str = "shape") -> Shape:
    """A tuple of ints >= 0, or RegionError naming the shape."""
    return as_shape(shape, what, RegionError)


def coerce_dim(entry: object, shape: Shape) -> DisjointSetts:
    """Accept a DisjointSetts, a Sett or a sequence of stripes for one dimension."""
    if isinstance(entry, DisjointSetts):
        return entry
    if isinstance(entry, Sett):
        return DisjointSetts([entry])
    if isinstance(entry, Iterable) and not isinstance(entry, (str, bytes)):
        return DisjointSetts([Sett(entry)])
    raise RegionError(f"Region of shape {shape}: cannot use {entry!r} as a dimension's set")


def check_axis(axis: int, shape: Shape, what: str) -> int:
    rank = len(shape)
    try:
        axis = index(axis)
    except TypeError:
        raise RegionError(f"{what}: dimension {axis!r} is not an integer") from None
    if not -rank <= axis < rank:
        raise RegionError(f"{what}: dimension {axis} out of range for shape {shape}")
    return axis % rank


def check_axes(axes: Iterable[int], shape: Shape, what: str) -> list[int]:
    """Distinct dims of ``shape`` (negative ones counted from the end)."""
    out = [check_axis(a, shape, what) for a in axes]
    if len(set(out)) != len(out):
        raise RegionError(f"{what}: repeated dimension in {out} for shape {shape}")
    return out


def check_same_shape(a: Shape, b: Shape, what: str) -> None:
    if a != b:
        raise RegionError(f"{what}: shapes {a} and {b} differ")


def check_perm(perm: Sequence[int], shape: Shape) -> tuple[int, ...]:
    try:
        p = tuple(index(i) for i in perm)
    except TypeError:
        raise RegionError(f"dim_shuffle: {perm!r} is not a permutation for {shape}") from None
    if sorted(p) != list(range(len(shape))):
        raise RegionError(f"dim_shuffle: {p} is not a permutation of the dims of shape {shape}")
    return p


def check_broadcast(src: Shape, dst: Iterable[int], reduce: bool) -> Shape:
    """Validate ``expand`` (src broadcasts to dst) or ``reduce`` (dst is src summed)."""
    op = "reduce" if reduce else "expand"
    dst = check_shape(dst, f"{op} target shape")
    if len(dst) != len(src):
        raise RegionError(f"{op}: shape {dst} has a different rank from {src}")
    for a, b in zip(src, dst, strict=True):
        small = b if reduce else a
        if a != b and small != 1:
            verb = "reduce" if reduce else "broadcast"
            raise RegionError(f"{op}: cannot {verb} shape {src} to {dst}")
    return dst


def intersect_dims(shape: Shape, a: Dims, b: Dims) -> Dims | None:
    """Intersection of two nonempty products, or None when empty."""
    out = tuple(sb.intersect(x, y, n) for x, y, n in zip(a, b, shape, strict=True))
    return None if any(d == sb.EMPTY for d in out) else out


def subtract_dims(shape: Shape, a: Dims, b: Dims) -> list[Dims]:
    """``a \\ b`` for nonempty products, as disjoint products.

    Piece d agrees with b on dims before d, leaves b on dim d, and is free after d.
    """
    inter = intersect_dims(shape, a, b)
    if inter is None:
        return [a]
    pieces = []
    for d, n in enumerate(shape):
        rest = sb.subtract(a[d], b[d], n)
        if rest != sb.EMPTY:
            pieces.append((*inter[:d], rest, *a[d + 1 :]))
    return pieces


def dims_mask(shape: Shape, dims: Dims, empty: bool) -> np.ndarray:
    """Dense boolean view of one product."""
    if not shape:
        return np.array(not empty)
    out = np.zeros(shape, dtype=bool)
    if not empty:
        out[np.ix_(*(sb.ons(d, n) for d, n in zip(dims, shape, strict=True)))] = True
    return out


def set_hash(shape: Shape, total: int, projections: Iterable[np.ndarray]) -> int:
    """Hash from invariants of the element set: its size and per-dimension projections."""
    return hash((shape, total, tuple(p.tobytes() for p in projections)))


def dim_repr(ds: DisjointSetts, size: int) -> str:
    """Short display of one dimension: ``:`` (full), ``a:b`` (interval) or the setts."""
    if ds == sb.FULL:
        return ":"
    if ds == sb.EMPTY:
        return "{}"
    idx = sb.ons(ds, size)
    if idx.size and idx[-1] - idx[0] + 1 == idx.size:
        return f"{int(idx[0])}:{int(idx[-1]) + 1}"
    if len(ds) == 1:
        return repr(ds.setts[0])
    return repr(ds)
