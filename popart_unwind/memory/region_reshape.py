"""Exact reshape of a product region, as disjoint products in the new shape.

The region is the set of elements whose row-major flat index lies in the flat set of the
input; reshape views that flat set in the new shape. Algorithm:

1. Size-1 dims are dropped (they are full in a nonempty region) and re-inserted as full.
2. The remaining in-dims and out-dims are cut into minimal contiguous groups of equal
   product. Groups are independent: the answer is the product over groups of each group's
   union of pieces.
3. In a group, fast paths: all in-dims full gives all out-dims full; one in-dim to one
   out-dim is a copy. Otherwise the group's product set is flattened to sorted 1-D indices
   (outer sums of scaled on indices) and split into the out-dims by grouping the values of
   the leading out index whose trailing slice sets are identical, recursively. That is
   exact, gives disjoint pieces, and stays compact for structured (strided, boxed) inputs;
   irregular inputs may shatter into many pieces.

Group results are memoised since the same patterns recur.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from popart_unwind.memory import sett_bounded as sb
from popart_unwind.memory.sett import DisjointSetts

#: One set of indices per axis.
Dims = tuple[DisjointSetts, ...]


def _groups(sizes_in: list[int], sizes_out: list[int]) -> list[tuple[slice, slice]]:
    """Minimal contiguous (in, out) groups of equal product; no size may be 0 or 1."""
    groups, i, j = [], 0, 0
    while i < len(sizes_in):
        i0, j0 = i, j
        p_in, p_out = sizes_in[i], sizes_out[j]
        i, j = i + 1, j + 1
        while p_in != p_out:
            if p_in < p_out:
                p_in, i = p_in * sizes_in[i], i + 1
            else:
                p_out, j = p_out * sizes_out[j], j + 1
        groups.append((slice(i0, i), slice(j0, j)))
    return groups


def flatten(sizes: tuple[int, ...], dims: Dims) -> np.ndarray:
    """Sorted row-major flat indices of a product set."""
    flat = np.zeros(1, dtype=np.int64)
    for n, d in zip(sizes, dims, strict=True):
        flat = np.add.outer(flat * n, sb.ons(d, n)).ravel()
    return flat


def split_flat(flat: np.ndarray, sizes: tuple[int, ...]) -> list[Dims]:
    """Disjoint products over ``sizes`` whose union is the sorted flat set ``flat``."""
    if flat.size == 0:
        return []
    if flat.size == math.prod(sizes):
        return [(sb.FULL,) * len(sizes)]
    if len(sizes) == 1:
        return [(sb.from_sorted(flat, sizes[0]),)]
    inner = math.prod(sizes[1:])
    lead, rest = np.divmod(flat, inner)
    cuts = np.flatnonzero(np.diff(lead)) + 1
    bounds = np.concatenate(([0], cuts, [flat.size])).tolist()
    classes: dict[bytes, tuple[np.ndarray, list[int]]] = {}
    for lo, hi in itertools.pairwise(bounds):
        tail = rest[lo:hi]
        classes.setdefault(tail.tobytes(), (tail, []))[1].append(int(lead[lo]))
    pieces: list[Dims] = []
    for tail, leads in classes.values():
        head = sb.from_sorted(np.asarray(leads, dtype=np.int64), sizes[0])
        pieces.extend((head, *sub) for sub in split_flat(tail, sizes[1:]))
    return pieces


@lru_cache(maxsize=4096)
def _group_pieces(sizes_in: tuple[int, ...], dims: Dims, sizes_out: tuple[int, ...]):
    if all(d == sb.FULL for d in dims):
        return ((sb.FULL,) * len(sizes_out),)
    if len(sizes_in) == 1 and len(sizes_out) == 1:
        return (dims,)
    return tuple(split_flat(flatten(sizes_in, dims), sizes_out))


def reshape_dims(shape_in: tuple[int, ...], dims: Dims, shape_out: tuple[int, ...]) -> list[Dims]:
    """Disjoint products in ``shape_out`` for the nonempty region ``dims`` of ``shape_in``.

    The caller checks that both shapes have the same positive number of elements.
    """
    keep = [(n, d) for n, d in zip(shape_in, dims, strict=True) if n != 1]
    sizes_in = [n for n, _ in keep]
    out_pos = [k for k, n in enumerate(shape_out) if n != 1]
    sizes_out = [shape_out[k] for k in out_pos]
    per_group = [
        _group_pieces(tuple(sizes_in[gi]), tuple(d for _, d in keep[gi]), tuple(sizes_out[go]))
        for gi, go in _groups(sizes_in, sizes_out)
    ]
    result = []
    for combo in itertools.product(*per_group):
        out = [sb.FULL] * len(shape_out)
        for k, d in zip(out_pos, itertools.chain.from_iterable(combo), strict=True):
            out[k] = d
        result.append(tuple(out))
    return result
