"""Exact regions of tensors: products of 1-D sets (Region) and disjoint unions of them.

A :class:`Region` of shape ``(n0, n1, ...)`` is the outer product of one 1-D set per
dimension, each a :class:`DisjointSetts` restricted to ``[0, n)``. A dimension holds a
*union* of Setts rather than a single Sett so that every operation that maps products to
products (intersection, sampling, filling, reversing, shuffling, broadcasting, reducing) stays
closed over Region: one Sett cannot express e.g. the intersection of two different strides,
a union of a few Setts can. Operations that do not preserve products (subtract, complement,
reshape) return a :class:`DisjointRegions`, a union of pairwise-disjoint Regions of one shape.

Every dimension is stored in canonical form (the compressed form of its on indices, see
:mod:`popart_unwind.memory.sett_bounded`). A dimension keeps its own set even when another
dimension is empty, because per-dimension counts are the shape of a sample, as in numpy
(``a[1:1, 0:4]`` has shape ``(0, 4)``). ``==`` and ``hash`` mean "same shape and same element
set", also across Region and DisjointRegions, so all empty regions of one shape are equal even
when their ``nelms()`` differ. Rank-0 regions (scalars) are full or empty. All operations are
exact; ``mask()`` is the brute-force view used to test them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import index

import numpy as np

from popart_unwind.errors import RegionError
from popart_unwind.memory import region_ops as ops
from popart_unwind.memory import sett_bounded as sb
from popart_unwind.memory.region_reshape import Dims, reshape_dims
from popart_unwind.memory.sett import DisjointSetts, Sett, StripeLike
from popart_unwind.validation import Shape

__all__ = ["DisjointRegions", "Region"]

DimLike = DisjointSetts | Sett | Sequence[StripeLike]


class _Shaped:
    """A set of a tensor's elements knows the tensor's shape."""

    __slots__ = ()
    _shape: tuple[int, ...]
    _hash: int | None

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def rank(self) -> int:
        return len(self._shape)

    # Equality is of element sets, whichever class holds them: one definition, so that a
    # Region and the DisjointRegions equal to it hash alike.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (Region, DisjointRegions)):
            return NotImplemented
        return self._shape == other.shape and self.equivalent(other)

    def __hash__(self) -> int:
        if self._hash is None:
            h = ops.set_hash(self._shape, self.total_elms(), self._projections())
            object.__setattr__(self, "_hash", h)
        return self._hash

    # Regions and their disjoint unions check the arguments of re-indexing ops alike.
    def _check_sample_region(self, where: object) -> None:
        if not isinstance(where, Region):
            raise RegionError(f"sett_sample: expected a Region, got {where!r}")
        ops.check_same_shape(self._shape, where.shape, "sett_sample")

    def _check_scaffold(self, scaffold: object) -> None:
        if not isinstance(scaffold, Region):
            raise RegionError(f"sett_fill_into: expected a Region, got {scaffold!r}")
        if self._shape != scaffold.nelms():
            raise RegionError(
                f"sett_fill_into: shape {self._shape} differs from the on counts "
                f"{scaffold.nelms()} of the scaffold of shape {scaffold.shape}"
            )

    def _reshape_target(self, shape: Iterable[int]) -> Shape:
        """``shape`` checked as a reshape of this set's shape (the same element count)."""
        shape = ops.check_shape(shape, "reshape target shape")
        if math.prod(shape) != math.prod(self._shape):
            raise RegionError(f"reshape: cannot reshape {self._shape} to {shape}")
        return shape


