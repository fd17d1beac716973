"""How an op type bears on tile layouts: the base of the layout rule each ``OpDef`` carries.

One rule object per op type answers every layout question about that op, so the planner,
the cost model and the PopART baseline never switch on op names. Each family module
(``ops/views.py``, ``ops/elementwise.py``, ...) subclasses :class:`LayoutRule` next to the
shape rules of its ops. The questions, by who asks them:

- the planner: ``unwind`` — what the op contributes to the unwinding problem (view ops become
  unwindable ops, matmul operands Sources, elementwise ops SumLike, the rest Barriers);
- the cost model (how Poplar lays out the op's results and what it moves): ``output_tiles``,
  ``aliases_outputs``, ``exchange``, ``agreement`` (the op's ValuedPairs scored on concrete
  tiles, so that any plan is scored on the planner's scale), ``work`` (compute cycles, and
  exchange inside the op such as a matmul's partial sums), and ``best_input_tiles`` /
  ``least_received`` (the exchange a plan leaves to save);
- the pipeline's InferShapes, before any of these: ``undecided_operands`` (inputs whose
  values the rule needs but which are not known before running: the model is refused);
- the PopART baseline: ``creates_input`` and ``wanted_input_tiles`` (PopART's
  ``Opx::createInput`` and its priority), ``popart_view`` (the element map PopART's creator
  search follows from an input to an output; ``popart_views`` gives those of all inputs).

This base class is the conservative rule for any op the tool does not model: a Barrier with
linearly mapped outputs and no exchange counted (docs/ipu-model.md says what that
approximates). Rules receive the machine and the planner's emitter as arguments, so this
module depends on neither the IPU Model nor the planner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.machine.hooks import tile_counts
from popart_unwind.machine.interface import ExchangeNeed, TileMachine

if TYPE_CHECKING:
    from popart_unwind.ir.op import Op
    from popart_unwind.ir.tensor import Tensor
    from popart_unwind.memory import Chain, DisjointRegions
    from popart_unwind.unwind import TensorId, UnwindGraph

#: Input layouts by input index (flat, row-major), None where an input is absent or unknown.
InputTiles = Sequence[np.ndarray | None]


class LazyInputTiles(Sequence):
    """An op's input layouts by input index, each asked of ``layout`` only when a rule
    reads it (a rule that maps its results linearly reads none): ``length`` indices,
    ``layout(index)`` the layout or None where the input is absent."""

    def __init__(self, length: int, layout: Callable[[int], np.ndarray | None]) -> None:
        self._length, self._layout = length, layout

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(index)
        return self._layout(index)
#: A layout a root of the unwinding problem carries: flat tiles, or a function of the machine
#: giving them (called only if the planner needs that root's tiles).
RootTiles = np.ndarray | Callable[[TileMachine], np.ndarray]
#: The layout of a producer-less tensor's elements that no path lays out, given a tile
#: preference (a permutation of the tiles, the least filled first) or None (Poplibs' order).
OwnLayout = Callable[[TileMachine, "np.ndarray | None"], np.ndarray]


class UnwindEmitter(Protocol):
    """The planner's side of building the unwinding problem from the IR.

    ``tensor`` is the unwind tensor standing for an IR tensor (every op output must be
    ``define``d by its op's rule); ``source`` and ``fixed_point`` make roots with known
    layouts; ``barrier`` makes the op's outputs (or those of ``outputs``, by output index)
    roots laid out by the rule's ``output_tiles``; ``sink`` makes an op output a tensor
    the solver lays out (call outputs), whose mapping the planner writes back like a
    producer-less tensor's; ``own_layout`` lays out a producer-less tensor that no path
    lays out, instead of the rotating linear mapper.
    """

    graph: UnwindGraph
    valuations: Any  # options.UnwindValuations
    target: TileMachine

    def tensor(self, tensor: Tensor) -> TensorId: ...
    def define(self, tensor: Tensor, unwind_tensor: TensorId) -> None: ...
    def source(self, tensor: Tensor, tiles: RootTiles, name: str) -> TensorId: ...
    def fixed_point(self, inputs: Sequence[TensorId], shapes: Sequence[tuple[int, ...]],
                    tiles: Sequence[RootTiles], name: str) -> list[TensorId]: ...
    def barrier(self, op: Op, outputs: Sequence[int] | None = None) -> None: ...
    def sink(self, tensor: Tensor) -> TensorId: ...
    def own_layout(self, tensor: Tensor, layout: OwnLayout, name: str) -> None: ...


class CalleeLayouts(Protocol):
    """What a walk over the IR knows of the graphs an op calls, for ops that run subgraphs:
    each callee tensor's layout (inputs as planned, outputs as computed), and the plan's
    layout of a tensor if the plan gives one."""

    def tiles(self, tensor: Tensor) -> np.ndarray: ...
    def planned(self, tensor: Tensor) -> np.ndarray | None: ...


class LayoutRule:
    """The rule of an op the tool does not model: a barrier with linearly mapped outputs.

    ``input_tiles[i]`` holds input index ``i``'s layout, and ``output_tiles`` returns one flat
    array per output in index order. ``kind`` names the rule family: "view",
    "elementwise", "matmul", "conv", "gather", "subgraph", "reduction", "norm", "random"
    or "barrier".
    """

    kind = "barrier"
    #: Whether the op runs subgraphs: the cost model then asks ``call_cost`` (with the
    #: callees' layouts) instead of ``output_tiles``, ``exchange`` and ``agreement``.
    runs_subgraphs = False

    # -- the planner -------------------------------------------------------------------------
    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        emitter.barrier(op)

    def undecided_operands(self, op: Op) -> list[int]:
        """The inputs whose values (not only their shapes) the rule must read to lay ``op``
        out and which are not known before running: neither constant nor computed from
        constants and shapes. Planning refuses such an op naming the graph inputs those
        values come from (``ops/shape_folding.refuse_value_dependent_layouts``). A rule that
        can read what it needs off the op's shapes (a reduction's axes, a Split's sizes)
        lists nothing; the base rule reads no values."""
        return []

    def models(self, op: Op) -> bool:
        """Whether this rule models ``op``'s layouts and exchange. The base rule models
        nothing; a family's rule models every op it is given unless it says otherwise (one
        that handles only some forms of its ops, falling back to the base rule's barrier for
        the rest, answers False for those, so that they are listed as ops without a rule)."""
        return type(self) is not LayoutRule

    # -- the cost model ----------------------------------------------------------------------
    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        return [target.linear_tiles(t.shape, t.dtype) for t in op.outputs]

    def aliases_outputs(self, op: Op) -> bool:
        """Whether the outputs are views of the inputs (Poplar views: no new memory)."""
        return False

    def viewed_inputs(self, op: Op) -> list[int]:
        """The input indices whose memory the outputs share when ``aliases_outputs``
        (every input by default; a view of input 0 says so), so that liveness keeps them
        live as long as the view is, and counts their bytes once."""
        return list(op.input_map()) if self.aliases_outputs(op) else []

    def inplace_inputs(self, op: Op) -> list[int]:
        """The inputs whose memory the op's one output may take over, computing in place
        when it is their last reader (PopART's Inplace pattern, on by default, gives most
        elementwise ops an in-place variant; its optimizer updates write into the weight).
        None by default."""
        return []

    def filled_input(self, op: Op) -> int | None:
        """The input the op can make itself, filled with one value at run time, when that
        input is a constant fill (every element equal) nothing else reads: the op's result
        then is that memory, and the fill is no constant held for the whole program. None
        by default."""
        return None

    def updated_weight(self, op: Op) -> int | None:
        """The input index of the weight whose new value ``op`` computes (an optimizer's
        update, written into the weight), or None (the default)."""
        return None

    def exchange(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                 target: TileMachine) -> ExchangeNeed:
        """Unmodelled ops are assumed to compute where their operands lie (no exchange)."""
        return ExchangeNeed.none(target.num_tiles)

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """What the op's tiles spend beyond receiving their inputs. The default is an op that
        computes each element where it lies: its vertices (``vertex_passes``) over its
        busiest tile's elements (of its largest input or output there); views compute
        nothing. An approximation for every op but the matmuls and convolutions
        (docs/ipu-model.md)."""
        if self.aliases_outputs(op):
            return OpWork(0, 0)
        busiest = 0
        for tensor, tiles in [*zip(op.outputs, output_tiles, strict=True),
                              *((op.input(i), input_tiles[i]) for i in self.worked_inputs(op)
                                if i < len(input_tiles) and input_tiles[i] is not None)]:
            flat = np.asarray(tiles).reshape(-1)
            if flat.size:
                counts = tile_counts(flat, target.num_tiles)
                busiest = max(busiest, target.compound_cycles(
                    int(counts.max()), tensor.dtype, self.vertex_passes(op)))
        return OpWork(busiest, 0)

    def popops_operation(self, op: Op) -> str | None:
        """Poplibs' name of the operation the op's vertex computes (popops', or popnn's
        non-linearity), where its inner loop is slower than one vector per cycle
        (``IpuModel.elementwise_cycles``); None: the default vertex."""
        return None

    def vertex_passes(self, op: Op) -> tuple[str | None, ...]:
        """The vertices the op runs one after another over each tile's elements, each named
        as ``popops_operation`` names one: a single vertex, unless Poplibs builds the op
        from several (a softmax, a norm)."""
        return (self.popops_operation(op),)

    def persistent_outputs(self, op: Op) -> bool:
        """Whether the op's results live for the whole program, as a weight does, rather
        than from the op to their last reader (a pipeline's stash buffer)."""
        return False

    def link_bytes(self, op: Op, target: TileMachine) -> int:
        """Bytes the op sends to another IPU over the IPU-Links (an IpuCopy's tensor); 0
        for every op that stays on its IPU."""
        return 0

    def worked_inputs(self, op: Op) -> list[int]:
        """The inputs whose every element the op's default ``work`` visits (all; a lookup
        or an in-place update visits only its indices and rows)."""
        return list(op.input_map())

    def plan_record(self, op: Op, target: TileMachine) -> dict[str, Any] | None:
        """How the op is computed over the tiles, as the plan file records it (matmuls and
        convolutions: their partition), or None for an op without such a plan."""
        return None

    def has_plan(self, op: Op) -> bool:
        """Whether a matmul plan computes the op (a grouped product, a convolution), which
        the op's own memory proportion bounds; False by default."""
        return False

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations: Any) -> tuple[float, float]:
        """This op's ValuedPairs scored on concrete tiles: (value of equal elements, bound).

        Lets any plan (ours, PopART's, linear) be scored on the planner's own scale."""
        return 0.0, 0.0

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """The layout of input ``index`` for which this op receives least, its outputs laid
        out as ``output_tiles``; None when the input's layout changes nothing the op
        receives."""
        return None

    def least_received(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                       planned: set[int], target: TileMachine) -> int:
        """A lower bound on the bytes this op receives over every layout of the inputs in
        ``planned``, the others as ``input_tiles`` — how much exchange a plan leaves to
        save. This default holds for ops whose outputs' layouts do not depend on the
        planned inputs: each planned input as ``best_input_tiles`` wants it."""
        best = list(input_tiles)
        for index in planned:
            wanted = self.best_input_tiles(op, index, output_tiles, target) \
                if index < len(best) else None
            if wanted is not None:
                best[index] = np.asarray(wanted).reshape(-1)
        need = self.exchange(op, best, output_tiles, target)
        return int(np.asarray(need.received_bytes).sum())

    # -- the PopART baseline -----------------------------------------------------------------
    def creates_input(self, op: Op, in_index: int) -> int | None:
        """PopART's creator priority for input ``in_index`` (higher wins), or None when the
        op's Opx cannot create that input."""
        return None

    def wanted_input_tiles(self, op: Op, in_index: int,
                           target: TileMachine) -> np.ndarray | None:
        """The layout the op's Opx creates input ``in_index`` with (flat), or None."""
        return None

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """The element map from input ``in_index`` to output ``out_index`` along which
        PopART's creator search looks for a creator (``Opx::canUnwind``), or None."""
        return None

    def popart_output_finder(self, op: Op, in_index: int
                             ) -> Callable[[DisjointRegions], list[int]] | None:
        """For a rule with many outputs: a function giving, for elements ``reach`` of input
        ``in_index``, the outputs whose view may hold one of them, found without asking
        each output (a Split of k outputs reached from each of k Concat inputs would
        otherwise cost k²). Asked once per op and input; None: every output may."""
        return None

    def popart_output_views(self, op: Op) -> dict[int, dict[int, Chain | None]]:
        """``popart_views`` of every output: the creator search asks once per op."""
        return {out: self.popart_views(op, out) for out in op.output_map()}

    def popart_views(self, op: Op, out_index: int) -> dict[int, Chain | None]:
        """``popart_view`` of every input to output ``out_index`` at once. The creator
        search asks once per op, so a rule whose inputs share work (Concat's offsets) can
        answer for k inputs in time linear in k rather than k times over."""
        return {index: self.popart_view(op, index, out_index) for index in op.input_map()}


