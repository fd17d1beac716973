"""Sliding windows as ONNX states them, shared by the convolutions (``ops/conv.py``) and the
pools (``ops/pools.py``): the window attributes, the output sizes, a window's geometry
(``ConvGeometry``) and which window positions read which input elements.

Output sizes follow ONNX's rule for every window (``pads``, ``strides``, ``dilations``,
``auto_pad``, ``ceil_mode`` for pools, counted as ONNX's own shape inference counts them at
the op's opset, so imported shapes agree: from opset 22 on, a ceil-mode window that would
start in the end padding is dropped, as PyTorch drops it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import input_shape
from popart_unwind.validation import Shape


# -- attributes and output sizes ------------------------------------------------------------
def window_attribute(op: Op, name: str, default: Sequence[int], count: int) -> list[int]:
    """Attribute ``name`` (``default`` when absent), which must hold ``count`` values."""
    values = list(op.attributes.get(name, default))
    if len(values) != count:
        raise ShapeError(f"op {op.debug_name()}: attribute {name} has {len(values)} "
                         f"value(s), expected {count}")
    return values


def shape_window(op: Op, n: int) -> tuple[list[int], list[int], str, list[int]]:
    """Strides, dilations, ``auto_pad`` and pads (lower then upper; zeros unless
    ``auto_pad`` is NOTSET) of a window over ``n`` spatial axes, as the shape rules read
    them."""
    strides = window_attribute(op, "strides", [1] * n, n)
    dilations = window_attribute(op, "dilations", [1] * n, n)
    auto_pad = op.attributes.get("auto_pad", "NOTSET")
    pads = (window_attribute(op, "pads", [0] * 2 * n, 2 * n) if auto_pad == "NOTSET"
            else [0] * 2 * n)
    return strides, dilations, auto_pad, pads


#: The opset from which ONNX's pools ignore a ceil-mode window that would start in the end
#: padding ("Sliding windows that would start in the right padded region are ignored").
DROPS_WINDOWS_IN_END_PADDING_SINCE = 22


def drops_windows_in_end_padding(op: Op) -> bool:
    """Whether a ceil-mode window starting in the end padding is ignored, as PyTorch
    ignores it: ONNX says so from opset 22 on; its earlier pools (and ONNX's inference of
    them) count that window, so models of those opsets keep their shapes."""
    return op.type.version >= DROPS_WINDOWS_IN_END_PADDING_SINCE


def spatial_dims(op: Op, x: tuple[int, ...], kernel: Sequence[int], ceil_mode: bool = False
                 ) -> list[int]:
    """Output sizes of a sliding window over the spatial axes (ONNX conv/pool rule)."""
    n = len(kernel)
    strides, dilations, auto_pad, pads = shape_window(op, n)
    out = []
    for axis, (size, k, s, d) in enumerate(zip(x[2:], kernel, strides, dilations, strict=True)):
        if s < 1 or d < 1:
            raise ShapeError(f"op {op.debug_name()}: strides and dilations must be >= 1")
        window = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-size // s))
            continue
        padded = size + pads[axis] + pads[axis + n]
        if padded < window:
            raise ShapeError(f"op {op.debug_name()}: window {window} is larger than the "
                             f"padded spatial axis {axis} ({padded})")
        count = -(-(padded - window) // s) if ceil_mode else (padded - window) // s
        if ceil_mode and count * s >= size + pads[axis] and drops_windows_in_end_padding(op):
            count -= 1
        out.append(count + 1)
    return out


def spatial_input(op: Op, min_rank: int = 3) -> tuple[int, ...]:
    """The data input's shape, which must be N x C x spatial axes."""
    x = input_shape(op, 0)
    if len(x) < min_rank:
        raise ShapeError(f"op {op.debug_name()}: input must be N x C x spatial..., got {x}")
    return x


def window_attributes(op: Op, n: int) -> tuple[list[int], list[int], list[int]] | None:
    """Strides, dilations and pads (lower then upper) of an op with explicit pads, or None
    for ``auto_pad`` forms the folds leave alone."""
    if op.attributes.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
        return None
    strides = window_attribute(op, "strides", [1] * n, n)
    dilations = window_attribute(op, "dilations", [1] * n, n)
    pads = window_attribute(op, "pads", [0] * 2 * n, 2 * n)
    return (strides, dilations, pads) if min(pads) >= 0 else None


def exactly(values: Any, count: int) -> Shape:
    """``values`` as ints, exactly ``count`` of them (ValueError otherwise): the geometries
    read attributes with this and give up on a mismatch."""
    result = tuple(int(v) for v in values)
    if len(result) != count:
        raise ValueError(f"{count} values expected, got {len(result)}")
    return result


