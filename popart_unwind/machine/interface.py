"""The tile machine: what the op rules, the planner and the cost model ask of a target.

A tile machine is many tiles, each with its own memory, that exchange data between compute
steps; tensors are laid out by giving each element a tile. Layouts travel as flat arrays of
tile ids (row-major, one per element), where views are numpy views and comparisons are
vectorised; Poplar's own per-tile interval format is written only at the end
(``popart_unwind.ir.tile_mapping``).

The questions are those Poplibs answers when PopART lowers a model: where ``mapTensorLinearly``
puts a tensor, how a matmul is cut over tiles and where it wants its operands
(``createMatMulInputLHS/RHS``), where a broadcast operand goes (``createBroadcastOperand``),
where an embedding table goes (``createSliceableTensor``), which input an elementwise result is
laid out like, and what a matmul's tiles must receive given an operand's actual layout.
``popart_unwind.machine.TileTarget`` answers them for the IPU Model.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

#: The tensors of a grouped matmul [G, M, K] x [G, K, N] -> [G, M, N].
MATMUL_OPERANDS = ("lhs", "rhs", "output")
#: Poplibs' convolution copies an operand into the plan's own layout before broadcasting it
#: when more tiles than this read each of its elements (``inViewMaxBroadcastDests`` and
#: ``weightViewMaxBroadcastDests`` in lib/poplin/Convolution.cpp).
REARRANGE_ABOVE_DESTINATIONS = 7
#: A remembered answer: one array, or several computed together.
Answer = np.ndarray | tuple[np.ndarray, ...]


@dataclasses.dataclass(frozen=True)
class MatmulPartition:
    """How many parts each axis of a grouped matmul [G,M,K] x [G,K,N] is cut into.

    ``groups`` (gG), ``rows`` (gM, the convolution's batch), ``inner`` (gK, the reduced input
    channels) and ``cols`` (gN, the output channels). Tile (g, m, k, n) computes one part; its
    index is ``((g * gM + m) * gN + n) * gK + k``.
    """

    groups: int
    rows: int
    inner: int
    cols: int

    @property
    def tiles_used(self) -> int:
        return self.groups * self.rows * self.inner * self.cols

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.groups, self.rows, self.inner, self.cols)

    def broadcast_destinations(self, operand: str) -> int:
        """How many tiles read each element of ``operand``: the output-channel split for
        the LHS (activations), the batch split for the RHS (weights)."""
        return self.cols if operand == "lhs" else self.rows


class ExchangeNeed:
    """Data one op needs moved before it computes: per receiving tile, bytes and regions.

    ``received_bytes[t]`` is what tile t must receive; ``regions[t]`` the number of distinct
    contiguous pieces it receives them in (each piece costs exchange code).
    """

    __slots__ = ("received_bytes", "regions")

    def __init__(self, received_bytes: np.ndarray, regions: np.ndarray) -> None:
        self.received_bytes = received_bytes
        self.regions = regions

    @classmethod
    def none(cls, num_tiles: int) -> ExchangeNeed:
        return cls(np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64))

    def __add__(self, other: ExchangeNeed) -> ExchangeNeed:
        return ExchangeNeed(self.received_bytes + other.received_bytes,
                            self.regions + other.regions)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(received bytes, regions): the form a machine's answer cache keeps."""
        return self.received_bytes, self.regions


class TileMachine(abc.ABC):
    """The questions a layout rule may ask of the machine, answered in flat tile arrays.

    Linear mappings rotate (each starts where the previous one ended, as PopART's linear
    mapper does), so answers depend on the order of calls; ``reset()`` restarts the rotation
    and every walk that maps tensors linearly does so in a deterministic order.
    """

    #: Tiles of the machine; tile ids lie in [0, num_tiles).
    num_tiles: int
    #: Bytes of memory on each tile.
    bytes_per_tile: int
    #: The narrowest integer type that holds a tile id.
    tile_dtype: np.dtype

    @abc.abstractmethod
    def reset(self) -> None:
        """Restart the linear mapper's rotation at tile 0."""

    @abc.abstractmethod
    def dtype_size(self, dtype: str) -> int:
        """Bytes of one element of ``dtype`` (a numpy name such as ``"float16"``)."""

    @abc.abstractmethod
    def exchange_cycles(self, busiest_tile_bytes: int) -> int:
        """Cycles of one exchange step in which the busiest tile receives this many bytes
        (0 when nothing moves)."""

    @abc.abstractmethod
    def remembered(self, key: tuple, compute: Callable[[], Answer]) -> Answer:
        """``compute()``'s answer, computed once per key and read-only thereafter: rules
        ask the same matmul, table and convolution questions for every layer."""

    @abc.abstractmethod
    def linear_tiles(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        """A linear mapping starting where the previous one ended."""

    @abc.abstractmethod
    def reduction_result_tiles(self, num_elements: int, dtype: str) -> np.ndarray:
        """Where a reduction puts results whose inputs lie on several tiles (Poplibs'
        ``popops::reduce`` maps them linearly from tile 0); no rotation."""

    @abc.abstractmethod
    def matmul_plan(self, groups: int, rows: int, inner: int, cols: int,
                    dtype: str) -> MatmulPartition:
        """How [G,M,K] x [G,K,N] is cut over the tiles."""

    @abc.abstractmethod
    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str) -> np.ndarray:
        """Where the matmul plan wants ``operand`` ([G,M,K], [G,K,N] or the output)."""

    @abc.abstractmethod
    def matmul_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray) -> ExchangeNeed:
        """What the matmul's tiles receive of ``operand`` ("lhs" or "rhs") laid out as
        ``tiles`` (in grouped [G,M,K] / [G,K,N] order) before they compute."""

    @abc.abstractmethod
    def broadcast_operand_tiles(self, full_tiles: np.ndarray, full_shape: Sequence[int],
                                small_shape: Sequence[int],
                                preference: np.ndarray | None = None) -> np.ndarray:
        """The layout of an operand numpy-broadcast against a tensor laid out as
        ``full_tiles`` (a bias against its activations); ``preference`` (a permutation of
        the tiles) breaks ties between equally good tiles instead of the lowest id."""

    @abc.abstractmethod
    def sliceable_tiles(self, num_entries: int, embedding_size: int, dtype: str) -> np.ndarray:
        """The layout of an embedding table [entries, size] sliced along its rows."""

    @abc.abstractmethod
    def elementwise_output(self, input_tiles: Sequence[np.ndarray]) -> int:
        """The index of the input an elementwise result is laid out like."""