@dataclasses.dataclass(frozen=True)
class OpWork:
    """Cycles an op spends beyond receiving its inputs: computing on its busiest tile, and
    exchanging inside the op what no layout decides (a matmul's partial sums)."""

    compute_cycles: int
    partials_cycles: int


BARRIER = LayoutRule()


def output_layouts(rule: LayoutRule, op: Op, input_tiles: InputTiles,
                   target: TileMachine) -> list[np.ndarray]:
    """``rule.output_tiles``, flat and checked: one layout per output, each of its size."""
    outputs = rule.output_tiles(op, input_tiles, target)
    if len(outputs) != len(op.outputs):
        raise PlanError(f"the layout rule of op {op.debug_name()} gave {len(outputs)} output "
                        f"layouts for {len(op.outputs)} outputs")
    flat = []
    for tensor, tiles in zip(op.outputs, outputs, strict=True):
        tiles = np.asarray(tiles).reshape(-1)
        numel = prod(known_shape(op, tensor))
        if tiles.size != numel:
            raise PlanError(f"op {op.debug_name()}: the layout of output {tensor.id!r} has "
                            f"{tiles.size} elements, the tensor {numel}")
        flat.append(tiles)
    return flat


def planned_shape(tensor: Tensor) -> tuple[int, ...]:
    """``tensor``'s shape, or PlanError: planning and costing need every shape."""
    if tensor.shape is None:
        raise PlanError(f"{tensor.describe()} has no known shape{_undecided(tensor)}; "
                        f"layouts need every shape")
    return tensor.shape


