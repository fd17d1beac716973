"""The IPU Model: the figures of one IPU, each a public figure of the Graphcore Mk2 GC200 or
a Poplibs constant, or a stated assumption (docs/ipu-model.md gives each one's source and
what it approximates), and the per-dtype figures the layout hooks are called with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from popart_unwind import _hooks
from popart_unwind.errors import TargetError
from popart_unwind.machine.reduce_vertices import (
    ReduceWidths,
    gathered_partials_cycles,
    tile_reduce_cycles,
)
from popart_unwind.options import AVAILABLE_MEMORY_PROPORTION
from popart_unwind.validation import check_proportion

#: Bytes per element of the IR's dtypes (numpy names, as in ``popart_unwind.ir.dtypes``).
DTYPE_SIZES: Mapping[str, int] = MappingProxyType({
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
    "uint32": 4, "int32": 4, "float32": 4,
    "uint64": 8, "int64": 8, "float64": 8,
})


#: Graphcore quotes 320 GB/s of IPU-Link bandwidth per GC200 (chip to chip), at a clock of
#: 1.35 GHz: 320·10⁹ / 1.35·10⁹ ≈ 237 bytes per cycle (docs/ipu-model.md).
IPU_LINK_BYTES_PER_CYCLE = 237
#: An exchange step's syncs on one IPU: two of 118 cycles each, as measured on a Mk2 IPU by
#: the ELK artifact's cost model (docs/ipu-model.md).
SYNC_CYCLES = 2 * 118
#: Tiles sharing one exchange bus on a Mk2 IPU (a super tile): Poplibs' planner doubles the
#: rate at which a convolution's input reaches an even split of its output channels, whose
#: tiles it orders in pairs (lib/poplin/ExchangeEstimator.hpp, ``getTilesPerSharedExchangeBus``).
TILES_PER_EXCHANGE_BUS = 2
#: Worker contexts of a tile: a supervisor vertex splits its elements over them, and each
#: runs at a sixth of the tile's issue rate (Poplibs' cycle estimates count them so).
WORKER_CONTEXTS = 6
#: Poplibs' estimate of an elementwise supervisor vertex (``BinaryOp1D``,
#: lib/popops/popopsCycleEstimators.cpp): fixed worker cycles for half and for float
#: operands, and the supervisor's own (``basicOpSupervisorOverhead``).
ELEMENTWISE_WORKER_CYCLES_HALF = 26
ELEMENTWISE_WORKER_CYCLES_FLOAT = 29
ELEMENTWISE_SUPERVISOR_CYCLES = 11
#: Inner loops of Poplibs' elementwise codelets slower than one vector per cycle, as its
#: cycle estimators state them (``unaryOpPerfInfo`` and ``binaryOpPerfInfo`` in
#: lib/popops/popopsCycleEstimators.hpp): popops' operation -> (cycles, elements) of one
#: loop for float and for half operands; the elements are split over the workers and each
#: worker runs ceil(its elements / elements) loops. An operation without an entry (ADD,
#: SUBTRACT, MULTIPLY, a cast, a copy, every int type) runs one vector per loop cycle. Where
#: Poplibs gives cycles for one element without unrolling, its 4 cycles of loop overhead are
#: added.
POPOPS_INNER_LOOPS: Mapping[str, tuple[tuple[int, int], tuple[int, int]]] = MappingProxyType({
    "ABSOLUTE": ((5, 1), (5, 1)),
    "COS": ((2304, 1), (26, 1)),
    "DIVIDE": ((10, 2), (21, 4)),
    "EQUAL": ((14, 4), (9, 4)),
    "ERF": ((18, 1), (16, 1)),
    "EXPONENT": ((6, 2), (4, 4)),
    "GREATER_THAN": ((14, 4), (9, 4)),
    "GREATER_THAN_EQUAL": ((14, 4), (9, 4)),
    "INVERSE": ((6, 2), (15, 4)),
    "LESS_THAN": ((14, 4), (9, 4)),
    "LESS_THAN_EQUAL": ((14, 4), (9, 4)),
    "LOGARITHM": ((12, 2), (4, 4)),
    "MAXIMUM": ((4, 2), (4, 4)),
    "MINIMUM": ((4, 2), (4, 4)),
    "NEGATE": ((2, 2), (2, 4)),
    "NOT_EQUAL": ((20, 4), (11, 4)),
    "POWER": ((312, 1), (325, 1)),
    "RELU": ((3, 2), (3, 4)),
    "RSQRT": ((8, 2), (19, 4)),
    "SIGMOID": ((12, 2), (6, 4)),
    "SIN": ((2304, 1), (26, 1)),
    "SQRT": ((10, 2), (23, 4)),
    "SQUARE": ((2, 2), (2, 4)),
    "TAN": ((5100, 1), (5700, 1)),
    "TANH": ((12, 2), (4, 4)),
})
#: popnn's non-linearity vertices (``NonLinearity1D``) for the ops popops has no operation
#: for: the cycles Poplibs estimates for the first element and for each further vector, in
#: float and in half (``getNonLinearityOpCycles``, lib/popnn/PerformanceEstimation.hpp, which
#: marks the GELU figures as not verified and the GELU_ERF ones as placeholders).
POPNN_NONLINEARITIES: Mapping[str, tuple[tuple[int, int], tuple[int, int]]] = MappingProxyType({
    "GELU": ((10, 10), (5, 5)),
    "GELU_ERF": ((30, 30), (15, 15)),
    "SWISH": ((6, 11), (3, 5)),
})
#: The fixed cycles of ``NonLinearity1D``'s estimate (``nonLinearity1DCycleEstimator``,
#: lib/popnn/popnnCycleEstimators.cpp): the supervisor's, and each worker's before its loop.
NONLINEARITY_SUPERVISOR_CYCLES = 9
NONLINEARITY_WORKER_CYCLES = 20
#: An assumed sync across IPUs before an IpuCopy (docs/ipu-model.md says why this figure).
IPU_COPY_SYNC_CYCLES = 1000


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TargetError(f"IpuModel.{name} must be an int, got {value!r}")
    if value < minimum:
        raise TargetError(f"IpuModel.{name} must be at least {minimum}, got {value}")


@dataclass(frozen=True)
class IpuModel:
    """One IPU as the planner sees it (defaults: a Mk2 GC200).

    ``tiles_per_ipu`` and ``bytes_per_tile``: 1472 tiles of 624 KiB. ``exchange_bytes_per_cycle``:
    bytes one tile receives per cycle. ``sync_cycles``: the syncs of one exchange step.
    ``min_bytes_per_tile`` and ``grain_bytes``: Poplibs' linear mapping puts at least 128 bytes
    on a used tile, in grains of one 64-bit vector. ``macs_per_cycle_half`` / ``_float``:
    multiply-accumulates per tile per cycle of 2-byte and wider operands.
    ``partial_bytes_per_element``: matmul partial sums are float32. ``vertex_costs``: compute
    as Poplibs estimates its vertices (a matmul's AMP, reduce and cast vertices, every other
    op's elementwise vertex: fixed costs beside the core loops), or ``False`` for matmuls'
    multiply-accumulates at peak rate and one vector per cycle elsewhere, nothing fixed (the
    model before those estimates, kept for comparison).
    ``available_memory_proportion``: the share of a tile's bytes a matmul plan may hold as
    temporary data (Poplibs' option, 0.6 by default): its planner takes the quickest
    partition within it, or the one of least temporary memory when none is (0: always).

    ``tiles_per_exchange_bus``: tiles that share one exchange bus (a Mk2 super tile: 2),
    so that the two receive the same data together, each at the rate of one; 1 disables
    the sharing (only pairs are modelled).

    ``ipus``: how many such IPUs the machine joins (an IPU-M2000 holds 4).
    ``ipu_link_bytes_per_cycle`` and ``ipu_copy_sync_cycles``: what an IpuCopy between two
    of them costs (``ipu_copy_cycles``).
    """

    tiles_per_ipu: int = 1472
    bytes_per_tile: int = 624 * 1024
    exchange_bytes_per_cycle: int = 4
    sync_cycles: int = SYNC_CYCLES
    min_bytes_per_tile: int = 128
    grain_bytes: int = 8
    macs_per_cycle_half: int = 64
    macs_per_cycle_float: int = 16
    partial_bytes_per_element: int = 4
    ipus: int = 1
    ipu_link_bytes_per_cycle: int = IPU_LINK_BYTES_PER_CYCLE
    ipu_copy_sync_cycles: int = IPU_COPY_SYNC_CYCLES
    vertex_costs: bool = True
    available_memory_proportion: float = AVAILABLE_MEMORY_PROPORTION
    tiles_per_exchange_bus: int = TILES_PER_EXCHANGE_BUS
    dtype_sizes: Mapping[str, int] = field(default_factory=lambda: DTYPE_SIZES, hash=False)

    def __post_init__(self) -> None:
        for name in ("tiles_per_ipu", "bytes_per_tile", "exchange_bytes_per_cycle",
                     "grain_bytes", "macs_per_cycle_half", "macs_per_cycle_float",
                     "partial_bytes_per_element", "ipus", "ipu_link_bytes_per_cycle"):
            _check_int(name, getattr(self, name), 1)
        for name in ("sync_cycles", "min_bytes_per_tile", "ipu_copy_sync_cycles"):
            _check_int(name, getattr(self, name), 0)
        if self.tiles_per_exchange_bus not in (1, 2):
            raise TargetError(f"IpuModel.tiles_per_exchange_bus must be 1 or 2 (the model "
                              f"pairs tiles), got {self.tiles_per_exchange_bus!r}")
        check_proportion(self.available_memory_proportion,
                         "IpuModel.available_memory_proportion", TargetError)
        if not isinstance(self.vertex_costs, bool):
            raise TargetError(f"IpuModel.vertex_costs must be True or False, "
                              f"got {self.vertex_costs!r}")
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

    def elementwise_cycles(self, elements: int, dtype: str, operation: str | None = None
                           ) -> int:
        """One tile's elementwise vertex over ``elements`` elements of ``dtype``: with
        ``vertex_costs``, Poplibs' BinaryOp1D estimate (the elements split over the six
        workers, one vector per worker cycle after a fixed start, six worker cycles per tile
        cycle, and the supervisor's cycles), each worker's loop as Poplibs states it for
        popops' ``operation`` where it is slower (``POPOPS_INNER_LOOPS``, float32 and
        float16 operands); without, one vector per cycle and nothing fixed. Approximate for
        other ops: docs/ipu-model.md, "Cycles of a step"."""
        if elements <= 0:
            return 0
        vector = self.grain_size(dtype)
        if not self.vertex_costs:
            return -(-elements // vector)
        if operation in POPNN_NONLINEARITIES:
            return self._nonlinearity_cycles(elements, dtype, operation)
        fixed = (ELEMENTWISE_WORKER_CYCLES_HALF if self.dtype_size(dtype) <= 2
                 else ELEMENTWISE_WORKER_CYCLES_FLOAT)
        per_worker = -(-elements // WORKER_CONTEXTS)
        loops = POPOPS_INNER_LOOPS.get(operation or "")
        if loops is not None and dtype in ("float32", "float16"):
            cycles, unrolled = loops[dtype == "float16"]
            inner = -(-per_worker // unrolled) * cycles
        else:
            inner = -(-per_worker // vector)
        return WORKER_CONTEXTS * (fixed + inner) + ELEMENTWISE_SUPERVISOR_CYCLES

    def compound_cycles(self, elements: int, dtype: str,
                        operations: tuple[str | None, ...]) -> int:
        """One tile's vertices run one after another over the same ``elements`` elements,
        one per operation (an op Poplibs builds from several: a softmax, a norm); without
        ``vertex_costs``, one vector per cycle once, as for any op."""
        if not self.vertex_costs:
            return self.elementwise_cycles(elements, dtype)
        return sum(self.elementwise_cycles(elements, dtype, operation)
                   for operation in operations)

    def reduce_cycles(self, outputs: int, partials: int, dtype: str, operation: str,
                      strided: bool) -> int:
        """One tile's first stage of a reduction as Poplibs estimates its reduce vertices
        and splits them over the workers (``reduce_vertices.tile_reduce_cycles``); without
        ``vertex_costs``, nothing beyond the op's one vector per cycle."""
        if not self.vertex_costs:
            return 0
        return tile_reduce_cycles(outputs, partials, strided, self._reduce_widths(dtype),
                                  operation)

    def gathered_partials_cycles(self, outputs: int, partials: int, dtype: str,
                                 operation: str) -> int:
        """One tile reducing partials other tiles sent, gathered into rows as Poplibs
        gathers them (``reduce_vertices.gathered_partials_cycles``); without
        ``vertex_costs``, nothing."""
        if not self.vertex_costs:
            return 0
        return gathered_partials_cycles(outputs, partials, self._reduce_widths(dtype),
                                        operation)

    def _reduce_widths(self, dtype: str) -> ReduceWidths:
        """The partials' vector widths: the input's type (float types take the
        accumulators' widths; Poplibs has no bfloat16 and float8 partials, taken as half's
        and as integers')."""
        return ReduceWidths.of(self.dtype_size(dtype), "float" in dtype)

    def _nonlinearity_cycles(self, elements: int, dtype: str, operation: str) -> int:
        """Poplibs' estimate of popnn's ``NonLinearity1D`` vertex on the aligned path: the
        vectors split over the workers, each worker's pipeline warm-up, its loop and its
        remainder elements (float: one odd element; half: a pair and an odd one). The cost
        of unpacking a vertex's pointers is left out (0 for the layouts Poplar usually
        picks)."""
        is_float = self.dtype_size(dtype) > 2
        first, loop = POPNN_NONLINEARITIES[operation][not is_float]
        width = self.grain_size(dtype)
        vectors, remainder = divmod(elements, width)
        per_worker = -(-vectors // WORKER_CONTEXTS)
        worker = NONLINEARITY_WORKER_CYCLES
        if per_worker:
            worker += 2 + first + (per_worker - 1) * loop + 1 + first
        if is_float:
            worker += 3 + (2 + first) * (remainder & 1)
        else:
            worker += 4 + (2 + first) * bool(remainder & 2) + (3 + first) * (remainder & 1)
        return NONLINEARITY_SUPERVISOR_CYCLES + WORKER_CONTEXTS * worker

    def tile_params(self, dtype: str) -> _hooks.TileParams:
        """Everything the C++ hooks need to lay out a tensor of ``dtype``, as one object."""
        self.dtype_size(dtype)  # an unknown (or unhashable) dtype is a TargetError
        return _tile_params(self, dtype)

    def exchange_cycles(self, busiest_tile_bytes: int) -> int:
        """An exchange step: the busiest tile's bytes at the exchange rate, then a sync."""
        if not busiest_tile_bytes:
            return 0
        return -(-busiest_tile_bytes // self.exchange_bytes_per_cycle) + self.sync_cycles

    def ipu_copy_cycles(self, num_bytes: int) -> int:
        """An IpuCopy of ``num_bytes`` to another IPU: a sync across the IPUs, then the
        bytes over the IPU-Links at their rate (0 when nothing moves)."""
        if not num_bytes:
            return 0
        return -(-num_bytes // self.ipu_link_bytes_per_cycle) + self.ipu_copy_sync_cycles


@lru_cache(maxsize=256)
def _tile_params(model: IpuModel, dtype: str) -> _hooks.TileParams:
    return _hooks.TileParams(
        num_tiles=model.tiles_per_ipu, element_bytes=model.dtype_size(dtype),
        grain_elements=model.grain_size(dtype),
        min_elements_per_tile=model.min_elements_per_tile(dtype),
        partial_bytes_per_element=model.partial_bytes_per_element,
        exchange_bytes_per_cycle=model.exchange_bytes_per_cycle,
        macs_per_cycle=model.macs_per_cycle(dtype), sync_cycles=model.sync_cycles,
        vertex_costs=model.vertex_costs,
        temp_bytes_limit=int(model.available_memory_proportion * model.bytes_per_tile),
        tiles_per_exchange_bus=model.tiles_per_exchange_bus)
