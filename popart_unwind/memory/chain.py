"""Chains of view-changing ops, applied to arrays and to element regions.

A Chain starts from an input shape and appends ops with builder methods, each returning the
chain so calls can be strung together. Chains compare op by op (``==``); ``equivalent``
compares canonical forms op by op; ``truly_equivalent`` applies both chains to arrays of
distinct values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from popart_unwind.errors import ChainError
from popart_unwind.memory.chain_ops import ChainOp, Shape, _check_shape, make_op
from popart_unwind.memory.region import DisjointRegions, Region


class Chain:
    """A sequence of view ops with an input shape (poprithms' Chain)."""

    def __init__(self, in_shape: Sequence[int], ops: Sequence[ChainOp] = ()) -> None:
        self._in_shape = _check_shape(in_shape, "Chain input shape")
        self._ops: list[ChainOp] = []
        for op in ops:
            if op.in_shape != self.out_shape:
                raise ChainError(
                    f"{op!r} expects input shape {op.in_shape} but the chain is at {self.out_shape}"
                )
            self._ops.append(op)

    # ----- structure -------------------------------------------------------------------
    @property
    def in_shape(self) -> Shape:
        return self._in_shape

    @property
    def out_shape(self) -> Shape:
        return self._ops[-1].out_shape if self._ops else self._in_shape

    @property
    def ops(self) -> tuple[ChainOp, ...]:
        return tuple(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Chain):
            return NotImplemented
        return self._in_shape == other._in_shape and self._ops == other._ops

    def __hash__(self) -> int:
        return hash((self._in_shape, tuple((op.type, op.out_shape) for op in self._ops)))

    def __repr__(self) -> str:
        shape = "(" + ",".join(str(d) for d in self._in_shape) + ")"
        return " -> ".join([shape, *(repr(op) for op in self._ops)])

    def copy(self) -> Chain:
        return Chain(self._in_shape, self._ops)

    def then(self, other: Chain) -> Chain:
        """A new chain: this one followed by ``other`` (which starts at this output shape)."""
        if other.in_shape != self.out_shape:
            raise ChainError(
                f"cannot follow a chain ending at {self.out_shape} with one starting at "
                f"{other.in_shape}"
            )
        return Chain(self._in_shape, [*self._ops, *other.ops])

    # ----- builder -----------------------------------------------------------------------
    def append(self, op_type: str, attr: object) -> Chain:
        """Append one op of ``op_type`` with ``attr``, checked against the current shape."""
        self._ops.append(make_op(op_type, self.out_shape, attr))
        return self

    def reshape(self, shape: Sequence[int]) -> Chain:
        return self.append("Reshape", shape)

    def flatten(self) -> Chain:
        return self.reshape((math.prod(self.out_shape),))

    def expand(self, shape: Sequence[int]) -> Chain:
        """Numpy broadcast to ``shape``; a lower input rank gains leading ones first."""
        shape = _check_shape(shape, "Expand target shape")
        current = self.out_shape
        if len(shape) < len(current):
            raise ChainError(f"cannot expand shape {current} to the lower rank shape {shape}")
        if len(shape) > len(current):
            self.reshape((1,) * (len(shape) - len(current)) + current)
        return self.append("Expand", shape)

    def reduce(self, shape: Sequence[int]) -> Chain:
        """Sum to ``shape`` (the inverse of a numpy broadcast); leading axes may vanish."""
        shape = _check_shape(shape, "Reduce target shape")
        current = self.out_shape
        if len(shape) > len(current):
            raise ChainError(f"cannot reduce shape {current} to the higher rank shape {shape}")
        padded = (1,) * (len(current) - len(shape)) + shape
        self.append("Reduce", padded)
        if padded != shape:
            self.reshape(shape)
        return self

    def dim_shuffle(self, permutation: Sequence[int]) -> Chain:
        return self.append("DimShuffle", permutation)

    def reverse(self, dims: Sequence[int]) -> Chain:
        return self.append("Reverse", dims)

    def slice(self, lower: Sequence[int], upper: Sequence[int]) -> Chain:
        return self.sett_sample(Region.from_bounds(self.out_shape, lower, upper))

    def sub_sample(self, stride: int, dim: int) -> Chain:
        return self.sett_sample(Region.from_stride(self.out_shape, stride, dim))

    def sett_sample(self, region: Region) -> Chain:
        return self.append("SettSample", region)

    def sett_fill_into(self, region: Region) -> Chain:
        return self.append("SettFillInto", region)

    def mask(self, region: Region) -> Chain:
        """Keep the elements of ``region`` in place and empty the others."""
        return self.sett_sample(region).sett_fill_into(region)

    # ----- meaning -----------------------------------------------------------------------
    def apply(self, array: np.ndarray) -> np.ndarray:
        """Apply every op to ``array`` (Reduce sums; SettFillInto writes zeros elsewhere)."""
        array = np.asarray(array)
        if array.shape != self._in_shape:
            raise ChainError(f"chain expects an array of shape {self._in_shape}, got {array.shape}")
        for op in self._ops:
            array = op.rule.apply_array(op, array)
        return array

    def apply_regions(self, regions: DisjointRegions | Region) -> DisjointRegions:
        """The elements of the output that the given input elements reach."""
        if isinstance(regions, Region):
            regions = DisjointRegions(regions.shape, [regions])
        if regions.shape != self._in_shape:
            raise ChainError(
                f"chain expects regions of shape {self._in_shape}, got {regions.shape}"
            )
        for op in self._ops:
            regions = op.rule.apply_regions(op, regions)
        return regions

    def mirror(self) -> Chain:
        """The inverse chain, from this chain's output shape back to its input shape."""
        return Chain(self.out_shape, [op.rule.inverse(op) for op in reversed(self._ops)])

    def canonicalized(self) -> Chain:
        """An equivalent chain in canonical form; this chain is unchanged."""
        from popart_unwind.memory.canonical import canonical_ops

        return Chain(self._in_shape, canonical_ops(self._in_shape, tuple(self._ops)))

    def equivalent(self, other: Chain) -> bool:
        """Whether the canonical forms of the two chains are op-wise identical."""
        return self.canonicalized() == other.canonicalized()

    def truly_equivalent(self, other: Chain) -> bool:
        """Whether both chains map arrays of distinct values to the same output."""
        if self._in_shape != other._in_shape or self.out_shape != other.out_shape:
            return False
        return all(
            np.array_equal(self.apply(probe), other.apply(probe))
            for probe in distinct_value_probes(self._in_shape)
        )


def distinct_value_probes(shape: Shape) -> list[np.ndarray]:
    """Arrays whose elements are distinct and non-zero, so that zeros from fills show up.

    Two probes (ascending, and a fixed shuffle of it) make a coincidental equality of sums
    under Reduce far less likely than with one.
    """
    count = math.prod(shape)
    ascending = np.arange(1, count + 1, dtype=np.int64)
    shuffled = np.random.default_rng(20261122).permutation(ascending)
    return [ascending.reshape(shape), shuffled.reshape(shape)]