def known_shape(op: Op, tensor: Tensor) -> tuple[int, ...]:
    """``tensor``'s shape, or PlanError: layouts need every shape."""
    if tensor.shape is None:
        raise PlanError(f"op {op.debug_name()}: {tensor.id!r} has no known shape"
                        f"{_undecided(tensor)}; layouts need every shape")
    return tensor.shape


def _undecided(tensor: Tensor) -> str:
    """Which op left ``tensor``'s shape open, and what to do about it."""
    if tensor.producer is None:
        return " (give the input a static shape)"
    return (f" (op {tensor.producer.debug_name()} produces it; its shape depends on values "
            f"not known before running, or shape inference has not run)")


def flat_tiles(input_tiles: InputTiles, index: int) -> np.ndarray | None:
    """Input ``index``'s layout as a flat array, or None where it is absent or unknown."""
    tiles = input_tiles[index] if index < len(input_tiles) else None
    return None if tiles is None else np.asarray(tiles).reshape(-1)


#: Elements ``count_equal`` compares at a time (a few MB of mask, not one byte an element).
COUNT_CHUNK = 1 << 22


def count_equal(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements two layouts place on the same tile."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if a.size != b.size:
        return int(np.count_nonzero(a == b))
    return sum(int(np.count_nonzero(a[begin:begin + COUNT_CHUNK] == b[begin:begin + COUNT_CHUNK]))
               for begin in range(0, a.size, COUNT_CHUNK))


def count_equal_rows(a: np.ndarray, b: np.ndarray) -> int:
    """``count_equal`` of two matrices of one shape, ``b`` perhaps a strided view (a
    transposed grid), compared a band of rows at a time: no whole copy or mask is made."""
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"count_equal_rows compares two matrices of one shape, got "
                         f"{a.shape} and {b.shape}")
    band = max(1, COUNT_CHUNK // max(1, a.shape[1]))
    return sum(int(np.count_nonzero(a[row:row + band] == b[row:row + band]))
               for row in range(0, a.shape[0], band))
