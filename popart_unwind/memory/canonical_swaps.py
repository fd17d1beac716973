"""Swaps that move a later op in front of an earlier one, towards the canonical order.

``SWAPS[(first, second)]`` rewrites ``first -> second`` into ``second' -> first'`` with the
same meaning, where ``second`` comes before ``first`` in ``OP_ORDER``; it returns ``None``
when no such rewrite exists (e.g. a transpose that splits a group of a reshape). Every rule
is exact: the property tests apply both forms to arrays of distinct values.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from popart_unwind.memory.chain_ops import ChainOp, Shape, expanded_axes, make_op, reduced_axes
from popart_unwind.memory.fill_sample import fill_sample_ops, sample_fill_sources
from popart_unwind.memory.region import Region

Swap = Callable[[ChainOp, ChainOp], "list[ChainOp] | None"]
Group = tuple[tuple[int, ...], tuple[int, ...]]


def reshape_groups(in_shape: Shape, out_shape: Shape) -> list[Group] | None:
    """Split a reshape into the smallest independent groups of (input axes, output axes).

    Size-1 axes form their own groups, paired one-to-one where they line up; a group whose
    both sides have several axes of size > 1 is a general (neither split nor merge) reshape.
    Returns None for tensors with no elements, where groups are not defined.
    """
    if math.prod(in_shape) == 0:
        return None
    groups: list[Group] = []
    i = j = 0
    while i < len(in_shape) or j < len(out_shape):
        in_one = i < len(in_shape) and in_shape[i] == 1
        out_one = j < len(out_shape) and out_shape[j] == 1
        if in_one and out_one:
            groups.append(((i,), (j,)))
            i, j = i + 1, j + 1
        elif in_one:
            groups.append(((i,), ()))
            i += 1
        elif out_one:
            groups.append(((), (j,)))
            j += 1
        else:
            ins, outs = [i], [j]
            in_size, out_size = in_shape[i], out_shape[j]
            i, j = i + 1, j + 1
            while in_size != out_size:
                if in_size < out_size:
                    ins.append(i)
                    in_size *= in_shape[i]
                    i += 1
                else:
                    outs.append(j)
                    out_size *= out_shape[j]
                    j += 1
            groups.append((tuple(ins), tuple(outs)))
    return groups


def _whole_groups(
    groups: list[Group], side: int, shape: Shape, touched: set[int]
) -> list[Group] | None:
    """The groups whose axes of size > 1 on ``side`` (0: input, 1: output) are all in
    ``touched``; None if some group is touched only in part."""
    whole = []
    for group in groups:
        wide = {a for a in group[side] if shape[a] > 1}
        hit = wide & touched
        if hit and hit != wide:
            return None
        if hit:
            whole.append(group)
    return whole


def _replace(shape: Shape, axes: dict[int, int]) -> Shape:
    return tuple(axes.get(a, d) for a, d in enumerate(shape))


# ----- X -> DimShuffle ---------------------------------------------------------------------
def _shape_attr_then_dim_shuffle(first: ChainOp, shuffle: ChainOp) -> list[ChainOp]:
    perm = shuffle.attr
    moved = make_op("DimShuffle", first.in_shape, perm)
    again = make_op(first.type, moved.out_shape, tuple(first.out_shape[p] for p in perm))
    return [moved, again]


def _reverse_then_dim_shuffle(reverse: ChainOp, shuffle: ChainOp) -> list[ChainOp]:
    perm = shuffle.attr
    moved = make_op("DimShuffle", reverse.in_shape, perm)
    dims = tuple(i for i, p in enumerate(perm) if p in reverse.attr)
    return [moved, make_op("Reverse", moved.out_shape, dims)]


def _region_op_then_dim_shuffle(first: ChainOp, shuffle: ChainOp) -> list[ChainOp]:
    moved = make_op("DimShuffle", first.in_shape, shuffle.attr)
    return [moved, make_op(first.type, moved.out_shape, first.attr.dim_shuffle(shuffle.attr))]


def _reshape_then_dim_shuffle(reshape: ChainOp, shuffle: ChainOp) -> list[ChainOp] | None:
    """Valid when the permutation keeps each reshape group's output axes together, in order."""
    groups = reshape_groups(reshape.in_shape, reshape.out_shape)
    if groups is None:
        return None
    position = {axis: p for p, axis in enumerate(shuffle.attr)}
    placed: list[tuple[int, tuple[int, ...]]] = []
    dropped: list[int] = []
    for ins, outs in groups:
        if not outs:
            dropped.extend(ins)
            continue
        spots = [position[o] for o in outs]
        if spots != list(range(spots[0], spots[0] + len(spots))):
            return None
        placed.append((spots[0], ins))
    in_perm = [a for _, ins in sorted(placed) for a in ins] + dropped
    moved = make_op("DimShuffle", reshape.in_shape, in_perm)
    return [moved, make_op("Reshape", moved.out_shape, shuffle.out_shape)]