class Region(_Shaped):
    """Outer product of one 1-D set per dimension. Immutable and hashable."""

    __slots__ = ("_dims", "_empty", "_hash", "_shape")

    def __init__(self, shape: Iterable[int], setts: Sequence[DimLike]) -> None:
        shape = ops.check_shape(shape)
        setts = list(setts)
        if len(setts) != len(shape):
            raise RegionError(
                f"Region: {len(setts)} setts given for shape {shape} of rank {len(shape)}"
            )
        dims = tuple(
            sb.canonical(ops.coerce_dim(s, shape), n) for s, n in zip(setts, shape, strict=True)
        )
        self._init(shape, dims, False)

    def _init(self, shape: tuple[int, ...], dims: Dims, empty: bool) -> None:
        dims = tuple(sb.EMPTY if n == 0 else d for d, n in zip(dims, shape, strict=True))
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_dims", dims)
        object.__setattr__(self, "_empty", empty or any(d == sb.EMPTY for d in dims))
        object.__setattr__(self, "_hash", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Region is immutable")

    @classmethod
    def _make(cls, shape: tuple[int, ...], dims: Dims, empty: bool = False) -> Region:
        """Build from dims already in canonical form (no validation)."""
        r = cls.__new__(cls)
        r._init(shape, dims, empty)
        return r

    # --- constructors -------------------------------------------------------------------
    @classmethod
    def full(cls, shape: Iterable[int]) -> Region:
        return _full_region(ops.check_shape(shape))

    @classmethod
    def empty(cls, shape: Iterable[int]) -> Region:
        shape = ops.check_shape(shape)
        return cls._make(shape, (sb.EMPTY,) * len(shape), True)

    @classmethod
    def from_bounds(
        cls, shape: Iterable[int], lower: Sequence[int], upper: Sequence[int]
    ) -> Region:
        """The box ``lower <= index < upper``."""
        shape = ops.check_shape(shape)
        lo, hi = ops.as_ints(lower, "lower bounds"), ops.as_ints(upper, "upper bounds")
        if len(lo) != len(shape) or len(hi) != len(shape):
            raise RegionError(f"from_bounds: bounds {lo}, {hi} do not match the rank of {shape}")
        if any(not 0 <= a <= b <= n for a, b, n in zip(lo, hi, shape, strict=True)):
            raise RegionError(f"from_bounds: bounds {lo}, {hi} out of range for shape {shape}")
        return cls._make(
            shape, tuple(sb.interval(a, b, n) for a, b, n in zip(lo, hi, shape, strict=True))
        )

    @classmethod
    def from_stride(cls, shape: Iterable[int], stride: int, dim: int) -> Region:
        """Indices along ``dim`` that are multiples of ``stride``; all of the other dims."""
        shape = ops.check_shape(shape)
        dim = ops.check_axis(dim, shape, "from_stride")
        if index(stride) < 1:
            raise RegionError(f"from_stride: stride {stride} must be >= 1 (shape {shape})")
        dims = [sb.FULL] * len(shape)
        dims[dim] = sb.strided(index(stride), shape[dim])
        return cls._make(shape, tuple(dims))

    # --- queries ------------------------------------------------------------------------
    @property
    def setts(self) -> tuple[DisjointSetts, ...]:
        return self._dims

    def nelms(self) -> tuple[int, ...]:
        """Number of on indices per dimension (the shape of a sample through this region)."""
        return tuple(sb.count(d, n) for d, n in zip(self._dims, self._shape, strict=True))

    def total_elms(self) -> int:
        return 0 if self._empty else math.prod(self.nelms())

    def get_ons(self) -> list[list[int]]:
        return [sb.ons(d, n).tolist() for d, n in zip(self._dims, self._shape, strict=True)]

    def ons_arrays(self) -> list[np.ndarray]:
        """``get_ons`` as read-only int64 arrays, without a Python list per axis."""
        return [sb.ons(d, n) for d, n in zip(self._dims, self._shape, strict=True)]

    def is_empty(self) -> bool:
        return self._empty

    def is_full(self) -> bool:
        return not self._empty and all(d == sb.FULL for d in self._dims)

    def mask(self) -> np.ndarray:
        """Dense boolean array of ``shape`` (brute-force view)."""
        return ops.dims_mask(self._shape, self._dims, self._empty)

    # --- set operations -----------------------------------------------------------------
    def _others(self, other: Region | DisjointRegions, what: str) -> list[Region]:
        if not isinstance(other, (Region, DisjointRegions)):
            raise RegionError(f"{what}: expected a Region or DisjointRegions, got {other!r}")
        ops.check_same_shape(self._shape, other.shape, what)
        return [other] if isinstance(other, Region) else list(other.regions)

    def intersect(self, other: Region | DisjointRegions) -> DisjointRegions:
        pieces = []
        for b in self._others(other, "intersect"):
            if not (self._empty or b._empty):
                pieces.append(ops.intersect_dims(self._shape, self._dims, b._dims))
        return DisjointRegions._from_dims(self._shape, [p for p in pieces if p is not None])

    def subtract(self, other: Region | DisjointRegions) -> DisjointRegions:
        """``self \\ other``, as disjoint products."""
        pieces = [] if self._empty else [self._dims]
        for b in self._others(other, "subtract"):
            if not b._empty:
                pieces = [p for a in pieces for p in ops.subtract_dims(self._shape, a, b._dims)]
        return DisjointRegions._from_dims(self._shape, pieces)

    def complement(self) -> DisjointRegions:
        return Region.full(self._shape).subtract(self)

    def contains(self, other: Region | DisjointRegions) -> bool:
        """Whether ``other`` is a subset of ``self``."""
        for b in self._others(other, "contains"):
            if b._empty:
                continue
            if self._empty or not all(
                sb.contains(x, y, n)
                for x, y, n in zip(self._dims, b._dims, self._shape, strict=True)
            ):
                return False
        return True

    def equivalent(self, other: Region | DisjointRegions) -> bool:
        """Same element set (shapes must match)."""
        if isinstance(other, Region):
            ops.check_same_shape(self._shape, other.shape, "equivalent")
            return (self._empty and other._empty) or (
                not (self._empty or other._empty) and self._dims == other._dims
            )
        return DisjointRegions.from_region(self).equivalent(other)

    # --- re-indexing --------------------------------------------------------------------
    def sett_sample(self, where: Region) -> Region:
        """Elements in ``where``, renumbered by rank inside ``where`` (shape where.nelms())."""
        self._check_sample_region(where)
        dims = tuple(
            sb.sample(a, w, n) for a, w, n in zip(self._dims, where._dims, self._shape, strict=True)
        )
        return Region._make(where.nelms(), dims, self._empty or where._empty)

    def sett_fill_into(self, scaffold: Region) -> Region:
        """Inverse of sett_sample: place elements on the scaffold's on positions."""
        self._check_scaffold(scaffold)
        dims = tuple(
            sb.fill_into(a, s, n)
            for a, s, n in zip(self._dims, scaffold._dims, scaffold.shape, strict=True)
        )
        return Region._make(scaffold.shape, dims, self._empty or scaffold._empty)

    def reshape(self, shape: Iterable[int]) -> DisjointRegions:
        """Same row-major flat set viewed in ``shape`` (it may shatter into several regions)."""
        shape = self._reshape_target(shape)
        if self._empty:
            return DisjointRegions(shape)
        return DisjointRegions._from_dims(shape, reshape_dims(self._shape, self._dims, shape))

    def dim_shuffle(self, perm: Sequence[int]) -> Region:
        """numpy transpose: output dim i is input dim perm[i]."""
        p = ops.check_perm(perm, self._shape)
        return Region._make(
            tuple(self._shape[i] for i in p), tuple(self._dims[i] for i in p), self._empty
        )

    def reverse(self, dims: Iterable[int]) -> Region:
        """Flip along each listed dim."""
        axes = ops.check_axes(dims, self._shape, "reverse")
        new = list(self._dims)
        for a in axes:
            new[a] = sb.reverse(new[a], self._shape[a])
        return Region._make(self._shape, tuple(new), self._empty)

    def _resized_dims(self, shape: tuple[int, ...]) -> Dims:
        """Dims for expand/reduce: a resized dim is full if it had any on index, else empty."""
        return tuple(
            d if n == m else (sb.EMPTY if d == sb.EMPTY else sb.FULL)
            for d, n, m in zip(self._dims, self._shape, shape, strict=True)
        )

    def expand(self, shape: Iterable[int]) -> Region:
        """numpy broadcast of size-1 dims (an on size-1 dim becomes full)."""
        shape = ops.check_broadcast(self._shape, shape, reduce=False)
        return Region._make(shape, self._resized_dims(shape), self._empty)

    def reduce(self, shape: Iterable[int]) -> Region:
        """Image under summation over the dims reduced to size 1."""
        shape = ops.check_broadcast(self._shape, shape, reduce=True)
        return Region._make(shape, self._resized_dims(shape), self._empty)

    # --- identity -----------------------------------------------------------------------
    def _projections(self) -> list[np.ndarray]:
        return (
            []
            if self._empty
            else [sb.ons(d, n) for d, n in zip(self._dims, self._shape, strict=True)]
        )

    def __repr__(self) -> str:
        if self._empty and all(d == sb.EMPTY for d in self._dims):
            return f"Region.empty({self._shape})"
        body = ", ".join(ops.dim_repr(d, n) for d, n in zip(self._dims, self._shape, strict=True))
        return f"Region({self._shape}, [{body}])"


class DisjointRegions(_Shaped):
    """Union of pairwise-disjoint Regions of one shape; empty members are dropped.

    Disjointness is not verified by default (every operation here produces disjoint
    members); ``checked=True`` verifies it. ``==`` means same shape and same element set.
    """

    __slots__ = ("_hash", "_regions", "_shape")

    def __init__(
        self,
        shape: Iterable[int],
        regions: Iterable[Region | DisjointRegions] = (),
        *,
        checked: bool = False,
    ) -> None:
        shape = ops.check_shape(shape)
        members: list[Region] = []
        for r in regions:
            if not isinstance(r, (Region, DisjointRegions)):
                raise RegionError(f"DisjointRegions of shape {shape}: {r!r} is not a Region")
            ops.check_same_shape(shape, r.shape, "DisjointRegions")
            members.extend([r] if isinstance(r, Region) else r.regions)
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_regions", tuple(r for r in members if not r.is_empty()))
        object.__setattr__(self, "_hash", None)
        if checked:
            self._check_disjoint()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("DisjointRegions is immutable")

    @classmethod
    def _from_dims(cls, shape: tuple[int, ...], pieces: Iterable[Dims]) -> DisjointRegions:
        return cls(shape, [Region._make(shape, p) for p in pieces])

    @classmethod
    def from_region(cls, region: Region) -> DisjointRegions:
        return cls(region.shape, [region])

    def _check_disjoint(self) -> None:
        for i, a in enumerate(self._regions):
            for b in self._regions[i + 1 :]:
                if ops.intersect_dims(self._shape, a.setts, b.setts) is not None:
                    raise RegionError(f"DisjointRegions of shape {self._shape}: {a} overlaps {b}")

    @property
    def regions(self) -> tuple[Region, ...]:
        return self._regions

    def total_elms(self) -> int:
        return sum(r.total_elms() for r in self._regions)

    def is_empty(self) -> bool:
        return not self._regions

    def is_full(self) -> bool:
        return self.total_elms() == math.prod(self._shape) and not self.is_empty()

    def mask(self) -> np.ndarray:
        out = Region.empty(self._shape).mask()
        for r in self._regions:
            out = out | r.mask()
        return out

    def _check_other(self, other: object, what: str) -> None:
        if not isinstance(other, (Region, DisjointRegions)):
            raise RegionError(f"{what}: expected a Region or DisjointRegions, got {other!r}")
        ops.check_same_shape(self._shape, other.shape, what)

    def _map(
        self, fn: Callable[[Region], Region | DisjointRegions], shape: Shape
    ) -> DisjointRegions:
        """Apply an injective per-region map (disjointness is preserved)."""
        return DisjointRegions(shape, [fn(r) for r in self._regions])

    # --- set operations -----------------------------------------------------------------
    def intersect(self, other: Region | DisjointRegions) -> DisjointRegions:
        self._check_other(other, "intersect")
        return DisjointRegions(self._shape, [r.intersect(other) for r in self._regions])

    def subtract(self, other: Region | DisjointRegions) -> DisjointRegions:
        self._check_other(other, "subtract")
        return DisjointRegions(self._shape, [r.subtract(other) for r in self._regions])

    def complement(self) -> DisjointRegions:
        return Region.full(self._shape).subtract(self)

    def contains(self, other: Region | DisjointRegions) -> bool:
        """Whether ``other`` is a subset of ``self``."""
        self._check_other(other, "contains")
        return other.subtract(self).is_empty()

    def equivalent(self, other: Region | DisjointRegions) -> bool:
        """Same element set: equal sizes and one contains the other (shapes must match)."""
        self._check_other(other, "equivalent")
        return self.total_elms() == other.total_elms() and self.contains(other)

    # --- re-indexing --------------------------------------------------------------------
    def sett_sample(self, where: Region) -> DisjointRegions:
        self._check_sample_region(where)
        return self._map(lambda r: r.sett_sample(where), where.nelms())

    def sett_fill_into(self, scaffold: Region) -> DisjointRegions:
        self._check_scaffold(scaffold)
        return self._map(lambda r: r.sett_fill_into(scaffold), scaffold.shape)

    def reshape(self, shape: Iterable[int]) -> DisjointRegions:
        shape = self._reshape_target(shape)
        return self._map(lambda r: r.reshape(shape), shape)

    def dim_shuffle(self, perm: Sequence[int]) -> DisjointRegions:
        p = ops.check_perm(perm, self._shape)
        return self._map(lambda r: r.dim_shuffle(p), tuple(self._shape[i] for i in p))

    def reverse(self, dims: Iterable[int]) -> DisjointRegions:
        axes = ops.check_axes(dims, self._shape, "reverse")
        return self._map(lambda r: r.reverse(axes), self._shape)

    def expand(self, shape: Iterable[int]) -> DisjointRegions:
        shape = ops.check_broadcast(self._shape, shape, reduce=False)
        return self._map(lambda r: r.expand(shape), shape)

    def reduce(self, shape: Iterable[int]) -> DisjointRegions:
        """Union of the reduced members, made disjoint again (reducing can overlap them)."""
        shape = ops.check_broadcast(self._shape, shape, reduce=True)
        acc = DisjointRegions(shape)
        for r in self._regions:
            reduced = r.reduce(shape)
            acc = DisjointRegions(shape, [*acc.regions, reduced.subtract(acc)])
        return acc

    # --- identity -----------------------------------------------------------------------
    def _projections(self) -> list[np.ndarray]:
        if not self._regions:
            return []
        return [
            np.unique(np.concatenate([sb.ons(r.setts[k], n) for r in self._regions]))
            for k, n in enumerate(self._shape)
        ]

    def __len__(self) -> int:
        return len(self._regions)

    def __iter__(self) -> Iterator[Region]:
        return iter(self._regions)

    def __repr__(self) -> str:
        return f"DisjointRegions({self._shape}, [{', '.join(map(repr, self._regions))}])"


@functools.lru_cache(maxsize=4096)
def _full_region(shape: tuple[int, ...]) -> Region:
    """Full regions are immutable and asked for constantly: one per shape."""
    return Region._make(shape, (sb.FULL,) * len(shape))
