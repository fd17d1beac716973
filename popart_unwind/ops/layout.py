"""How an op type bears on tile layouts: the layout rule each ``OpDef`` carries.

One rule object per op type answers every layout question about that op, so the planner,
the cost model and the PopART baseline never switch on op names:

- ``view_chain`` — for view ops, the exact element map from an input to an output as a
  ``memory.Chain`` (Poplar views: no data moves, the output aliases the input);
- ``unwind`` — what the op contributes to the unwinding problem (seed 001): view ops become
  unwindable ops, matmul operands Sources, elementwise ops SumLike, the rest Barriers;
- ``output_tiles`` — the tile of each output element, derived from the inputs' tiles the way
  Poplar lays out the op's results (views alias; matmul outputs follow the matmul plan;
  elementwise outputs clone the best-balanced input; other results are mapped linearly);
- ``exchange`` — which input elements must reach which tiles before the op computes;
- ``agreement`` — the op's ValuedPairs scored on concrete tiles (any plan, one scale);
- ``creates_input`` — whether PopART would let this op *create* an input's layout (its
  ``Opx::createInput``), with the priority PopART's search ranks creators by.

The base class is the conservative rule for any op the tool does not model (a Barrier,
linear outputs, no exchange counted): see docs/ipu-model.md for what that approximates.
Rules receive the target and the planner's emitter as arguments (protocols below), so this
module depends on neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from popart_unwind.ir.op import Op
    from popart_unwind.ir.tensor import Tensor
    from popart_unwind.memory import Chain
    from popart_unwind.unwind import Graph, TensorId


class TileTarget(Protocol):
    """What rules need of a target, in per-element tile arrays (flat, row-major)."""

    num_tiles: int

    def dtype_size(self, dtype: str) -> int: ...
    def linear_tiles(self, shape: tuple[int, ...], dtype: str) -> np.ndarray: ...
    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str) -> np.ndarray: ...
    def matmul_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray) -> ExchangeNeed: ...
    def bias_tiles(self, activation_tiles: np.ndarray, activation_shape: tuple[int, ...]
                   ) -> np.ndarray: ...
    def broadcast_operand_tiles(self, full_tiles: np.ndarray, full_shape: tuple[int, ...],
                                small_shape: tuple[int, ...]) -> np.ndarray: ...
    def sliceable_tiles(self, num_entries: int, embedding_size: int, dtype: str
                        ) -> np.ndarray: ...
    def elementwise_output(self, input_tiles: list[np.ndarray]) -> int: ...


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


class UnwindEmitter(Protocol):
    """The planner's side of building the unwinding problem from the IR."""

    graph: Graph
    valuations: Any  # options.UnwindValuations

    def tensor(self, tensor: Tensor) -> TensorId: ...
    def define(self, tensor: Tensor, unwind_tensor: TensorId) -> None: ...
    def source(self, tensor: Tensor, tiles: Any, name: str) -> TensorId: ...
    def barrier(self, op: Op) -> None: ...


class LayoutRule:
    """The rule of an op the tool does not model: a barrier with linearly mapped outputs."""

    kind = "barrier"

    def view_chain(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """The element map from input ``in_index`` to output ``out_index``, if a view."""
        return None

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        emitter.barrier(op)

    def output_tiles(self, op: Op, input_tiles: list[np.ndarray | None],
                     target: TileTarget) -> list[np.ndarray]:
        return [target.linear_tiles(t.shape, t.dtype) for t in op.outputs]

    def exchange(self, op: Op, input_tiles: list[np.ndarray | None],
                 output_tiles: list[np.ndarray], target: TileTarget) -> ExchangeNeed:
        """Unmodelled ops are assumed to compute where their operands lie (no exchange)."""
        return ExchangeNeed.none(target.num_tiles)

    def agreement(self, op: Op, input_tiles: list[np.ndarray | None], target: TileTarget,
                  valuations: Any) -> tuple[float, float]:
        """This op's ValuedPairs scored on concrete tiles: (value of equal elements, bound).

        Lets any plan (ours, PopART's, linear) be scored on the planner's own scale."""
        return 0.0, 0.0

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """PopART's creator priority for input ``in_index`` (higher wins), or None."""
        return None


BARRIER = LayoutRule()