# ----- X -> Expand -------------------------------------------------------------------------
def _reduce_then_expand(reduce: ChainOp, expand: ChainOp) -> list[ChainOp] | None:
    """Commute when no axis is summed and then broadcast again."""
    grown = set(expanded_axes(expand))
    if grown & set(reduced_axes(reduce)):
        return None
    broadcast = make_op(
        "Expand",
        reduce.in_shape,
        _replace(reduce.in_shape, {a: expand.out_shape[a] for a in grown}),
    )
    return [broadcast, make_op("Reduce", broadcast.out_shape, expand.out_shape)]


def _reshape_then_expand(reshape: ChainOp, expand: ChainOp) -> list[ChainOp] | None:
    """Valid when every broadcast axis is a size-1 axis the reshape keeps one-to-one."""
    groups = reshape_groups(reshape.in_shape, reshape.out_shape)
    if groups is None:
        return None
    partner = {outs[0]: ins[0] for ins, outs in groups if len(ins) == 1 and len(outs) == 1}
    grown = expanded_axes(expand)
    if any(a not in partner or reshape.in_shape[partner[a]] != 1 for a in grown):
        return None
    target = _replace(reshape.in_shape, {partner[a]: expand.out_shape[a] for a in grown})
    broadcast = make_op("Expand", reshape.in_shape, target)
    return [broadcast, make_op("Reshape", target, expand.out_shape)]


def _reverse_then_expand_or_reduce(reverse: ChainOp, second: ChainOp) -> list[ChainOp]:
    """Reversing an axis that is then broadcast or summed changes nothing."""
    touched = set(reduced_axes(second))
    moved = make_op(second.type, reverse.in_shape, second.out_shape)
    dims = tuple(d for d in reverse.attr if d not in touched)
    return [moved, make_op("Reverse", moved.out_shape, dims)]


def _fill_then_expand(fill: ChainOp, expand: ChainOp) -> list[ChainOp] | None:
    grown = expanded_axes(expand)
    if any(fill.in_shape[a] != 1 for a in grown):
        return None
    broadcast = make_op(
        "Expand", fill.in_shape, _replace(fill.in_shape, {a: expand.out_shape[a] for a in grown})
    )
    return [
        broadcast,
        make_op("SettFillInto", broadcast.out_shape, fill.attr.expand(expand.out_shape)),
    ]


def _sample_then_expand(sample: ChainOp, expand: ChainOp) -> list[ChainOp] | None:
    grown = expanded_axes(expand)
    if any(sample.in_shape[a] != 1 for a in grown):
        return None
    target = _replace(sample.in_shape, {a: expand.out_shape[a] for a in grown})
    broadcast = make_op("Expand", sample.in_shape, target)
    return [broadcast, make_op("SettSample", target, sample.attr.expand(target))]


# ----- X -> Reduce -------------------------------------------------------------------------
def _reshape_then_reduce(reshape: ChainOp, reduce: ChainOp) -> list[ChainOp] | None:
    """Valid when each reshape group is either left alone or summed over entirely."""
    groups = reshape_groups(reshape.in_shape, reshape.out_shape)
    if groups is None:
        return None
    summed = _whole_groups(groups, 1, reshape.out_shape, set(reduced_axes(reduce)))
    if summed is None:
        return None
    squeeze = {a: 1 for ins, _ in summed for a in ins}
    total = make_op("Reduce", reshape.in_shape, _replace(reshape.in_shape, squeeze))
    return [total, make_op("Reshape", total.out_shape, reduce.out_shape)]


def _fill_then_reduce(fill: ChainOp, reduce: ChainOp) -> list[ChainOp]:
    """Summing a filled axis sums the input along it (the rest is zeros)."""
    summed = reduced_axes(reduce)
    total = make_op("Reduce", fill.in_shape, _replace(fill.in_shape, dict.fromkeys(summed, 1)))
    setts = list(fill.attr.setts)
    for axis in summed:
        setts[axis] = Region.full((1,)).setts[0]
    return [total, make_op("SettFillInto", total.out_shape, Region(reduce.out_shape, setts))]


def _sample_then_reduce(sample: ChainOp, reduce: ChainOp) -> list[ChainOp] | None:
    """Valid when every summed axis is sampled in full."""
    summed = reduced_axes(reduce)
    if any(sample.out_shape[a] != sample.in_shape[a] for a in summed):
        return None
    total = make_op("Reduce", sample.in_shape, _replace(sample.in_shape, dict.fromkeys(summed, 1)))
    return [total, make_op("SettSample", total.out_shape, sample.attr.reduce(total.out_shape))]


