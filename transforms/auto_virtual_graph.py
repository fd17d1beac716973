"""AutoVirtualGraph: PopART's automatic split of a model over IPUs.

After PopART's ``AutoVirtualGraph`` (``willow/src/transforms/auto_virtual_graph.cpp``, with
``Op::calcAutoVirtualGraphCost``), for ``SessionOptions.virtual_graph_mode = auto``. PopART
runs it on the forward graph, before the backward pass exists; so does this transform on
the forward ops (those the loss depends on; every op of a graph without a loss):

- **cost of an op**: the bytes of its Variable and Const inputs (a weight read by two ops
  counts twice), plus, in a training step, the bytes of its other inputs and of its
  outputs that the backward pass reads (PopART: what its grad ops take from the forward
  pass, ``GradOpInType::In`` and ``Out``; here the backward ops present in the graph say
  it). No compute, no liveness, no temporaries;
- **subgraphs**: starting from each op reading a streamed input, ops are walked in
  schedule order; an op joins the subgraph of the op whose output it reads, and an op
  reading from a second subgraph starts one of its own. Where a subgraph's pending ops
  narrow to one op, that op is a **split point** (its subgraph's cost so far remembered);
- **weights as PopART sees them**: a result made of weights alone (a traced linear
  layer's transposed weight, which PopART's ONNX input holds as the weight itself) counts
  as its weights, is left out of the walk and goes with the op reading it;
- **cuts**: IPU i (1 ≤ i < N) ends where the cost so far reaches i/N of the total
  (``virtual_graph_split_ratios``: the running sum of the ratios), at the split point
  nearest that share among the first at or above it and the one before (none at or
  above: the subgraph's end). The split op stays on the earlier IPU.

Ops outside the forward pass are placed afterwards. PopART's grad ops copy their forward
op's IPU; its other new ops (updates, gradient sums) inherit the placement of the nearest
op, a weight's update going to the lowest IPU reading the weight. A traced training step
has no record of which forward op a backward op differentiates, so ``place_backward``
places each by what it reads (docs/multi-ipu.md): one op per cut may land on the IPU
before where PopART would put it.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from popart_unwind.errors import TransformError
from popart_unwind.ir.tensor import TensorType
from popart_unwind.ir.weights import is_weight, is_weight_op, weight_derived
from popart_unwind.machine.ipu_model import DTYPE_SIZES
from popart_unwind.training import loss_forward_ops

from .base import Transform
from .conditions import Condition
from .registry import AUTO_VIRTUAL_GRAPH, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Op, Tensor
    from popart_unwind.ops import OpRegistry
    from popart_unwind.options import SessionOptions
    from popart_unwind.rewrite import Rewriter

#: A split of the forward pass: (forward ops, their ids, training?) -> op id -> IPU.
ForwardSplitter = Callable[[list["Op"], set[int], bool], dict[int, int]]


@dataclasses.dataclass(frozen=True)
class SplitTransform(Transform):
    """A split of the main graph over IPUs: runs under ``virtual_graph_mode = auto`` when
    ``SessionOptions.auto_split`` names it, places the forward pass by ``forward_split``
    and the backward pass by ``place_backward``. Guarantees VGRAPH and keeps the rest."""

    auto_split: ClassVar[str] = ""
    assumes = frozenset({Condition.SHAPES_KNOWN})
    guarantees = frozenset({Condition.VGRAPH})
    preserves = frozenset({Condition.NO_INPLACE, Condition.NO_IPU_COPY, Condition.PSTAGE,
                           Condition.EPHASE, Condition.BPHASE, Condition.SHAPES_KNOWN})

    def forward_split(self, options: SessionOptions) -> ForwardSplitter:
        raise NotImplementedError

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        options = graph.ir.options
        if options.virtual_graph_mode != "auto" or options.auto_split != self.auto_split:
            return False
        return apply_split(graph, rewriter, self.op_registry, self.forward_split(options))


@register
@dataclasses.dataclass(frozen=True)
class AutoVirtualGraph(SplitTransform):
    """Place every main-graph op on one of ``SessionOptions.ipus`` IPUs by PopART's rule
    (module docstring). Does nothing unless ``virtual_graph_mode`` is ``auto`` and
    ``auto_split`` is ``popart``; a placement already on the model is replaced, as
    PopART's is.

    Guarantees every main-graph op a virtual graph id (VGRAPH); raises TransformError when
    the model has too few split points for the IPUs."""

    id = 10
    name = AUTO_VIRTUAL_GRAPH
    auto_split = "popart"

    def forward_split(self, options: SessionOptions) -> ForwardSplitter:
        return lambda forward, ids, training: split_forward(
            forward, ids, training, options.ipus, options.virtual_graph_split_ratios)


def apply_split(graph: Graph, rewriter: Rewriter, registry: OpRegistry,
                split: ForwardSplitter) -> bool:
    """Place the main graph's forward pass by ``split``, then its backward pass
    (``place_backward``), through ``rewriter``; whether anything changed."""
    ir = graph.ir
    main = ir.main_graph
    schedule = main.schedule()
    loss = ir.final_loss_id
    training = loss is not None and main.has_tensor(loss)
    forward = loss_forward_ops(main, main.tensor(loss)) if training else schedule
    forward_ids = {op.id for op in forward}
    placement = split(forward, forward_ids, training)
    place_backward(schedule, forward_ids, placement, registry)
    for op in schedule:
        rewriter.set_placement(op, "vgraph_id", placement[op.id])
    return rewriter.changes > 0


def op_cost(op: Op, forward_ids: set[int], training: bool,
            derived: dict[str, tuple[Tensor, ...]] | None = None) -> int:
    """PopART's ``costFn`` of a forward op (module docstring), in bytes; a result made of
    weights alone (``derived``: a transposed weight) counts as its weights."""
    derived = derived or {}
    seen: set[str] = set()
    cost = 0
    for tensor in op.inputs:
        weights = [tensor] if is_weight(tensor) else derived.get(tensor.id, ())
        cost += sum(nbytes(w) for w in weights)  # a weight read twice counts twice
        if weights:
            seen.add(tensor.id)
    if not training:
        return cost
    for tensor in dict.fromkeys(op.inputs):
        if tensor.id not in seen and _read_backward(tensor, forward_ids):
            cost += nbytes(tensor)
            seen.add(tensor.id)
    for tensor in op.outputs:
        if _read_backward(tensor, forward_ids):
            cost += nbytes(tensor)
    return cost


def _read_backward(tensor: Tensor, forward_ids: set[int]) -> bool:
    return any(reader.id not in forward_ids for reader in tensor.consumers)


def nbytes(tensor: Tensor) -> int:
    """A tensor's bytes (4 per element of a dtype the IPU Model does not know)."""
    return tensor.nelms() * DTYPE_SIZES.get(tensor.dtype, 4)


