"""ATen converters for views and indexing: reshapes, permutes, slices, concatenation and
splits, casts, and the ops that read or write at indices (``embedding``, ``index``,
``index_put``, ``scatter``, ``gather``) or pad, written as the ONNX ops PopART would see.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popart_unwind.errors import ModelImportError
from popart_unwind.frontends.aten_table import argument, converts, ints
from popart_unwind.frontends.torch_values import TorchContext


# -- views ------------------------------------------------------------------------------
@converts("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default")
def _reshape(ctx: TorchContext, node, args, kwargs):
    shape = ctx.out_shape(node)
    return ctx.op(node, "Reshape", [args[0], ctx.int_constant(shape)])


@converts("permute.default", "permute_copy.default")
def _permute(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    return ctx.op(node, "Transpose", [args[0]], {"perm": [d % rank for d in ints(args[1])]})


@converts("t.default")
def _t(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    return ctx.op(node, "Transpose", [args[0]], {"perm": list(range(rank))[::-1]})


@converts("transpose.int")
def _transpose(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    perm = list(range(rank))
    a, b = args[1] % rank, args[2] % rank
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.op(node, "Transpose", [args[0]], {"perm": perm})


@converts("unsqueeze.default")
def _unsqueeze(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0])) + 1
    return ctx.op(node, "Unsqueeze", [args[0], ctx.int_constant([args[1] % rank])])


@converts("squeeze.dims", "squeeze.dim", "squeeze.default")
def _squeeze(ctx, node, args, kwargs):
    shape = ctx.shape(args[0])
    if len(args) > 1:
        dims = [args[1]] if isinstance(args[1], int) else list(args[1])
        dims = [d % max(len(shape), 1) for d in dims if shape and shape[d] == 1]
    else:
        dims = [d for d, size in enumerate(shape) if size == 1]
    if not dims:
        return ctx.op(node, "Identity", [args[0]])
    return ctx.op(node, "Squeeze", [args[0], ctx.int_constant(dims)])


@converts("expand.default", "expand_copy.default")
def _expand(ctx, node, args, kwargs):
    return ctx.op(node, "Expand", [args[0], ctx.int_constant(ctx.out_shape(node))])


@converts("slice.Tensor", "slice_copy.Tensor")
def _slice(ctx, node, args, kwargs):
    dim = args[1] if len(args) > 1 else 0
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else np.iinfo(np.int64).max
    step = args[4] if len(args) > 4 else 1
    inputs = [args[0], ctx.int_constant([start]), ctx.int_constant([min(end, 2**62)]),
              ctx.int_constant([dim % len(ctx.shape(args[0]))]), ctx.int_constant([step])]
    return ctx.op(node, "Slice", inputs)


@converts("slice_scatter.default")
def _slice_scatter(ctx, node, args, kwargs):
    """``src`` written over ``input[start:end:step]`` along ``dim`` (the backward of a
    slice). With step 1 the result is the base before the slice, ``src`` and the base after
    it, concatenated (PopART's Concat of Slices); with a larger step every written position
    reads its row of ``src`` through a Gather along ``dim``, and a constant mask of the
    written positions picks between that and the base (Where)."""
    base, src = args[0], args[1]
    shape = ctx.shape(base)
    rank = len(shape)
    dim = argument(args, kwargs, 2, "dim", 0) % rank
    start = argument(args, kwargs, 3, "start", None)
    end = argument(args, kwargs, 4, "end", None)
    step = argument(args, kwargs, 5, "step", 1)
    if step <= 0 or ctx.dtype(src) != ctx.dtype(base):
        return NotImplemented
    size = shape[dim]
    written = range(*slice(start, end, step).indices(size))
    expected = (*shape[:dim], len(written), *shape[dim + 1:])
    if ctx.shape(src) != expected:
        raise ModelImportError(
            f"{node.name} (aten.slice_scatter): src has shape {ctx.shape(src)}, expected "
            f"{expected} (input {shape}, dim {dim}, slice {start}:{end}:{step})")
    if not written:
        return ctx.op(node, "Identity", [base])
    if len(written) == 1 or step == 1:
        first, stop = written[0], written[-1] + 1
        parts = [_axis_slice(ctx, base, dim, 0, first)] if first > 0 else []
        parts.append(src)
        if stop < size:
            parts.append(_axis_slice(ctx, base, dim, stop, size))
        if len(parts) == 1:
            return ctx.op(node, "Identity", [src])
        return ctx.op(node, "Concat", parts, {"axis": dim})
    rows = np.zeros(size, dtype=np.int64)
    rows[list(written)] = np.arange(len(written))
    mask = np.zeros(size, dtype=bool)
    mask[list(written)] = True
    column = [1] * rank
    column[dim] = size
    spread = ctx.op(None, "Gather", [src, ctx.int_constant(rows)], {"axis": dim})
    return ctx.op(node, "Where", [ctx.constant(mask.reshape(column)), spread, base])


def _axis_slice(ctx, tensor, dim: int, start: int, end: int):
    return ctx.op(None, "Slice", [tensor, ctx.int_constant([start]), ctx.int_constant([end]),
                                  ctx.int_constant([dim])])


@converts("select.int")
def _select(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    dim, index = args[1] % rank, args[2] % ctx.shape(args[0])[args[1]]
    sliced = ctx.op(None, "Slice", [args[0], ctx.int_constant([index]),
                                    ctx.int_constant([index + 1]), ctx.int_constant([dim])])
    return ctx.op(node, "Squeeze", [sliced, ctx.int_constant([dim])])


@converts("cat.default")
def _cat(ctx, node, args, kwargs):
    tensors = [t for t in args[0] if ctx.shape(t) != (0,)]
    rank = len(ctx.out_shape(node))
    axis = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % rank
    return ctx.op(node, "Concat", tensors, {"axis": axis})


@converts("split_with_sizes.default", "split.Tensor")
def _split(ctx, node, args, kwargs):
    rank = len(ctx.shape(args[0]))
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % rank
    sizes = [shape[dim] for shape in ctx.out_shapes(node)]
    return ctx.op(node, "Split", [args[0], ctx.int_constant(sizes)], {"axis": dim},
                  num_outputs=len(sizes))


@converts("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
          "contiguous.default")
def _identity(ctx, node, args, kwargs):
    return ctx.op(node, "Identity", [args[0]])


@converts("_to_copy.default", "to.dtype")
def _to_copy(ctx, node, args, kwargs):
    if ctx.dtype(args[0]) == ctx.out_dtype(node):
        return ctx.op(node, "Identity", [args[0]])
    return ctx.op(node, "Cast", [args[0]], {"to": ctx.onnx_dtype(ctx.out_dtype(node))})



# -- indexing -------------------------------------------------------------------------------
@converts("embedding.default")
def _embedding(ctx, node, args, kwargs):
    return ctx.op(node, "Gather", [args[0], args[1]], {"axis": 0})


@converts("index.Tensor")
def _index(ctx, node, args, kwargs):
    """Advanced indexing ``input[..., i, j, ...]`` by integer tensors (None for a whole
    axis), as ONNX's Gather.

    One index tensor on axis d is ``Gather(input, i, axis=d)``: torch's result shape
    ``input[:d] + i.shape + input[d+1:]`` is Gather's. Several index tensors address the
    axes they index together: the indices broadcast against each other, are counted from
    the end where negative, and combine row-major into one index into those axes merged by
    a Reshape, which one Gather reads. torch puts the broadcast index shape where the
    indexed axes were when they are adjacent, and first otherwise, so apart ones are moved
    to the front (Transpose) first. Boolean masks select a data-dependent number of
    elements and stay opaque."""
    data, indices = args[0], list(args[1])
    shape = ctx.shape(data)
    picked = [(axis, index) for axis, index in enumerate(indices) if index is not None]
    if not picked or len(indices) > len(shape) or any(
            ctx.dtype(index) not in ("int64", "int32") for _, index in picked):
        return NotImplemented
    if len(picked) == 1:
        axis, index = picked[0]
        return ctx.op(node, "Gather", [data, index], {"axis": axis})
    axes = [axis for axis, _ in picked]
    if axes != list(range(axes[0], axes[-1] + 1)):
        rest = [axis for axis in range(len(shape)) if axis not in axes]
        data = ctx.op(None, "Transpose", [data], {"perm": axes + rest})
        shape = tuple(shape[axis] for axis in axes + rest)
        axes = list(range(len(axes)))
    first, count = axes[0], len(axes)
    sizes = shape[first:first + count]
    flat = _flat_index(ctx, [index for _, index in picked], sizes)
    merged = (*shape[:first], int(np.prod(sizes, dtype=np.int64)), *shape[first + count:])
    data = ctx.op(None, "Reshape", [data, ctx.int_constant(merged)])
    return ctx.op(node, "Gather", [data, flat], {"axis": first})


def _flat_index(ctx: TorchContext, picked: list, sizes: tuple[int, ...]) -> Any:
    """Index tensors into adjacent axes of ``sizes`` combined row-major into one int64 index
    into those axes merged, each counted from the end where negative (they broadcast)."""
    flat = None
    for position, index in enumerate(picked):
        if ctx.dtype(index) != "int64":
            index = ctx.op(None, "Cast", [index], {"to": ctx.onnx_dtype("int64")})
        negative = ctx.op(None, "Less", [index, ctx.int_constant(0)])
        index = ctx.op(None, "Where", [negative, ctx.op(None, "Add", [
            index, ctx.int_constant(sizes[position])]), index])
        stride = int(np.prod(sizes[position + 1:], dtype=np.int64))
        if stride != 1:
            index = ctx.op(None, "Mul", [index, ctx.int_constant(stride)])
        flat = index if flat is None else ctx.op(None, "Add", [flat, index])
    return flat


@converts("index_put.default", "index_put_.default", "_unsafe_index_put.default")
def _index_put(ctx, node, args, kwargs):
    """``input[i, j, ...] += values`` with ``accumulate=True`` (an embedding's gradient:
    ``embedding_dense_backward`` is ``index_put(zeros, [ids], grad, True)``) as ONNX's
    ScatterND with reduction "add", which accumulates duplicate indices as torch does.

    The index tensors must address the leading axes (no None before or between them):
    one is ScatterND's index column as it is; several broadcast and combine row-major
    into one index into those axes merged by a Reshape (as ``index`` does), the result
    reshaped back. ``values`` broadcast to the indexed shape (Expand). Declined, and kept
    opaque: ``accumulate=False`` (with duplicate indices torch leaves the result
    unspecified, so no op here can be shown to give its values), boolean masks, indices
    on later axes, and values of another dtype."""
    data, indices, values = args[0], list(args[1]), args[2]
    accumulate = bool(argument(args, kwargs, 3, "accumulate", False))
    shape = ctx.shape(data)
    picked = [index for index in indices if index is not None]
    count = len(picked)
    if (not accumulate or not picked or count > len(shape) or len(indices) > len(shape)
            or any(index is None for index in indices[:count])
            or any(ctx.dtype(index) not in ("int64", "int32") for index in picked)
            or ctx.dtype(values) != ctx.dtype(data)):
        return NotImplemented
    try:
        index_shape = tuple(np.broadcast_shapes(*(ctx.shape(index) for index in picked)))
        updates_shape = (*index_shape, *shape[count:])
        if tuple(np.broadcast_shapes(ctx.shape(values), updates_shape)) != updates_shape:
            return NotImplemented
    except ValueError:
        return NotImplemented
    if ctx.shape(values) != updates_shape:
        values = ctx.op(None, "Expand", [values, ctx.int_constant(updates_shape)])
    if count == 1:
        column = ctx.op(None, "Unsqueeze", [picked[0], ctx.int_constant([len(index_shape)])])
        return ctx.op(node, "ScatterND", [data, column, values], {"reduction": "add"})
    flat = _flat_index(ctx, picked, shape[:count])
    if ctx.shape(flat) != index_shape:
        flat = ctx.op(None, "Expand", [flat, ctx.int_constant(index_shape)])
    column = ctx.op(None, "Unsqueeze", [flat, ctx.int_constant([len(index_shape)])])
    merged = (int(np.prod(shape[:count], dtype=np.int64)), *shape[count:])
    table = ctx.op(None, "Reshape", [data, ctx.int_constant(merged)])
    scattered = ctx.op(None, "ScatterND", [table, column, values], {"reduction": "add"})
    return ctx.op(node, "Reshape", [scattered, ctx.int_constant(shape)])


@converts("scatter.value", "scatter.src")
def _scatter(ctx, node, args, kwargs):
    """``input.scatter(dim, index, value_or_src)`` (a cross-entropy's backward writes its
    -1s at the targets this way) as ONNX's ScatterElements, which overwrites as torch
    does; a scalar value is broadcast to the index's shape first (a constant)."""
    data, dim, index, source = args[:4]
    if kwargs.get("reduce") is not None:
        return None
    if isinstance(source, int | float | bool):  # scatter.value
        array = np.full(ctx.shape(index), source, dtype=ctx.dtype(data))
        source = ctx.constant(array)
    return ctx.op(node, "ScatterElements", [data, index, source],
                  {"axis": dim % len(ctx.shape(data))})


@converts("constant_pad_nd.default")
def _constant_pad(ctx, node, args, kwargs):
    """``F.pad(x, pad, value=v)``: torch lists (before, after) pairs from the last axis
    back. Built as Poplar's ``popops::pad`` builds it, a Concat of ``x`` with constant
    blocks of ``v`` along each padded axis (so the result is laid out where ``x`` lies)."""
    data, pad = args[0], list(args[1])
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    shape = list(ctx.shape(data))
    rank = len(shape)
    if len(pad) % 2 or len(pad) > 2 * rank or min(pad, default=0) < 0:
        return None  # cropping (a negative pad) is no pad
    widths = {rank - 1 - pair: (pad[2 * pair], pad[2 * pair + 1])
              for pair in range(len(pad) // 2)}  # axis -> (before, after)
    padded = [axis for axis in sorted(widths) if widths[axis] != (0, 0)]
    result = data
    for count, axis in enumerate(padded):
        before, after = widths[axis]
        parts = []
        for width in (before, after):
            block = np.full([*shape[:axis], width, *shape[axis + 1:]], value,
                            dtype=ctx.dtype(data))
            parts.append(ctx.constant(block) if width else None)
        pieces = [p for p in (parts[0], result, parts[1]) if p is not None]
        result = ctx.op(node if count == len(padded) - 1 else None, "Concat", pieces,
                        {"axis": axis})
        shape[axis] += before + after
    if not padded:
        return ctx.op(node, "Identity", [data])
    return result


@converts("gather.default")
def _gather(ctx, node, args, kwargs):
    return ctx.op(node, "GatherElements", [args[0], args[2]],
                  {"axis": args[1] % len(ctx.shape(args[0]))})

