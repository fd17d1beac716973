"""The seven view-op types of a Chain, each with all of its rules in one place.

An op type states how it checks its attribute against an input shape and computes its
output shape, how it applies to a numpy array and to a set of element regions, what its
inverse is, and when it does nothing. The canonicalizer (``canonical.py``) relies only on
these rules and on the pair rules it keeps itself.

Attributes: ``DimShuffle`` a permutation (numpy ``transpose`` semantics: output axis ``i`` is
input axis ``perm[i]``); ``Reverse`` a sorted tuple of axes; ``Reshape``, ``Expand`` and
``Reduce`` the output shape (Expand and Reduce keep the rank); ``SettSample`` a Region of the
input shape (the output is its elements, re-indexed); ``SettFillInto`` a Region of the output
shape (the input lands on its elements; everything else is empty, zero in arrays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from popart_unwind.errors import ChainError
from popart_unwind.memory.region import DisjointRegions, Region
from popart_unwind.validation import Shape, as_shape

#: The canonical order in which the canonicalizer sorts neighbouring ops.
OP_ORDER: tuple[str, ...] = (
    "DimShuffle",
    "Expand",
    "Reduce",
    "Reshape",
    "Reverse",
    "SettFillInto",
    "SettSample",
)


@dataclass(frozen=True)
class ChainOp:
    """One op of a Chain: its type, the shapes around it and its attribute."""

    type: str
    in_shape: Shape
    out_shape: Shape
    attr: object

    @property
    def rule(self) -> OpRule:
        return RULES[self.type]

    def __repr__(self) -> str:
        return self.rule.describe(self)


def make_op(op_type: str, in_shape: Shape, attr: object) -> ChainOp:
    """Check ``attr`` against ``in_shape`` and build the op with its output shape."""
    if op_type not in RULES:
        raise ChainError(f"unknown chain op type {op_type!r}; expected one of {OP_ORDER}")
    rule = RULES[op_type]
    attr = rule.normalise(tuple(in_shape), attr)
    return ChainOp(op_type, tuple(in_shape), rule.out_shape(tuple(in_shape), attr), attr)


def _check_shape(shape: object, what: str) -> Shape:
    return as_shape(shape, what, ChainError)


class OpRule:
    """The rules of one op type; subclasses override what differs."""

    name: ClassVar[str]

    def normalise(self, in_shape: Shape, attr: object) -> object:
        raise NotImplementedError

    def out_shape(self, in_shape: Shape, attr: object) -> Shape:
        raise NotImplementedError

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        raise NotImplementedError

    def inverse(self, op: ChainOp) -> ChainOp:
        raise NotImplementedError

    def is_noop(self, op: ChainOp) -> bool:
        return op.in_shape == op.out_shape

    def describe(self, op: ChainOp) -> str:
        return f"{self.name}({_join(op.attr)})"


def _join(values: object) -> str:
    return " ".join(str(v) for v in values)  # type: ignore[union-attr]


class ShapeAttrRule(OpRule):
    """Shared rules of the ops whose attribute is their output shape."""

    def normalise(self, in_shape: Shape, attr: object) -> Shape:
        out = _check_shape(attr, f"{self.name} output shape")
        self.check(in_shape, out)
        return out

    def out_shape(self, in_shape: Shape, attr: object) -> Shape:
        return attr  # type: ignore[return-value]

    def describe(self, op: ChainOp) -> str:
        return f"{self.name}({','.join(str(d) for d in op.attr)})"  # type: ignore[union-attr]

    def check(self, in_shape: Shape, out: Shape) -> None:
        raise NotImplementedError


class ReshapeRule(ShapeAttrRule):
    name = "Reshape"

    def check(self, in_shape: Shape, out: Shape) -> None:
        if math.prod(in_shape) != math.prod(out):
            raise ChainError(
                f"Reshape from {in_shape} to {out} changes the number of elements "
                f"({math.prod(in_shape)} vs {math.prod(out)})"
            )

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        return array.reshape(op.out_shape)

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        return regions.reshape(op.out_shape)

    def inverse(self, op: ChainOp) -> ChainOp:
        return make_op("Reshape", op.out_shape, op.in_shape)


class ExpandRule(ShapeAttrRule):
    name = "Expand"

    def check(self, in_shape: Shape, out: Shape) -> None:
        if len(out) != len(in_shape) or any(
            i != o and i != 1 for i, o in zip(in_shape, out, strict=True)
        ):
            raise ChainError(
                f"Expand from {in_shape} to {out} is not a numpy broadcast of equal rank"
            )

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        return np.broadcast_to(array, op.out_shape).copy()

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        return regions.expand(op.out_shape)

    def inverse(self, op: ChainOp) -> ChainOp:
        return make_op("Reduce", op.out_shape, op.in_shape)


class ReduceRule(ShapeAttrRule):
    name = "Reduce"

    def check(self, in_shape: Shape, out: Shape) -> None:
        if len(out) != len(in_shape) or any(
            i != o and o != 1 for i, o in zip(in_shape, out, strict=True)
        ):
            raise ChainError(
                f"Reduce from {in_shape} to {out} is not a sum over axes to size 1 of equal rank"
            )

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        axes = reduced_axes(op)
        return array.sum(axis=axes, keepdims=True) if axes else array.copy()

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        return regions.reduce(op.out_shape)

    def inverse(self, op: ChainOp) -> ChainOp:
        return make_op("Expand", op.out_shape, op.in_shape)


def reduced_axes(op: ChainOp) -> tuple[int, ...]:
    """Axes a Reduce sums over (those it shrinks to size 1)."""
    pairs = zip(op.in_shape, op.out_shape, strict=True)
    return tuple(axis for axis, (before, after) in enumerate(pairs) if before != after)


def expanded_axes(op: ChainOp) -> tuple[int, ...]:
    """Axes an Expand broadcasts (those it grows from size 1)."""
    return reduced_axes(op)


class DimShuffleRule(OpRule):
    name = "DimShuffle"

    def normalise(self, in_shape: Shape, attr: object) -> tuple[int, ...]:
        perm = tuple(int(p) for p in attr)  # type: ignore[union-attr]
        if sorted(perm) != list(range(len(in_shape))):
            raise ChainError(
                f"DimShuffle({_join(perm)}) is not a permutation of the {len(in_shape)} "
                f"axes of shape {in_shape}"
            )
        return perm

    def out_shape(self, in_shape: Shape, attr: object) -> Shape:
        return tuple(in_shape[p] for p in attr)  # type: ignore[union-attr]

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        return array.transpose(op.attr)

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        return regions.dim_shuffle(op.attr)

    def inverse(self, op: ChainOp) -> ChainOp:
        return make_op("DimShuffle", op.out_shape, inverse_permutation(op.attr))

    def is_noop(self, op: ChainOp) -> bool:
        return op.attr == tuple(range(len(op.in_shape)))


def inverse_permutation(perm: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(perm)
    for position, axis in enumerate(perm):
        inverse[axis] = position
    return tuple(inverse)


class ReverseRule(OpRule):
    name = "Reverse"

    def normalise(self, in_shape: Shape, attr: object) -> tuple[int, ...]:
        """The axes reversed an odd number of times, sorted: reversing an axis twice gives
        it back, as in poprithms, so an axis named twice is not reversed."""
        given = [int(d) for d in attr]  # type: ignore[union-attr]
        if any(d < 0 or d >= len(in_shape) for d in given):
            raise ChainError(f"Reverse({_join(given)}) has an axis outside shape {in_shape}")
        return tuple(sorted(d for d in set(given) if given.count(d) % 2))

    def out_shape(self, in_shape: Shape, attr: object) -> Shape:
        return in_shape

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        return np.flip(array, axis=op.attr).copy() if op.attr else array.copy()

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        return regions.reverse(op.attr)

    def inverse(self, op: ChainOp) -> ChainOp:
        return op

    def is_noop(self, op: ChainOp) -> bool:
        return all(op.in_shape[d] <= 1 for d in op.attr)


class RegionAttrRule(OpRule):
    """Shared rules of SettSample and SettFillInto, whose attribute is a Region."""

    def describe(self, op: ChainOp) -> str:
        return f"{self.name}({op.attr!r})"

    def is_noop(self, op: ChainOp) -> bool:
        return op.in_shape == op.out_shape


class SettSampleRule(RegionAttrRule):
    name = "SettSample"

    def normalise(self, in_shape: Shape, attr: object) -> Region:
        if not isinstance(attr, Region):
            raise ChainError(f"SettSample needs a Region, got {type(attr).__name__}")
        if attr.shape != in_shape:
            raise ChainError(
                f"SettSample region of shape {attr.shape} does not match input shape {in_shape}"
            )
        return attr

    def out_shape(self, in_shape: Shape, attr: object) -> Shape:
        return tuple(attr.nelms())  # type: ignore[union-attr]

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        return array[np.ix_(*op.attr.get_ons())].copy()  # type: ignore[union-attr]

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        return regions.sett_sample(op.attr)

    def inverse(self, op: ChainOp) -> ChainOp:
        return make_op("SettFillInto", op.out_shape, op.attr)


class SettFillIntoRule(RegionAttrRule):
    name = "SettFillInto"

    def normalise(self, in_shape: Shape, attr: object) -> Region:
        if not isinstance(attr, Region):
            raise ChainError(f"SettFillInto needs a Region, got {type(attr).__name__}")
        if tuple(attr.nelms()) != in_shape:
            raise ChainError(
                f"SettFillInto region with {tuple(attr.nelms())} elements per axis does not "
                f"match input shape {in_shape}"
            )
        return attr

    def out_shape(self, in_shape: Shape, attr: object) -> Shape:
        return attr.shape  # type: ignore[union-attr]

    def apply_array(self, op: ChainOp, array: np.ndarray) -> np.ndarray:
        out = np.zeros(op.out_shape, dtype=array.dtype)
        out[np.ix_(*op.attr.get_ons())] = array  # type: ignore[union-attr]
        return out

    def apply_regions(self, op: ChainOp, regions: DisjointRegions) -> DisjointRegions:
        return regions.sett_fill_into(op.attr)

    def inverse(self, op: ChainOp) -> ChainOp:
        return make_op("SettSample", op.out_shape, op.attr)


RULES: dict[str, OpRule] = {
    rule.name: rule
    for rule in (
        DimShuffleRule(),
        ExpandRule(),
        ReduceRule(),
        ReshapeRule(),
        ReverseRule(),
        SettFillIntoRule(),
        SettSampleRule(),
    )
}
