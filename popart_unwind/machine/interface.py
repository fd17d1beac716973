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
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from popart_unwind.errors import TargetError
from popart_unwind.machine.transpose import swapped_last_axes
from popart_unwind.validation import check_proportion

#: The tensors of a grouped matmul [G, M, K] x [G, K, N] -> [G, M, N].
MATMUL_OPERANDS = ("lhs", "rhs", "output")
#: The axes of a cube of matmul work [G, M, K, N] each tensor of the cube spans, in the order
#: of its own rows and columns: the LHS [M, K], the RHS [K, N], the output [M, N].
CUBE_TENSORS = {"lhs": "mk", "rhs": "kn", "output": "mn"}
#: The values of Poplibs' ``fullyConnectedPass`` matmul option (lib/poplin/MatMul.cpp).
FC_PASSES = ("NONE", "INFERENCE_FWD", "TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU")
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
    index is ``((g * gK + k) * gN + n) * gM + m``: the row split innermost, as Poplibs orders
    a plan's tiles, so the gM tiles reading one RHS block are neighbours (pairs of them share
    a super tile's exchange bus).
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
        the LHS (activations), the batch split for the RHS (weights), and for the output
        (read as an input by a pass that shares this partition) the inner split."""
        return {"lhs": self.cols, "rhs": self.rows, "output": self.inner}[operand]

    def split(self, axis: str) -> int:
        """The split of cube axis ``axis``: "g", "m", "k" or "n"."""
        return {"g": self.groups, "m": self.rows, "k": self.inner, "n": self.cols}[axis]


@dataclasses.dataclass(frozen=True)
class MatmulCost:
    """What one matmul partition costs on its busiest tile (lib/poplin/ConvModel.cpp's terms,
    simplified; docs/ipu-model.md): multiply-accumulates, the exchange of the operand parts
    a tile does not hold (with a sync), the exchange of partial sums when the inner axis is
    split (with a sync), and the temporary bytes a tile holds in the larger of the two
    phases. ``serial``: the steps Poplibs would run it in to fit its temporary-memory bound
    (each term is their total; the reduction term also holds each further step's sync)."""

    compute_cycles: int
    exchange_cycles: int
    reduction_cycles: int
    temp_bytes: int
    serial: int = 1

    @property
    def cycles(self) -> int:
        return self.compute_cycles + self.exchange_cycles + self.reduction_cycles

    def __add__(self, other: MatmulCost) -> MatmulCost:
        return MatmulCost(self.compute_cycles + other.compute_cycles,
                          self.exchange_cycles + other.exchange_cycles,
                          self.reduction_cycles + other.reduction_cycles,
                          max(self.temp_bytes, other.temp_bytes),
                          max(self.serial, other.serial))


@dataclasses.dataclass(frozen=True)
class MatmulPlan:
    """How one matmul op is computed: a partition of a cube of work [G, M, K, N], and which
    cube axes the op's own rows, inner (reduced) axis and columns are (``axes``).

    A matmul planned alone is its own cube (``axes`` "mkn"). The three passes of a fully
    connected layer planned together, as Poplibs' ``fullyConnectedPass`` does, share the
    forward pass's cube and partition: the backward pass computes [M, N] x [N, K] ("mnk"),
    the weight update [K, M] x [M, N] ("kmn"), so each tile computes the same block of the
    cube in every pass and each tensor of the layer is laid out once for all three (an op
    may also compute a pass with its operands swapped, e.g. "nmk" for the weight gradient
    transposed). ``fc_pass`` is the pass's name in Poplibs' option; ``joint`` whether the
    layer's passes share the partition (Poplibs' joint plan) or were planned separately.
    ``start_tile`` is where the partition's tiles begin: tile ``t`` of the partition is
    machine tile ``(t + start_tile) mod num_tiles`` (Poplibs' dithering moves a plan's
    start tile the same way; without it every plan starts at tile 0).
    ``memory_proportion`` is the share of a tile's memory the plan's temporary data may
    take when its op sets one of its own (PopART's per-op availableMemoryProportion);
    None: the machine's (the session's).
    """

    cube: tuple[int, int, int, int]
    partition: MatmulPartition
    axes: str = "mkn"
    fc_pass: str = "NONE"
    joint: bool = False
    start_tile: int = 0
    memory_proportion: float | None = None

    def __post_init__(self) -> None:
        if sorted(self.axes) != ["k", "m", "n"]:
            raise TargetError(f"a matmul plan's axes name m, k and n once each, got "
                             f"{self.axes!r}")
        if self.fc_pass not in FC_PASSES:
            raise TargetError(f"fc_pass must be one of {FC_PASSES}, got {self.fc_pass!r}")
        if self.start_tile < 0:
            raise TargetError(f"a plan's start tile is a tile id, got {self.start_tile}")
        if self.memory_proportion is not None:
            check_proportion(self.memory_proportion, "a plan's memory proportion", TargetError)

    @property
    def dims(self) -> tuple[int, int, int, int]:
        """The op's own (G, rows, inner, cols)."""
        return pass_dims(self.cube, self.axes)

    @property
    def own_partition(self) -> MatmulPartition:
        """The partition as the op's own matmul sees it."""
        return MatmulPartition(self.partition.groups,
                               *(self.partition.split(axis) for axis in self.axes))

    @property
    def shared_operand(self) -> str:
        """The op's operand that is the cube's RHS, which the tiles of the cube's row split
        read as neighbouring pairs (over shared exchange buses when that split is even):
        "rhs" when the op's rows are the cube's (a forward or backward pass, a matmul
        planned alone), "lhs" when its columns are, else "none" (a weight update)."""
        return {self.axes[0]: "rhs", self.axes[2]: "lhs"}.get("m", "none")

    def cube_tensor(self, operand: str) -> tuple[str, bool]:
        """Which cube tensor the op's ``operand`` is (:func:`cube_tensor`)."""
        return cube_tensor(self.axes, operand)

    def describe(self) -> dict[str, object]:
        """The plan as the plan file records it."""
        g, m, k, n = self.partition.as_tuple()
        return {"partition": {"groups": g, "rows": m, "inner": k, "cols": n},
                "cube": list(self.cube), "axes": self.axes,
                "fully_connected_pass": self.fc_pass, "joint": self.joint,
                "start_tile": self.start_tile,
                **({} if self.memory_proportion is None
                   else {"available_memory_proportion": self.memory_proportion})}

    def starting_at(self, start_tile: int) -> MatmulPlan:
        """This plan with its tiles beginning at ``start_tile``."""
        return dataclasses.replace(self, start_tile=start_tile)

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


def pass_dims(cube: Sequence[int], axes: str) -> tuple[int, int, int, int]:
    """The (G, rows, inner, cols) of the pass with cube axes ``axes`` over ``cube``."""
    size = dict(zip("mkn", cube[1:], strict=True))
    return (cube[0], *(size[axis] for axis in axes))  # type: ignore[return-value]


def cube_tensor(axes: str, operand: str) -> tuple[str, bool]:
    """Which cube tensor the ``operand`` ("lhs", "rhs", "output") of a pass with cube axes
    ``axes`` is, and whether the pass holds it transposed (its last two axes swapped)."""
    rows, inner, cols = axes
    own = {"lhs": rows + inner, "rhs": inner + cols, "output": rows + cols}[operand]
    for name, spans in CUBE_TENSORS.items():
        if set(spans) == set(own):
            return name, spans != own
    raise TargetError(f"cube axes {axes!r} are not a permutation of 'mkn'")


def plan_operand_tiles(target: TileMachine, plan: MatmulPlan, operand: str,
                       dtype: str) -> np.ndarray:
    """Where ``plan`` wants its op's ``operand`` ("lhs", "rhs", "output"), flat, in the op's
    own grouped orientation ([G, M, K], [G, K, N] or [G, M, N] of ``plan.dims``): the cube
    tensor it is, laid out by the cube's partition, transposed where the op holds it so.
    A transposed or moved layout is a new array, which one op asks for several times: it
    is remembered while a caller holds it (read-only, like every remembered answer)."""
    name, transposed = plan.cube_tensor(operand)

    def cube_layout() -> np.ndarray:
        return np.asarray(target.matmul_tiles(*plan.cube, dtype, name, plan.partition))

    if not transposed and not plan.start_tile % target.num_tiles:
        return cube_layout()
    return target.remembered(  # type: ignore[return-value]
        ("plan operand tiles", plan, operand, dtype),
        lambda: rotated_tiles(_cube_oriented(cube_layout().reshape(-1), plan, name,
                                             transposed, to_cube=False),
                              plan.start_tile, target.num_tiles), kept=False)


def plan_operand_readers(target: TileMachine, plan: MatmulPlan, operand: str, dtype: str,
                         tiles: np.ndarray) -> ExchangeNeed:
    """What the tiles of ``plan`` receive of its op's ``operand`` laid out as ``tiles``
    (flat, the op's own grouped orientation). The plan's pairs of tiles share exchange buses
    when it starts on an even tile (a super tile's first); a plan run in serial steps
    receives its RHS once per step (``MatmulCost.serial``)."""
    name, transposed = plan.cube_tensor(operand)
    cube_tiles = _cube_oriented(np.asarray(tiles).reshape(-1), plan, name, transposed,
                                to_cube=True)
    shared = plan.start_tile % 2 == 0
    if not plan.start_tile:
        need = target.matmul_readers(*plan.cube, dtype, name, cube_tiles, plan.partition,
                                     shared)
    else:
        # A start tile relabels the tiles: count in the plan's own labels, then move back.
        own = rotated_tiles(cube_tiles, -plan.start_tile, target.num_tiles)
        moved = target.matmul_readers(*plan.cube, dtype, name, own, plan.partition, shared)
        need = ExchangeNeed(*(rotated_per_tile(values, plan.start_tile)
                              for values in moved.arrays()))
    if operand == "rhs":
        steps = target.matmul_cost(*plan.dims, dtype, plan.own_partition,
                                   plan.shared_operand, plan.memory_proportion).serial
        if steps > 1:
            need = ExchangeNeed(need.received_bytes * steps, need.regions * steps)
    return need


def on_shared_buses(target: TileMachine, plan: MatmulPlan) -> bool:
    """Whether ``plan``'s cube RHS reaches its readers in super-tile pairs over shared
    exchange buses: an even row split (its readers neighbours, the row split innermost)
    starting on a super tile's first tile, on a machine whose buses are shared by two."""
    return (target.tiles_per_exchange_bus == 2 and plan.start_tile % 2 == 0
            and plan.partition.rows % 2 == 0)


def layout_free_operand(target: TileMachine, plan: MatmulPlan, operand: str) -> bool:
    """Whether the bytes ``plan``'s tiles receive of its op's ``operand`` total the same
    wherever the operand lies: the cube's RHS broadcast from where it lies (at most
    ``REARRANGE_ABOVE_DESTINATIONS`` readers, so no rearrangement copy) to pairs on shared
    buses (``on_shared_buses``). Each pair of readers then receives its block once between
    them (what a tile holds its partner receives in full, what neither holds both receive
    at half cost), so a layout only moves bytes between the two tiles of a pair."""
    name, _ = plan.cube_tensor(operand)
    return (name == "rhs" and on_shared_buses(target, plan)
            and plan.partition.rows <= REARRANGE_ABOVE_DESTINATIONS)


def rotated_tiles(tiles: np.ndarray, start_tile: int, num_tiles: int) -> np.ndarray:
    """Tile ids moved ``start_tile`` tiles on, around the machine (in ``tiles``' dtype).

    Ids of the machine, in a dtype that holds twice its tile count, move in that dtype: an
    add and a subtraction where the sum passes the last tile (a 64-bit copy and a modulo
    took a real embedding table's layout four times as long); any other ids through 64-bit
    arithmetic."""
    shift = start_tile % num_tiles
    if not shift:
        return tiles
    ids = np.asarray(tiles)
    if ids.dtype.kind in "iu" and ids.size and np.iinfo(ids.dtype).max >= 2 * num_tiles \
            and int(ids.min()) >= 0 and int(ids.max()) < num_tiles:
        moved = ids + ids.dtype.type(shift)
        moved -= (moved >= num_tiles) * ids.dtype.type(num_tiles)
        return moved
    moved = (np.asarray(ids, dtype=np.int64) + start_tile) % num_tiles
    return moved.astype(ids.dtype)


def rotated_per_tile(values: np.ndarray, start_tile: int) -> np.ndarray:
    """A per-tile array whose tile ``t`` becomes tile ``t + start_tile`` (around)."""
    return np.roll(values, start_tile)


def _cube_oriented(tiles: np.ndarray, plan: MatmulPlan, name: str, transposed: bool,
                   to_cube: bool) -> np.ndarray:
    """A cube tensor's flat layout moved between the cube's orientation and the op's (a
    new array when they differ: ``swapped_last_axes``, in C++ at real sizes)."""
    if not transposed:
        return tiles
    rows, cols = (plan.cube["mkn".index(axis) + 1] for axis in CUBE_TENSORS[name])
    if to_cube:
        rows, cols = cols, rows
    return swapped_last_axes(tiles, plan.cube[0], rows, cols)


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
    #: IPUs joined by IPU-Links, ``num_tiles`` tiles each: a tensor lies on the tiles of
    #: its IPU, named by the same ids on every IPU (Poplar's virtual graphs).
    num_ipus: int

    @abc.abstractmethod
    def reset(self) -> None:
        """Restart the linear mapper's rotation at tile 0."""

    @property
    @abc.abstractmethod
    def next_start_tile(self) -> int:
        """The tile the next linear mapping starts on."""

    @abc.abstractmethod
    def rotated_to(self, start_tile: int) -> TileMachine:
        """A copy answering as this machine does, whose linear mapper starts on
        ``start_tile`` (its own rotation from there on)."""

    @property
    def tiles_per_exchange_bus(self) -> int:
        """Tiles that receive the same data together over one shared exchange bus (1: none
        share)."""
        return 1

    @abc.abstractmethod
    def dtype_size(self, dtype: str) -> int:
        """Bytes of one element of ``dtype`` (a numpy name such as ``"float16"``)."""

    @abc.abstractmethod
    def exchange_cycles(self, busiest_tile_bytes: int) -> int:
        """Cycles of one exchange step in which the busiest tile receives this many bytes
        (0 when nothing moves)."""

    @abc.abstractmethod
    def ipu_copy_cycles(self, num_bytes: int) -> int:
        """Cycles of an IpuCopy moving ``num_bytes`` to another IPU (0 when nothing
        moves)."""

    @abc.abstractmethod
    def receive_cycles(self, num_bytes: int) -> int:
        """Cycles a tile takes to receive ``num_bytes`` within an exchange step (no sync)."""

    @abc.abstractmethod
    def vector_elements(self, dtype: str) -> int:
        """Elements of ``dtype`` a tile's vector unit processes per cycle."""

    @abc.abstractmethod
    def elementwise_cycles(self, elements: int, dtype: str, operation: str | None = None
                           ) -> int:
        """Cycles of one tile's vertex computing ``elements`` elements of ``dtype`` where
        they lie (0 for none); ``operation``: Poplibs' name of what it computes (popops'
        EXPONENT, DIVIDE, ..., popnn's GELU), for operations slower than one vector per
        cycle."""

    def compound_cycles(self, elements: int, dtype: str,
                        operations: tuple[str | None, ...]) -> int:
        """Cycles of one tile's vertices run one after another over the same elements, one
        per operation (a softmax, a norm: ``LayoutRule.vertex_passes``)."""
        return sum(self.elementwise_cycles(elements, dtype, operation)
                   for operation in operations)

    def reduce_cycles(self, outputs: int, partials: int, dtype: str, operation: str,
                      strided: bool) -> int:
        """Cycles of one tile reducing what it holds: ``outputs`` outputs of ``partials``
        inputs each, side by side or (``strided``) one row of many outputs after another;
        ``operation``: popops' (ADD, SQUARE_ADD, MAX, MIN, MUL). This default: none beyond
        the op's elementwise vertex (``compound_cycles``)."""
        return 0

    def gathered_partials_cycles(self, outputs: int, partials: int, dtype: str,
                                 operation: str) -> int:
        """Cycles of one tile reducing the partials other tiles sent it: ``outputs``
        outputs of ``partials`` partials each. This default: none."""
        return 0

    @abc.abstractmethod
    def remembered(self, key: tuple, compute: Callable[[], Answer],
                   kept: bool = True) -> Answer:
        """``compute()``'s answer, computed once per key and read-only thereafter: rules
        ask the same matmul, table and convolution questions for every layer. ``kept``
        False: an array remembered only while a caller still holds it (one op asks for
        it several times; a store of them would take too much memory)."""

    @abc.abstractmethod
    def forget(self) -> None:
        """Drop the answers ``remembered`` keeps (asked again, they are computed again):
        a finished plan that keeps its target need not keep them too."""

    @abc.abstractmethod
    def linear_tiles(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        """A linear mapping starting where the previous one ended."""

    @abc.abstractmethod
    def reduction_result_tiles(self, num_elements: int, dtype: str) -> np.ndarray:
        """Where a reduction puts results whose inputs lie on several tiles (Poplibs'
        ``popops::reduce`` maps them linearly from tile 0); no rotation."""

    @abc.abstractmethod
    def indices_tiles(self, count: int, preference: np.ndarray | None = None) -> np.ndarray:
        """Where popops lays out ``count`` lookup indices it creates: linearly from tile 0,
        at least a few per tile; no rotation. ``preference`` (a permutation of the tiles)
        fills the tiles in its order instead of by id."""

    @abc.abstractmethod
    def matmul_plan(self, groups: int, rows: int, inner: int, cols: int,
                    dtype: str, memory_proportion: float | None = None) -> MatmulPartition:
        """How [G,M,K] x [G,K,N] is cut over the tiles when planned alone (the cheapest
        partition). ``memory_proportion`` (here and below): the share of a tile's memory
        its temporary data may take, when not the machine's (an op's own)."""

    @abc.abstractmethod
    def matmul_candidates(self, cube: Sequence[int], dtype: str,
                          passes: Sequence[str] = ("mkn",),
                          count: int = 1,
                          memory_proportion: float | None = None) -> list[MatmulPartition]:
        """The ``count`` partitions of the cube [G,M,K,N] with the fewest cycles summed
        over ``passes`` (each a ``MatmulPlan.axes``), best first."""

    @abc.abstractmethod
    def matmul_cost(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                    partition: MatmulPartition, shared: str = "rhs",
                    memory_proportion: float | None = None) -> MatmulCost:
        """What [G,M,K] x [G,K,N] costs cut as ``partition``; ``shared``: its operand read
        over shared exchange buses where its split is even (``MatmulPlan.shared_operand``;
        "rhs" for a matmul planned alone)."""

    @abc.abstractmethod
    def rearrangement_cycles(self, elements: int, dtype: str, tiles_used: int) -> int:
        """Cycles of copying a tensor of ``elements`` into a new layout over ``tiles_used``
        tiles: exchange and on-tile copy of each tile's share (Poplibs' transform
        estimate)."""

    @abc.abstractmethod
    def matmul_tiles(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                     operand: str, partition: MatmulPartition | None = None) -> np.ndarray:
        """Where a matmul cut as ``partition`` (default: the cheapest) wants ``operand``
        ([G,M,K], [G,K,N] or the output [G,M,N])."""

    @abc.abstractmethod
    def matmul_readers(self, groups: int, rows: int, inner: int, cols: int, dtype: str,
                       operand: str, tiles: np.ndarray,
                       partition: MatmulPartition | None = None,
                       shared_buses: bool = True) -> ExchangeNeed:
        """What the tiles of a matmul cut as ``partition`` receive of ``operand`` laid out
        as ``tiles`` (in grouped [G,M,K] / [G,K,N] / [G,M,N] order) before they compute:
        "lhs" and "rhs" as read by the matmul itself, "output" as read by a pass sharing
        the partition, whose tiles read output block (g, m, n) along the inner split.
        ``shared_buses``: the partition's tile pairs are super tiles."""

    @abc.abstractmethod
    def chosen_plan(self, key: tuple[str, int]) -> MatmulPlan | None:
        """The plan chosen for the op ``key`` ((graph id, op id)) by the plans this machine
        was given (``with_plans``), or None: the op is planned alone."""

    @abc.abstractmethod
    def with_plans(self, plans: Mapping[tuple[str, int], MatmulPlan]) -> TileMachine:
        """This machine, answering ``chosen_plan`` from ``plans`` (sharing what it has
        remembered)."""

    @abc.abstractmethod
    def broadcast_operand_tiles(self, full_tiles: np.ndarray, full_shape: Sequence[int],
                                small_shape: Sequence[int],
                                preference: np.ndarray | None = None,
                                any_reader: bool = False) -> np.ndarray:
        """The layout of an operand numpy-broadcast against a tensor laid out as
        ``full_tiles`` (a bias against its activations); ``preference`` (a permutation of
        the tiles) breaks ties between equally good tiles instead of the lowest id. With
        ``any_reader`` every tile reading an element is equally good (each receives it
        once, so any reader leaves the same bytes to exchange): the elements read by the
        same tiles are spread over them in runs, the most preferred first."""

    @abc.abstractmethod
    def sliceable_tiles(self, num_entries: int, embedding_size: int, dtype: str) -> np.ndarray:
        """The layout of an embedding table [entries, size] sliced along its rows."""

    @abc.abstractmethod
    def elementwise_output(self, input_tiles: Sequence[np.ndarray]) -> int:
        """The index of the input an elementwise result is laid out like."""