@dataclasses.dataclass
class _Subgraph:
    """Ops fed from one start, the split points found in them, and the IPU they are on."""

    cost: int = 0
    pending: set[int] = dataclasses.field(default_factory=set)
    #: cost of the subgraph up to and including the split op -> the op (a later op of
    #: the same cost replaces an earlier one, as PopART's map does)
    split_points: dict[int, int] = dataclasses.field(default_factory=dict)
    cuts: set[int] = dataclasses.field(default_factory=set)
    ipu: int = 0
    has_been_split: bool = False

    def best_split(self, wanted: float) -> int | None:
        """The split op nearest ``wanted`` among the first at or above it and the one
        before (PopART's ``lower_bound`` and its predecessor); None when none lies at or
        above. The op chosen is no split point any more."""
        costs = sorted(self.split_points)
        at = bisect.bisect_left(costs, wanted)
        if at == len(costs):
            return None
        if at > 0 and wanted - costs[at - 1] < costs[at] - wanted:
            at -= 1
        return self.split_points.pop(costs[at])


def split_forward(forward: list[Op], forward_ids: set[int], training: bool, ipus: int,
                  ratios: tuple[float, ...] = ()) -> dict[int, int]:
    """op id -> IPU of each forward op (module docstring)."""
    if ipus == 1:
        return {op.id: 0 for op in forward}
    derived = weight_derived(forward)
    walked = [op for op in forward if not is_weight_op(op, derived)]
    walked_ids = {op.id for op in walked}
    subgraphs: list[_Subgraph] = []
    member: dict[int, int] = {}

    def start(op_id: int) -> int:
        subgraphs.append(_Subgraph(pending={op_id}))
        member[op_id] = len(subgraphs) - 1
        return member[op_id]

    for op in walked:
        for tensor in op.inputs:
            if tensor.tensor_type is TensorType.STREAM and op.id not in member:
                start(op.id)
    total = 0
    for op in walked:
        cost = op_cost(op, forward_ids, training, derived)
        total += cost
        index = member[op.id] if op.id in member else start(op.id)
        subgraph = subgraphs[index]
        subgraph.cost += cost
        if op.id in subgraph.pending:
            subgraph.pending.discard(op.id)
            if not subgraph.pending:
                subgraph.split_points[subgraph.cost] = op.id
        for tensor in op.outputs:
            for reader in tensor.consumers:
                if reader.id not in walked_ids:
                    continue
                other = member.get(reader.id)
                if other is None or other == index:
                    member[reader.id] = index
                    subgraph.pending.add(reader.id)
                elif len(subgraphs[other].pending) == 1 and subgraphs[other].cost == 0:
                    subgraphs[other].pending.discard(reader.id)
                    member[reader.id] = index
                    subgraph.pending.add(reader.id)
                else:
                    start(reader.id)
    _cut(subgraphs, total, ipus, ratios)
    placement = {}
    for op in walked:
        subgraph = subgraphs[member[op.id]]
        placement[op.id] = subgraph.ipu
        if op.id in subgraph.cuts:
            subgraph.ipu += 1
    place_with_readers(forward, placement)
    return placement


