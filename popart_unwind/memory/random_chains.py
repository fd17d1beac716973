"""Seeded random regions and chains, for property tests and the fuzz benchmark.

Every op type is drawn, with attributes valid for the shape at hand, so that canonicalization
and region algebra can be checked against brute force on many varied cases. Sizes stay small
(``max_elements``) so that brute force remains cheap.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.memory.chain import Chain
from popart_unwind.memory.chain_ops import OP_ORDER, Shape
from popart_unwind.memory.region import Region
from popart_unwind.memory.sett import DisjointSetts


def random_shape(rng: np.random.Generator, max_rank: int = 3, max_dim: int = 5) -> Shape:
    rank = int(rng.integers(1, max_rank + 1))
    return tuple(int(d) for d in rng.integers(1, max_dim + 1, size=rank))


def random_axis_set(rng: np.random.Generator, size: int, allow_empty: bool = True) -> np.ndarray:
    """Indices along one axis: full, an interval, a strided interval, or arbitrary."""
    kind = rng.choice(
        ["full", "interval", "strided", "arbitrary", "empty"],
        p=[
            0.25,
            0.3,
            0.2,
            0.2,
            0.05 if allow_empty else 0.0,
        ]
        if allow_empty
        else [0.25, 0.3, 0.2, 0.25, 0.0],
    )
    if size == 0 or kind == "empty":
        return np.zeros(0, dtype=np.int64)
    if kind == "full":
        return np.arange(size)
    lo = int(rng.integers(0, size))
    hi = int(rng.integers(lo + 1, size + 1))
    if kind == "interval":
        return np.arange(lo, hi)
    if kind == "strided":
        return np.arange(lo, hi, int(rng.integers(1, 4)))
    chosen = np.flatnonzero(rng.random(size) < 0.5)
    return chosen if len(chosen) or allow_empty else np.array([lo])


def region_from_axis_sets(shape: Shape, axis_sets: list[np.ndarray]) -> Region:
    return Region(
        shape, [DisjointSetts.from_indices(idx, n) for idx, n in zip(axis_sets, shape, strict=True)]
    )


def random_region(rng: np.random.Generator, shape: Shape, allow_empty: bool = True) -> Region:
    return region_from_axis_sets(shape, [random_axis_set(rng, n, allow_empty) for n in shape])


def random_reshape_target(rng: np.random.Generator, shape: Shape, max_rank: int) -> Shape:
    """A random shape with as many elements: prime factors dealt to axes, plus some ones."""
    count = math.prod(shape)
    rank = int(rng.integers(1, max_rank + 1))
    if count == 0:
        dims = [int(d) for d in rng.integers(1, 4, size=rank)]
        dims[int(rng.integers(0, rank))] = 0
        return tuple(dims)
    dims = [1] * rank
    for factor in _prime_factors(count):
        dims[int(rng.integers(0, rank))] *= factor
    return tuple(dims)


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors + ([n] if n > 1 else [])


def _random_op(rng: np.random.Generator, chain: Chain, max_rank: int, max_elements: int) -> bool:
    """Append one random op that fits; False when the drawn type does not fit this shape."""
    shape = chain.out_shape
    kind = str(rng.choice(OP_ORDER))
    if kind == "Reshape":
        chain.reshape(random_reshape_target(rng, shape, max_rank))
    elif kind == "DimShuffle":
        chain.dim_shuffle([int(p) for p in rng.permutation(len(shape))])
    elif kind == "Reverse":
        axes = [a for a in range(len(shape)) if rng.random() < 0.5]
        if axes and rng.random() < 0.25:  # an axis named twice, which gives it back
            axes.append(axes[int(rng.integers(len(axes)))])
        chain.reverse(axes)
    elif kind == "SettSample":
        chain.sett_sample(random_region(rng, shape))
    elif kind == "Expand":
        ones = [a for a, d in enumerate(shape) if d == 1]
        grown = {a: int(rng.integers(2, 4)) for a in ones if rng.random() < 0.7}
        target = tuple(grown.get(a, d) for a, d in enumerate(shape))
        if not grown or math.prod(target) > max_elements:
            return False
        chain.append("Expand", target)
    elif kind == "Reduce":
        target = tuple(1 if d > 1 and rng.random() < 0.5 else d for d in shape)
        if target == shape:
            return False
        chain.append("Reduce", target)
    else:
        return _random_fill(rng, chain, max_elements)
    return True


def random_scaffold(rng: np.random.Generator, shape: Shape, extra: int = 2) -> Region:
    """A region of a larger shape (up to ``extra`` more per axis) with ``shape`` elements."""
    sizes = tuple(n + int(rng.integers(0, extra + 1)) for n in shape)
    axis_sets = [
        np.sort(rng.choice(m, size=n, replace=False)) for n, m in zip(shape, sizes, strict=True)
    ]
    return region_from_axis_sets(sizes, axis_sets)


def _random_fill(rng: np.random.Generator, chain: Chain, max_elements: int) -> bool:
    scaffold = random_scaffold(rng, chain.out_shape)
    if math.prod(scaffold.shape) > max_elements:
        return False
    chain.sett_fill_into(scaffold)
    return True


def random_chain(
    rng: np.random.Generator,
    length: int,
    max_rank: int = 4,
    max_dim: int = 4,
    max_elements: int = 256,
) -> Chain:
    """A chain of ``length`` random ops (all seven types) from a random input shape."""
    chain = Chain(random_shape(rng, max_rank, max_dim))
    while len(chain) < length:
        _random_op(rng, chain, max_rank, max_elements)
    return chain
