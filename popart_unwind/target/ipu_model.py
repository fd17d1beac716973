"""The IPU Model: the numbers of one IPU and the layout hooks called with them.

Every default is a public figure of the Graphcore Mk2 GC200 IPU or a Poplibs constant, or a
stated assumption; docs/ipu-model.md gives each one's source and what it approximates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from math import prod
from types import MappingProxyType

import numpy as np

from popart_unwind.errors import TargetError
from popart_unwind.target.hooks import (
    MatmulCosts,
    MatmulPartition,
    TileIntervalArrays,
    TileMapping,
    bias_tile_mapping,
    choose_elementwise_output,
    linear_tile_mapping,
    linear_tiles,
    matmul_lhs_mapping,
    matmul_operand_tiles,
    matmul_output_mapping,
    matmul_rhs_mapping,
    plan_matmul,
    sliceable_table_arrays,
    sliceable_table_mapping,
    sliceable_table_tiles,
)

#: Bytes per element of the IR's dtypes (numpy names, as in ``popart_unwind.ir.dtypes``).
DTYPE_SIZES: Mapping[str, int] = MappingProxyType({
    "bool": 1, "uint8": 1, "int8": 1,
    "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
    "uint32": 4, "int32": 4, "float32": 4,
    "uint64": 8, "int64": 8, "float64": 8,
})


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TargetError(f"IpuModel.{name} must be an int, got {value!r}")
    if value < minimum:
        raise TargetError(f"IpuModel.{name} must be at least {minimum}, got {value}")


@lru_cache(maxsize=256)
def _plan(
    groups: int, rows: int, inner: int, cols: int, num_tiles: int, costs: MatmulCosts
) -> MatmulPartition:
    return plan_matmul(groups, rows, inner, cols, num_tiles, costs)


@dataclass(frozen=True)
class IpuModel:
    """One IPU as the planner sees it (defaults: a Mk2 GC200).

    ``tiles_per_ipu`` and ``bytes_per_tile``: 1472 tiles of 624 KiB. ``exchange_bytes_per_cycle``:
    bytes one tile receives per cycle. ``sync_cycles``: assumed cost of one BSP sync.
    ``min_bytes_per_tile`` and ``grain_bytes``: Poplibs' linear mapping puts at least 128 bytes
    on a used tile, in grains of one 64-bit vector. ``macs_per_cycle_half`` / ``_float``:
    multiply-accumulates per tile per cycle of 2-byte and wider operands.
    ``partial_bytes_per_element``: matmul partial sums are float32.
    """

    tiles_per_ipu: int = 1472
    bytes_per_tile: int = 624 * 1024
    exchange_bytes_per_cycle: int = 4
    sync_cycles: int = 90
    min_bytes_per_tile: int = 128
    grain_bytes: int = 8
    macs_per_cycle_half: int = 64
    macs_per_cycle_float: int = 16
    partial_bytes_per_element: int = 4
    dtype_sizes: Mapping[str, int] = field(default_factory=lambda: DTYPE_SIZES, hash=False)

    def __post_init__(self) -> None:
        for name in ("tiles_per_ipu", "bytes_per_tile", "exchange_bytes_per_cycle",
                     "grain_bytes", "macs_per_cycle_half", "macs_per_cycle_float",
                     "partial_bytes_per_element"):
            _check_int(name, getattr(self, name), 1)
        for name in ("sync_cycles", "min_bytes_per_tile"):
            _check_int(name, getattr(self, name), 0)
        if not isinstance(self.dtype_sizes, Mapping) or not self.dtype_sizes:
            raise TargetError(f"IpuModel.dtype_sizes must be a non-empty mapping, "
                              f"got {self.dtype_sizes!r}")
        for dtype, size in self.dtype_sizes.items():
            if not isinstance(dtype, str):
                raise TargetError(f"IpuModel.dtype_sizes keys must be dtype names, got {dtype!r}")
            _check_int(f"dtype_sizes[{dtype!r}]", size, 1)
        # A private read-only copy: the model stays frozen whatever the caller's dict does.
        object.__setattr__(self, "dtype_sizes", MappingProxyType(dict(self.dtype_sizes)))

    # -- per-dtype figures -------------------------------------------------------------------

    def dtype_size(self, dtype: str) -> int:
        """Bytes per element of ``dtype`` (a numpy name such as ``"float16"``)."""
        try:
            return self.dtype_sizes[dtype]
        except (KeyError, TypeError):
            raise TargetError(
                f"unknown dtype {dtype!r}; the IPU model knows {sorted(self.dtype_sizes)}"
            ) from None

    def grain_size(self, dtype: str) -> int:
        """Elements per linear-mapping grain: one 64-bit vector (Poplibs' getVectorWidth)."""
        return max(1, self.grain_bytes // self.dtype_size(dtype))

    def min_elements_per_tile(self, dtype: str) -> int:
        """Fewest elements linear mapping puts on a used tile: ceil(min bytes / element size)."""
        size = self.dtype_size(dtype)
        return -(-self.min_bytes_per_tile // size)

    def macs_per_cycle(self, dtype: str) -> int:
        """Multiply-accumulates per tile per cycle for matmul operands of ``dtype``."""
        if self.dtype_size(dtype) <= 2:
            return self.macs_per_cycle_half
        return self.macs_per_cycle_float

    def matmul_costs(self, dtype: str) -> MatmulCosts:
        """The figures the matmul partition cost uses, for operands of ``dtype``."""
        return MatmulCosts(
            bytes_per_element=self.dtype_size(dtype),
            partial_bytes_per_element=self.partial_bytes_per_element,
            exchange_bytes_per_cycle=self.exchange_bytes_per_cycle,
            macs_per_cycle=self.macs_per_cycle(dtype),
            sync_cycles=self.sync_cycles,
        )

    # -- hooks ---------------------------------------------------------------------------------

    def linear(self, shape: Sequence[int], dtype: str, start_tile: int = 0) -> TileMapping:
        """Linear mapping of a tensor, as ``poputil::mapTensorLinearly`` would lay it out."""
        return linear_tile_mapping(
            _num_elements(shape),
            self.tiles_per_ipu,
            self.grain_size(dtype),
            self.min_elements_per_tile(dtype),
            start_tile,
        )

    def matmul_plan(self, groups: int, rows: int, inner: int, cols: int,
                    dtype: str) -> MatmulPartition:
        """The partition of [G,M,K] x [G,K,N] the model's planner picks (cached)."""
        costs = self.matmul_costs(dtype)
        # Validate before the cache so that bad arguments are never hashed into it.
        return _plan(*_matmul_sizes(groups, rows, inner, cols), self.tiles_per_ipu, costs)

    def matmul_lhs(self, groups: int, rows: int, inner: int, cols: int,
                   dtype: str) -> TileMapping:
        """Mapping of the LHS [G, M, K] for the planned partition."""
        plan = self.matmul_plan(groups, rows, inner, cols, dtype)
        return matmul_lhs_mapping(groups, rows, inner, cols, plan, self.tiles_per_ipu)

    def matmul_rhs(self, groups: int, rows: int, inner: int, cols: int,
                   dtype: str) -> TileMapping:
        """Mapping of the RHS [G, K, N] for the planned partition."""
        plan = self.matmul_plan(groups, rows, inner, cols, dtype)
        return matmul_rhs_mapping(groups, rows, inner, cols, plan, self.tiles_per_ipu)

    def matmul_output(self, groups: int, rows: int, inner: int, cols: int,
                      dtype: str) -> TileMapping:
        """Mapping of the output [G, M, N] for the planned partition."""
        plan = self.matmul_plan(groups, rows, inner, cols, dtype)
        return matmul_output_mapping(groups, rows, inner, cols, plan, self.tiles_per_ipu)

    def bias(self, activation: TileMapping, activation_shape: Sequence[int]) -> TileMapping:
        """Mapping of a bias over the last axis of an activation mapped as ``activation``."""
        self._check_tile_count("activation", activation)
        return bias_tile_mapping(activation, activation_shape)

    def sliceable_table(self, num_entries: int, embedding_size: int,
                        dtype: str) -> TileMapping:
        """Mapping of an embedding table [num_entries, embedding_size] sliced along rows."""
        return sliceable_table_mapping(
            num_entries, embedding_size, self.tiles_per_ipu, self.grain_size(dtype)
        )

    def sliceable_table_arrays(self, num_entries: int, embedding_size: int,
                               dtype: str) -> TileIntervalArrays:
        """:meth:`sliceable_table` as arrays (for real vocabulary sizes)."""
        return sliceable_table_arrays(
            num_entries, embedding_size, self.tiles_per_ipu, self.grain_size(dtype)
        )

    # -- the same hooks as per-element tile arrays (what planning compares) ------------------

    def linear_tiles(self, shape: Sequence[int], dtype: str,
                     start_tile: int = 0) -> tuple[np.ndarray, int]:
        """:meth:`linear` as each element's tile, and the number of tiles it uses."""
        return linear_tiles(_num_elements(shape), self.tiles_per_ipu, self.grain_size(dtype),
                            self.min_elements_per_tile(dtype), start_tile)

    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str) -> np.ndarray:
        """:meth:`matmul_lhs`, :meth:`matmul_rhs` or :meth:`matmul_output` (``operand``
        "lhs", "rhs", "output") as each element's tile."""
        plan = self.matmul_plan(groups, rows, inner, cols, dtype)
        return matmul_operand_tiles(groups, rows, inner, cols, plan, self.tiles_per_ipu,
                                    operand)

    def sliceable_table_tiles(self, num_entries: int, embedding_size: int,
                              dtype: str) -> np.ndarray:
        """:meth:`sliceable_table` as each element's tile."""
        return sliceable_table_tiles(num_entries, embedding_size, self.tiles_per_ipu,
                                     self.grain_size(dtype))

    def elementwise_output(self, inputs: Sequence[TileMapping], shape: Sequence[int]) -> int:
        """Index of the input an elementwise output with these inputs is mapped like."""
        if isinstance(inputs, Sequence) and not isinstance(inputs, str | bytes):
            for index, mapping in enumerate(inputs):
                self._check_tile_count(f"inputs[{index}]", mapping)
        return choose_elementwise_output(inputs, _num_elements(shape))

    def _check_tile_count(self, name: str, mapping: object) -> None:
        if isinstance(mapping, list) and len(mapping) != self.tiles_per_ipu:
            raise TargetError(f"{name} maps {len(mapping)} tiles; the IPU model has "
                              f"{self.tiles_per_ipu}")


def _num_elements(shape: Sequence[int]) -> int:
    if isinstance(shape, str | bytes) or not isinstance(shape, Sequence):
        raise TargetError(f"shape must be a sequence of ints, got {shape!r}")
    for axis, dim in enumerate(shape):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise TargetError(f"shape[{axis}] must be a non-negative int, got {dim!r}")
    return prod(shape)


def _matmul_sizes(*sizes: int) -> tuple[int, ...]:
    for name, value in zip(("groups", "rows", "inner", "cols"), sizes, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TargetError(f"matmul {name} must be a positive int, got {value!r}")
    return sizes


class RotatingLinearMapper:
    """PopART's linear mapper: successive tensors start where the previous one ended.

    ``poputil::calcLinearTileMapping`` always starts at tile 0, so many small tensors mapped
    one after another would all land on tile 0. PopART (``popx::LinearMapper``) keeps a
    next-start-tile counter: each tensor's linear mapping is rotated to start there, and the
    counter then advances by the number of tiles the tensor used, modulo the tile count.
    """

    def __init__(self, model: IpuModel | None = None, start_tile: int = 0) -> None:
        self.model = model if model is not None else IpuModel()
        if isinstance(start_tile, bool) or not isinstance(start_tile, int) or not (
            0 <= start_tile < self.model.tiles_per_ipu
        ):
            raise TargetError(f"start_tile must be an int in [0, {self.model.tiles_per_ipu}), "
                              f"got {start_tile!r}")
        self._next_start_tile = start_tile

    @property
    def next_start_tile(self) -> int:
        """The tile the next tensor's mapping starts on."""
        return self._next_start_tile

    def map(self, shape: Sequence[int], dtype: str) -> TileMapping:
        """Map one tensor linearly from the current start tile, then advance the counter."""
        mapping = self.model.linear(shape, dtype, start_tile=self._next_start_tile)
        tiles_used = sum(1 for intervals in mapping if intervals)
        self._next_start_tile = (self._next_start_tile + tiles_used) % self.model.tiles_per_ipu
        return mapping