def place_with_readers(ops: list[Op], placement: dict[int, int]) -> None:
    """Each op of ``ops`` (schedule order) ``placement`` leaves out goes to the lowest IPU
    among its results' placed readers (IPU 0 without one): a transposed weight with the
    layer that reads it."""
    for op in reversed(ops):
        if op.id not in placement:
            readers = [placement[r.id] for t in op.outputs for r in t.consumers
                       if r.id in placement]
            placement[op.id] = min(readers) if readers else 0


def _cut(subgraphs: list[_Subgraph], total: int, ipus: int,
         ratios: tuple[float, ...]) -> None:
    """Give each subgraph its first IPU and its cut ops (PopART's loop over IPUs)."""
    consumed, ipu, index, share = 0, 0, 0, 0.0
    for i in range(1, ipus + 1):
        share = share + ratios[i - 1] / sum(ratios) if ratios else i / ipus
        split_cost = share * total
        while index < len(subgraphs):
            subgraph = subgraphs[index]
            above = subgraph.cost + consumed > split_cost and subgraph.cost > 0
            at_end = subgraph.cost + consumed == split_cost
            if above and i != ipus:
                op_id = subgraph.best_split(split_cost - consumed)
                if op_id is not None:
                    subgraph.cuts.add(op_id)
                    if not subgraph.has_been_split:
                        subgraph.ipu = ipu
                    subgraph.has_been_split = True
                    ipu += 1
                    break
                at_end = True
            consumed += subgraph.cost
            index += 1
            if not subgraph.has_been_split:
                subgraph.ipu = ipu
            if at_end and i != ipus and index != len(subgraphs):
                ipu += 1
                break
    if ipu != ipus - 1:
        raise TransformError(f"AutoVirtualGraph found places to cut the model for {ipu + 1} "
                             f"IPU{'s' if ipu else ''}, not {ipus}: it splits where a "
                             f"subgraph's data narrows to one op, by the bytes of weights "
                             f"and saved activations")