# -- geometry -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    """A convolution's sizes, with ONNX's defaults filled in (``pads`` are the lower pads;
    the upper ones only bound the output, which is given)."""

    batch: int
    in_channels: int
    out_channels: int
    groups: int
    field: Shape
    kernel: Shape
    out_field: Shape
    strides: Shape
    pads: Shape
    dilations: Shape
    dtype: str
    #: Poplibs' input dilation: the data's elements lie this far apart in the field the
    #: windows slide over, zeros between (a transposed convolution's stride); 1 for Conv.
    input_dilation: Shape = ()

    def dilated(self, axis: int) -> int:
        """The input dilation along spatial ``axis`` (1 when none is given)."""
        return self.input_dilation[axis] if self.input_dilation else 1

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """(G, M, K, N) of the im2col matmul."""
        return (self.groups, self.batch * prod(self.out_field),
                self.in_channels // self.groups * prod(self.kernel),
                self.out_channels // self.groups)

    @property
    def input_shape(self) -> Shape:
        return (self.batch, self.in_channels, *self.field)

    @property
    def output_shape(self) -> Shape:
        return (self.batch, self.out_channels, *self.out_field)

    @property
    def bias_shape(self) -> Shape:
        """The bias as it broadcasts against the output: one value per output channel."""
        return (1, self.out_channels) + (1,) * len(self.field)


def row_major_strides(shape: Shape) -> list[int]:
    """Per axis, how far apart (in elements) its neighbours lie in a row-major array."""
    return [prod(shape[axis + 1:]) for axis in range(len(shape))]


# -- which windows read which elements ------------------------------------------------------
def window_positions(kk: Sequence[int], dilations: Sequence[int], count: Sequence[int],
                     strides: Sequence[int]) -> tuple[slice, ...]:
    """The padded positions kernel position ``kk`` meets over ``count`` window positions,
    as an index of an N x C x spatial array."""
    return (slice(None), slice(None), *(
        slice(k * d, k * d + (c - 1) * s + 1, s)
        for k, d, c, s in zip(kk, dilations, count, strides, strict=True)))


def first_readers(size: int, out: int, kernel: int, stride: int, pad: int, dilation: int,
                  input_dilation: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Along one spatial axis: for each input position, the first (lowest) output position
    reading it and the kernel position it is read at; -1 where none reads it. With an
    input dilation the element at position i lies at i·input_dilation of the field the
    windows slide over (a negative ``pad`` crops that field)."""
    position = np.arange(size) * input_dilation
    first = np.full(size, -1, dtype=np.int64)
    at = np.full(size, -1, dtype=np.int64)
    for k in range(kernel - 1, -1, -1):  # a larger kernel position means an earlier output
        shifted = position + pad - k * dilation
        o = shifted // stride
        hit = (first < 0) & (shifted >= 0) & (shifted % stride == 0) & (o < out)
        first[hit], at[hit] = o[hit], k
    return first, at


def first_reads(geometry: ConvGeometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over the data's spatial field, as arrays broadcasting to it: the flat output position
    of the first (row-major) window reading each element, the flat kernel position it is
    read at, and whether any window reads it. Output positions are row-major, so the first
    reader is found axis by axis."""
    n = len(geometry.field)
    out_strides = row_major_strides(geometry.out_field)
    kernel_strides = row_major_strides(geometry.kernel)
    m_part = np.zeros((1,) * n, dtype=np.int64)
    k_part = np.zeros((1,) * n, dtype=np.int64)
    read = np.ones((1,) * n, dtype=bool)
    for axis in range(n):
        first, at = first_readers(geometry.field[axis], geometry.out_field[axis],
                                  geometry.kernel[axis], geometry.strides[axis],
                                  geometry.pads[axis], geometry.dilations[axis],
                                  geometry.dilated(axis))
        shape = [1] * n
        shape[axis] = -1
        m_part = m_part + (first * out_strides[axis]).reshape(shape)
        k_part = k_part + (at * kernel_strides[axis]).reshape(shape)
        read = read & (first >= 0).reshape(shape)
    return m_part, k_part, read


def nearest_read(read: np.ndarray) -> np.ndarray:
    """For each element (flat), itself if read, else the read element before it (the first
    read one for those before any): Poplibs' extension of partial usage to neighbours.
    ``read`` must hold at least one True."""
    nearest = np.where(read, np.arange(read.size), -1)
    np.maximum.accumulate(nearest, out=nearest)
    nearest[nearest < 0] = int(np.argmax(read))
    return nearest


def window_reads(geometry: ConvGeometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over (output position, kernel position) pairs that read a real element (not
    padding, nor a zero of the input dilation): the flat output position, flat kernel
    position and flat spatial offset read."""
    n = len(geometry.field)
    outs = np.indices(geometry.out_field).reshape(n, -1)
    kernel = np.indices(geometry.kernel).reshape(n, -1)
    offset = np.zeros((outs.shape[1], kernel.shape[1]), dtype=np.int64)
    valid = np.ones(offset.shape, dtype=bool)
    for axis, stride in enumerate(row_major_strides(geometry.field)):
        position = ((outs[axis] * geometry.strides[axis] - geometry.pads[axis])[:, None]
                    + (kernel[axis] * geometry.dilations[axis])[None, :])
        step = geometry.dilated(axis)
        valid &= ((position >= 0) & (position % step == 0)
                  & (position // step < geometry.field[axis]))
        offset += position // step * stride
    out_index, kernel_index = np.nonzero(valid)
    return out_index, kernel_index, offset[out_index, kernel_index]