# ----- X -> Reshape ------------------------------------------------------------------------
def _reverse_then_reshape(reverse: ChainOp, reshape: ChainOp) -> list[ChainOp] | None:
    """Valid when each group is reversed along all of its axes or none of them."""
    groups = reshape_groups(reshape.in_shape, reshape.out_shape)
    if groups is None:
        return None
    flipped = _whole_groups(groups, 0, reshape.in_shape, set(reverse.attr))
    if flipped is None:
        return None
    out_dims = [o for _, outs in flipped for o in outs if reshape.out_shape[o] > 1]
    moved = make_op("Reshape", reverse.in_shape, reshape.out_shape)
    return [moved, make_op("Reverse", moved.out_shape, out_dims)]


def _fill_then_reshape(fill: ChainOp, reshape: ChainOp) -> list[ChainOp] | None:
    """Valid when the filled region, viewed in the new shape, is still one product region."""
    viewed = fill.attr.reshape(reshape.out_shape).regions
    if len(viewed) != 1:
        return None
    region = viewed[0]
    moved = make_op("Reshape", fill.in_shape, tuple(region.nelms()))
    return [moved, make_op("SettFillInto", moved.out_shape, region)]


def _sample_then_reshape(sample: ChainOp, reshape: ChainOp) -> list[ChainOp] | None:
    """Valid when no sampled axis is split or merged in a way that mixes kept and dropped
    elements: the sampled region, viewed in the reshaped full tensor, must be one product
    region whose per-axis counts are the final shape."""
    groups = reshape_groups(reshape.in_shape, reshape.out_shape)
    if groups is None:
        return None
    full_out: dict[int, int] = {}
    for ins, outs in groups:
        full_size = math.prod(sample.in_shape[a] for a in ins)
        if not outs:
            if full_size != 1:
                return None
            continue
        inner = math.prod(reshape.out_shape[o] for o in outs[1:])
        if full_size % inner:
            return None
        full_out[outs[0]] = full_size // inner
        full_out.update({o: reshape.out_shape[o] for o in outs[1:]})
    full_shape = tuple(full_out.get(o, 1) for o in range(len(reshape.out_shape)))
    viewed = sample.attr.reshape(full_shape).regions
    if len(viewed) != 1 or tuple(viewed[0].nelms()) != reshape.out_shape:
        return None
    moved = make_op("Reshape", sample.in_shape, full_shape)
    return [moved, make_op("SettSample", full_shape, viewed[0])]


# ----- X -> Reverse, Sample -> Fill ----------------------------------------------------------
def _region_op_then_reverse(first: ChainOp, reverse: ChainOp) -> list[ChainOp]:
    moved = make_op("Reverse", first.in_shape, reverse.attr)
    return [moved, make_op(first.type, moved.out_shape, first.attr.reverse(reverse.attr))]


def _sample_then_fill(sample: ChainOp, fill: ChainOp) -> list[ChainOp]:
    """Always possible: route through a scaffold holding the input and the zeros."""
    return fill_sample_ops(sample.in_shape, sample_fill_sources(sample.attr, fill.attr))


SWAPS: dict[tuple[str, str], Swap] = {
    ("Expand", "DimShuffle"): _shape_attr_then_dim_shuffle,
    ("Reduce", "DimShuffle"): _shape_attr_then_dim_shuffle,
    ("Reshape", "DimShuffle"): _reshape_then_dim_shuffle,
    ("Reverse", "DimShuffle"): _reverse_then_dim_shuffle,
    ("SettFillInto", "DimShuffle"): _region_op_then_dim_shuffle,
    ("SettSample", "DimShuffle"): _region_op_then_dim_shuffle,
    ("Reduce", "Expand"): _reduce_then_expand,
    ("Reshape", "Expand"): _reshape_then_expand,
    ("Reverse", "Expand"): _reverse_then_expand_or_reduce,
    ("SettFillInto", "Expand"): _fill_then_expand,
    ("SettSample", "Expand"): _sample_then_expand,
    ("Reshape", "Reduce"): _reshape_then_reduce,
    ("Reverse", "Reduce"): _reverse_then_expand_or_reduce,
    ("SettFillInto", "Reduce"): _fill_then_reduce,
    ("SettSample", "Reduce"): _sample_then_reduce,
    ("Reverse", "Reshape"): _reverse_then_reshape,
    ("SettFillInto", "Reshape"): _fill_then_reshape,
    ("SettSample", "Reshape"): _sample_then_reshape,
    ("SettFillInto", "Reverse"): _region_op_then_reverse,
    ("SettSample", "Reverse"): _region_op_then_reverse,
    ("SettSample", "SettFillInto"): _sample_then_fill,
}