def place_backward(schedule: list[Op], forward_ids: set[int], placement: dict[int, int],
                   registry: OpRegistry) -> None:
    """Place each op outside the forward pass that ``placement`` leaves unplaced:

    - a weight's update on the lowest IPU of the weight's forward readers (as PopART);
      an op reading weights (directly or through views and casts) where they live, the
      highest such IPU; an op whose results reach the update of one weight alone (its
      gradient) with that weight;
    - an op reading activations (forward results that depend on the model's inputs or
      weights, not masks made of constants; and views of activations, which the
      backward pass takes early) or streamed inputs on an IPU
      using every one of them (making or reading it in the forward pass; an input, where
      its lowest forward reader is), the highest such IPU not above the IPU of the
      gradients it reads (the backward pass goes down the IPUs: a layer's gradient reads
      a table of the first IPU, a rotary embedding's, that every layer reads): its
      layer's (an embedding's gradient with the lookup, reading its indices);
    - an op reading only gradients (results of this pass that depend on activations) on
      the IPU of the one made last: a residual sum goes with the branch just
      differentiated, not with the gradient handed down from the layer above;
    - an op reading neither (a mask of the labels) with its first reader.
    """
    activation = _activations(schedule, forward_ids)
    position = {op.id: k for k, op in enumerate(schedule)}
    updates = _updates_fed(schedule, forward_ids, placement, registry)
    gradient: set[str] = set()
    apart = []
    for op in schedule:
        if op.id in forward_ids:
            continue
        updated = registry.layout_rule(op).updated_weight(op)
        choice = placement.get(op.id)
        if choice is None and updated is not None:
            choice = _lowest_reader(op.input(updated), forward_ids, placement)
        if choice is None:
            choice = max((ipu for t in _weights_viewed(op, registry)
                          if (ipu := _lowest_reader(t, forward_ids, placement)) is not None),
                         default=None)
        if choice is None and len(updates.get(op.id, ())) == 1:
            (choice,) = updates[op.id]
        if choice is None:
            choice = _layer_ipu(op, activation, gradient, forward_ids, placement)
        if choice is None:
            read = [(position[t.producer.id], placement[t.producer.id]) for t in op.inputs
                    if t.id in gradient]
            choice = max(read)[1] if read else None
        if choice is None:
            apart.append(op)
            continue
        placement[op.id] = choice
        view = registry.layout_rule(op).kind == "view" and all(
            t.id in activation or t.producer is None for t in op.inputs)
        (activation if view else gradient).update(t.id for t in op.outputs)
    for op in reversed(apart):
        readers = [placement[r.id] for t in op.outputs for r in t.consumers
                   if r.id in placement]
        placement[op.id] = min(readers) if readers else 0


def place_unplaced(graph: Graph, loss: Tensor | None, registry: OpRegistry) -> dict[int, int]:
    """op id -> IPU of every op of ``graph``, keeping the placement its ops have and
    completing it as PopART's grad ops and PopTorch's blocks would: a forward op without
    one on the IPU of the latest-scheduled placed op whose result it reads (else of the
    forward op before it: a block goes on until the next begins; IPU 0 before the first),
    one computing from weights alone with its reader; the backward pass by
    ``place_backward``."""
    schedule = graph.schedule()
    forward = loss_forward_ops(graph, loss) if loss is not None else schedule
    forward_ids = {op.id for op in forward}
    placement = {op.id: op.settings.vgraph_id for op in schedule
                 if op.settings.has("vgraph_id")}
    position = {op.id: k for k, op in enumerate(schedule)}
    derived = weight_derived(forward)
    previous = 0
    for op in forward:
        if is_weight_op(op, derived):
            continue  # with its reader, below
        if op.id not in placement:
            producers = [t.producer for t in op.inputs
                         if t.producer is not None and t.producer.id in placement]
            latest = max(producers, key=lambda p: position[p.id], default=None)
            placement[op.id] = previous if latest is None else placement[latest.id]
        previous = placement[op.id]
    place_with_readers(forward, placement)
    place_backward(schedule, forward_ids, placement, registry)
    return placement


