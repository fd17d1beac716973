"""Periodic 1-D index sets: Stripe, Sett and DisjointSetts.

A :class:`Stripe` ``(on, off, phase)`` is the periodic pattern "``on`` indices on, ``off``
off", shifted so that a run starts at ``phase``. A :class:`Sett` nests stripes: ``stripes[0]``
is the outermost level and every inner stripe restarts at each "on" run of its parent and is
clipped to it. For a coordinate ``x`` (see :meth:`Sett.is_on`, the reference semantics)::

    c0 = x
    level 0:  rel0 = (c0 - phase0) mod period0; on0 iff rel0 < on0; c1 = rel0
    level k:  relk = (ck - phasek) mod periodk; onk iff relk < onk; c(k+1) = min(relk, ck)
    x is on iff every level is on.

``c(k+1)`` is the position inside the level-k run once that run is clipped to its parent
run (which starts at coordinate 0 of level k). A stripe with ``off == 0`` is always on, but
its runs of length ``on`` still restart every period, which changes what nested levels see.

A Sett is periodic on the whole integer line with the period of its outermost stripe (1 when
it has none). A :class:`DisjointSetts` is a union of Setts assumed pairwise disjoint; set
comparisons on the infinite line are exact (see :func:`equivalent_setts`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import index
from typing import Union

import numpy as np

from popart_unwind.errors import RegionError
from popart_unwind.memory.sett_compress import compress

__all__ = ["LCM_LIMIT", "PERIOD_LIMIT", "DisjointSetts", "Sett", "Stripe", "equivalent_setts"]

#: Common periods up to this size are compared element by element over one full period.
LCM_LIMIT = 10**7
#: Largest single period whose bitmap is built when comparing beyond :data:`LCM_LIMIT`.
PERIOD_LIMIT = 10**7

StripeLike = Union["Stripe", Sequence[int]]


@dataclass(frozen=True, slots=True)
class Stripe:
    """``on`` indices on then ``off`` off, repeating, with a run starting at ``phase``."""

    on: int
    off: int
    phase: int = 0

    def __post_init__(self) -> None:
        try:
            on, off, phase = index(self.on), index(self.off), index(self.phase)
        except TypeError:
            raise RegionError(
                f"Stripe(on={self.on!r}, off={self.off!r}, phase={self.phase!r}): "
                "on, off and phase must be integers"
            ) from None
        if on < 0 or off < 0 or on + off <= 0:
            raise RegionError(
                f"Stripe(on={on}, off={off}, phase={phase}): need on >= 0, off >= 0 and "
                "period = on + off > 0"
            )
        object.__setattr__(self, "on", on)
        object.__setattr__(self, "off", off)
        object.__setattr__(self, "phase", phase % (on + off))

    @property
    def period(self) -> int:
        return self.on + self.off

    @staticmethod
    def coerce(stripe: StripeLike) -> Stripe:
        """Accept a Stripe or an ``(on, off[, phase])`` sequence."""
        if isinstance(stripe, Stripe):
            return stripe
        if isinstance(stripe, (str, bytes)) or not isinstance(stripe, Sequence):
            raise RegionError(f"expected a Stripe or an (on, off, phase) tuple, got {stripe!r}")
        if len(stripe) not in (2, 3):
            raise RegionError(f"expected a Stripe or an (on, off, phase) tuple, got {stripe!r}")
        return Stripe(*stripe)

    def __repr__(self) -> str:
        return f"Stripe({self.on}, {self.off}, {self.phase})"


def _as_int_array(x: int | np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


class _IndexSet:
    """What a set of indices derives from its vectorised membership ``is_on``."""

    __slots__ = ()

    def is_on(self, x: int | np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def mask_range(self, start: int, end: int) -> np.ndarray:
        """Membership of every index in ``[start, end)``."""
        return self.is_on(np.arange(start, max(start, end), dtype=np.int64))

    def mask(self, n: int) -> np.ndarray:
        """Membership of every index in ``[0, n)``."""
        return self.mask_range(0, n)


class Sett(_IndexSet):
    """Nested stripes; ``Sett([])`` is always on. Immutable; ``==`` is structural."""

    __slots__ = ("_hash", "_stripes")

    def __init__(self, stripes: Iterable[StripeLike] = ()) -> None:
        if isinstance(stripes, Sett):
            stripes = stripes.stripes
        if isinstance(stripes, (str, bytes)) or not isinstance(stripes, Iterable):
            raise RegionError(f"Sett expects a sequence of stripes, got {stripes!r}")
        object.__setattr__(self, "_stripes", tuple(Stripe.coerce(s) for s in stripes))
        object.__setattr__(self, "_hash", hash(("Sett", self._stripes)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Sett is immutable")

    @property
    def stripes(self) -> tuple[Stripe, ...]:
        return self._stripes

    @property
    def period(self) -> int:
        """The set repeats with this period on the whole integer line."""
        return self._stripes[0].period if self._stripes else 1

    def is_on(self, x: int | np.ndarray) -> np.ndarray:
        """Vectorised membership (the reference semantics of the nesting rule)."""
        c = _as_int_array(x)
        on = np.ones(c.shape, dtype=bool)
        for level, s in enumerate(self._stripes):
            rel = (c - s.phase) % s.period
            on &= rel < s.on
            c = rel if level == 0 else np.minimum(rel, c)
        return on

    def n(self, start: int, end: int) -> int:
        """Number of on indices in ``[start, end)``; whole periods are counted once."""
        length = end - start
        if length <= 0:
            return 0
        p = self.period
        if length <= p:
            return int(np.count_nonzero(self.mask_range(start, end)))
        whole, rest = divmod(length, p)
        per_period = int(np.count_nonzero(self.mask(p)))
        return whole * per_period + int(np.count_nonzero(self.mask_range(start, start + rest)))

    def get_ons(self, start: int, end: int) -> list[int]:
        """Sorted on indices in ``[start, end)``."""
        return (np.flatnonzero(self.mask_range(start, end)) + start).tolist()

    def equivalent(self, other: Sett | DisjointSetts) -> bool:
        """Same set on the whole integer line (see :func:`equivalent_setts`)."""
        return equivalent_setts(DisjointSetts([self]), _as_disjoint(other))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sett):
            return NotImplemented
        return self._stripes == other._stripes

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        body = ",".join(f"({s.on},{s.off},{s.phase})" for s in self._stripes)
        return f"Sett({body})"


class DisjointSetts(_IndexSet):
    """Union of Setts assumed pairwise disjoint; ``checked=True`` verifies it.

    Disjointness is not verified by default because every producer in this package
    (:meth:`from_indices` above all) guarantees it by construction. ``==`` is structural.
    """

    __slots__ = ("_hash", "_setts")

    def __init__(
        self, setts: Iterable[Sett | Iterable[StripeLike]] = (), *, checked: bool = False
    ) -> None:
        if isinstance(setts, DisjointSetts):
            setts = setts.setts
        items = tuple(s if isinstance(s, Sett) else Sett(s) for s in setts)
        object.__setattr__(self, "_setts", items)
        object.__setattr__(self, "_hash", hash(("DisjointSetts", items)))
        if checked:
            self._check_disjoint()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("DisjointSetts is immutable")

    @property
    def setts(self) -> tuple[Sett, ...]:
        return self._setts

    @property
    def period(self) -> int:
        """Common period of the members on the whole integer line."""
        return math.lcm(*(s.period for s in self._setts)) if self._setts else 1

    def _check_disjoint(self) -> None:
        """Compare members pairwise over the lcm of their periods."""
        for i, a in enumerate(self._setts):
            for b in self._setts[i + 1 :]:
                p = math.lcm(a.period, b.period)
                if p > LCM_LIMIT:
                    raise RegionError(f"cannot check {a!r} and {b!r}: common period {p} too large")
                hit = np.flatnonzero(a.mask(p) & b.mask(p))
                if hit.size:
                    raise RegionError(f"{a!r} and {b!r} overlap (both on at {int(hit[0])})")

    def is_on(self, x: int | np.ndarray) -> np.ndarray:
        """Vectorised membership: on in any member."""
        arr = _as_int_array(x)
        on = np.zeros(arr.shape, dtype=bool)
        for s in self._setts:
            on |= s.is_on(arr)
        return on

    def n(self, start: int, end: int) -> int:
        """Number of on indices in ``[start, end)`` (sum over the disjoint members)."""
        return sum(s.n(start, end) for s in self._setts)

    def get_ons(self, start: int, end: int) -> list[int]:
        return (np.flatnonzero(self.mask_range(start, end)) + start).tolist()

    def equivalent(self, other: Sett | DisjointSetts) -> bool:
        """Same set on the whole integer line (see :func:`equivalent_setts`)."""
        return equivalent_setts(self, _as_disjoint(other))

    @classmethod
    def from_indices(cls, indices: Iterable[int] | np.ndarray, size: int) -> DisjointSetts:
        """A compact DisjointSetts equal to ``indices`` within ``[0, size)``.

        Deterministic; the members are pairwise disjoint on the whole integer line. See
        :mod:`popart_unwind.memory.sett_compress` for the forms produced.
        """
        size = index(size)
        raw = indices if isinstance(indices, np.ndarray) else list(indices)
        idx = np.asarray(raw, dtype=np.int64).ravel()
        if idx.size > 1 and not (np.diff(idx) > 0).all():
            idx = np.unique(idx)
        if size < 0:
            raise RegionError(f"from_indices: size {size} must be >= 0")
        if idx.size and (idx[0] < 0 or idx[-1] >= size):
            raise RegionError(
                f"from_indices: indices must lie in [0, {size}), got range "
                f"[{int(idx[0])}, {int(idx[-1])}]"
            )
        return cls(Sett(stripes) for stripes in compress(idx, size))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DisjointSetts):
            return NotImplemented
        return self._setts == other._setts

    def __hash__(self) -> int:
        return self._hash

    def __len__(self) -> int:
        return len(self._setts)

    def __iter__(self) -> Iterator[Sett]:
        return iter(self._setts)

    def __repr__(self) -> str:
        return f"DisjointSetts({', '.join(map(repr, self._setts))})"


def _as_disjoint(x: Sett | DisjointSetts) -> DisjointSetts:
    if isinstance(x, DisjointSetts):
        return x
    if isinstance(x, Sett):
        return DisjointSetts([x])
    raise RegionError(f"expected a Sett or DisjointSetts, got {type(x).__name__}")


def _is_periodic(mask: np.ndarray, g: int) -> bool:
    """Whether a bitmap of one period ``len(mask)`` also repeats every ``g`` (g divides it)."""
    rows = mask.reshape(-1, g)
    return bool((rows == rows[0]).all())


def equivalent_setts(a: DisjointSetts, b: DisjointSetts) -> bool:
    """Exact equality of two unions on the whole integer line.

    Both sides are periodic (periods P and Q). When lcm(P, Q) <= :data:`LCM_LIMIT` they are
    compared over one common period. Otherwise we use that equal sets share every period of
    either side, hence (Bezout) g = gcd(P, Q): the sets are equal iff both bitmaps over their
    own period repeat every g and agree on ``[0, g)``. That needs only P + Q elements; a
    side whose own period exceeds :data:`PERIOD_LIMIT` raises :class:`RegionError`.
    """
    p, q = a.period, b.period
    common = math.lcm(p, q)
    if common <= LCM_LIMIT:
        return bool(np.array_equal(a.mask(common), b.mask(common)))
    if max(p, q) > PERIOD_LIMIT:
        raise RegionError(
            f"cannot compare sets with periods {p} and {q}: a period exceeds {PERIOD_LIMIT}"
        )
    g = math.gcd(p, q)
    ma, mb = a.mask(p), b.mask(q)
    return _is_periodic(ma, g) and _is_periodic(mb, g) and bool(np.array_equal(ma[:g], mb[:g]))