def _layer_ipu(op: Op, activation: set[str], gradient: set[str], forward_ids: set[int],
               placement: dict[int, int]) -> int | None:
    """The IPU of the layer a backward op reading activations or inputs differentiates
    (``place_backward``), or None if it reads neither."""
    used = [_used_on(t, forward_ids, placement) for t in op.inputs if t.id in activation]
    used += [{ipu} for t in op.inputs if t.producer is None
             and t.tensor_type is TensorType.STREAM
             and (ipu := _lowest_reader(t, forward_ids, placement)) is not None]
    if not used:
        return None
    candidates = set.intersection(*used) or set.union(*used)
    below = [placement[t.producer.id] for t in op.inputs if t.id in gradient]
    if below:
        within = [ipu for ipu in candidates if ipu <= max(below)]
        return max(within or candidates)
    return max(candidates)


def _weights_viewed(op: Op, registry: OpRegistry) -> list[Tensor]:
    """The weights ``op`` reads, directly or through views and casts (a transposed weight,
    a float16 weight in float32); not what is computed from weights (a rotary
    embedding's table), which can be copied."""
    found = []
    for tensor in op.inputs:
        while tensor.producer is not None and tensor.producer.has_input(0) and (
                tensor.producer.type.name == "Cast"
                or registry.layout_rule(tensor.producer).kind == "view"):
            tensor = tensor.producer.input(0)
        if tensor.producer is None and tensor.tensor_type is TensorType.VARIABLE:
            found.append(tensor)
    return found


def _used_on(tensor: Tensor, forward_ids: set[int], placement: dict[int, int]) -> set[int]:
    """The IPUs making or reading an activation in the forward pass."""
    return {placement[tensor.producer.id],
            *(placement[r.id] for r in tensor.consumers if r.id in forward_ids)}


def _updates_fed(schedule: list[Op], forward_ids: set[int], placement: dict[int, int],
                 registry: OpRegistry) -> dict[int, set[int]]:
    """op id -> the IPU of the one weight whose update each backward op's results alone
    lead to (a weight's IPU: the lowest of its forward readers), for the updates and a
    weight's gradient; an op leading to several weights' updates (an input's gradient,
    which the backward pass carries on through the layers before) is not in it."""
    weights_reached: dict[int, set[str]] = {}
    weight_ipu: dict[str, int | None] = {}
    for op in reversed(schedule):
        if op.id in forward_ids:
            continue
        found: set[str] = set()
        updated = registry.layout_rule(op).updated_weight(op)
        if updated is not None:
            weight = op.input(updated)
            weight_ipu[weight.id] = _lowest_reader(weight, forward_ids, placement)
            found = {weight.id}
        for tensor in op.outputs:
            for reader in tensor.consumers:
                found |= weights_reached.get(reader.id, set())
        weights_reached[op.id] = found
    return {op_id: {ipu} for op_id, found in weights_reached.items() if len(found) == 1
            and (ipu := weight_ipu[next(iter(found))]) is not None}


def _lowest_reader(tensor: Tensor, forward_ids: set[int], placement: dict[int, int]
                   ) -> int | None:
    readers = [placement[r.id] for r in tensor.consumers if r.id in forward_ids]
    return min(readers) if readers else None


def _activations(schedule: list[Op], forward_ids: set[int]) -> set[str]:
    """Ids of the forward results that depend on a streamed input or a weight."""
    found: set[str] = set()
    for op in schedule:
        if op.id in forward_ids and any(
                t.id in found or t.tensor_type in (TensorType.STREAM, TensorType.VARIABLE)
                for t in op.inputs):
            found.update(t.id for t in op.outputs)
    return found
