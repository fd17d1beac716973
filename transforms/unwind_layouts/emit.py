"""Building the unwinding problem from the IR: the emitter the layout rules write through.

The emitter is an interpreter over the IR (``ir.interpreter``) whose result for each IR
tensor is the unwind tensor standing for it. Every graph is walked once, callees before
their callers (a call's copy-outs read the subgraph's outputs), each in schedule order. A
graph's producer-less tensors (Stream, Variable and Const tensors, subgraph inputs) become
Sinks first; then each op's layout rule (``OpDef.layout``) adds what the op means and
defines the unwind tensor of every output.
The emitter remembers what the realization needs later: the layout each Source and
FixedPoint carries, the IR op behind each Barrier output, and which Sinks stand for which
IR tensors (producer-less tensors and call outputs, whose mappings are written back).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from popart_unwind.errors import PlanError
from popart_unwind.ir import Ir
from popart_unwind.ir.interpreter import CALLEES_FIRST, Interpreter, key
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops.layout_rule import OwnLayout, RootTiles, planned_shape
from popart_unwind.ops.registry import OpRegistry
from popart_unwind.unwind import TensorId, UnwindGraph

Progress = Callable[[str, int, int], None]


class BarrierRecord:
    """The IR op behind a Barrier's outputs, and the unwind tensor of each op input."""

    __slots__ = ("inputs", "op", "position")

    def __init__(self, op: Op, position: int, inputs: dict[int, TensorId]) -> None:
        self.op, self.position, self.inputs = op, position, inputs


class Emitter(Interpreter):
    """Implements ``ops.layout_rule.UnwindEmitter`` over one UnwindGraph for a whole Ir."""

    order = CALLEES_FIRST

    def __init__(self, target: TileMachine, valuations: Any, registry: OpRegistry,
                 tick: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.graph = UnwindGraph()
        self.target = target
        self.valuations = valuations
        self.registry = registry
        self._tick = tick
        #: IR tensors whose mapping the plan writes, each with its Sink, in emission order.
        self.planned: list[tuple[Tensor, TensorId]] = []
        self._owner: dict[TensorId, Tensor] = {}
        #: The layouts of Sources and FixedPoint outputs.
        self.root_tiles: dict[TensorId, RootTiles] = {}
        self.barriers: dict[TensorId, BarrierRecord] = {}
        self.root_names: dict[TensorId, str] = {}
        #: Layouts for Sinks that no path lays out, by the rule that asked first, and
        #: what each is.
        self.own_layouts: dict[TensorId, OwnLayout] = {}
        self.own_layout_names: dict[TensorId, str] = {}

    # -- the UnwindEmitter protocol ------------------------------------------------------
    def tensor(self, tensor: Tensor) -> TensorId:
        return self.read(tensor)

    def missing(self, tensor: Tensor) -> Exception:
        where = f"produced by {tensor.producer.debug_name()}" if tensor.producer else \
            "with no producer"
        return PlanError(f"tensor {tensor.qualified_id!r} ({where}) is read before the planner has "
                         f"defined it (its graph or producer was not emitted first)")

    def define(self, tensor: Tensor, unwind_tensor: TensorId) -> None:
        if key(tensor) in self.env:
            raise PlanError(f"tensor {tensor.qualified_id!r} is defined twice in the unwinding "
                            f"problem")
        expected = planned_shape(tensor)
        if self.graph.shape(unwind_tensor) != expected:
            raise PlanError(f"tensor {tensor.qualified_id!r} of shape {expected} is defined by "
                            f"{unwind_tensor!r} of shape {self.graph.shape(unwind_tensor)}")
        self.write(tensor, unwind_tensor)
        if self.graph.kind(unwind_tensor) == "sink" and unwind_tensor not in self._owner:
            self._owner[unwind_tensor] = tensor
            self.planned.append((tensor, unwind_tensor))

    def sink(self, tensor: Tensor) -> TensorId:
        made = self.graph.sink(planned_shape(tensor), name=tensor.qualified_id)
        self.define(tensor, made)
        return made

    def source(self, tensor: Tensor, tiles: RootTiles, name: str) -> TensorId:
        made = self.graph.source(planned_shape(tensor), name=name)
        self.root_tiles[made] = tiles
        self.root_names[made] = f"the layout {name} wants (Source)"
        return made

    def fixed_point(self, inputs: Sequence[TensorId], shapes: Sequence[tuple[int, ...]],
                    tiles: Sequence[RootTiles], name: str) -> list[TensorId]:
        if len(tiles) != len(shapes):
            raise PlanError(f"fixed point {name!r}: {len(shapes)} outputs but "
                            f"{len(tiles)} layouts")
        made = self.graph.fixed_point(list(inputs), list(shapes), name=name)
        for tensor, layout in zip(made, tiles, strict=True):
            self.root_tiles[tensor] = layout
            self.root_names[tensor] = f"{name} (FixedPoint)"
        return made

    def barrier(self, op: Op, outputs: Sequence[int] | None = None) -> None:
        """The op's outputs (all, or those whose output index ``outputs`` lists) become
        roots that depend on every input."""
        inputs = {index: self.tensor(t) for index, t in op.input_map().items()}
        present = op.output_map()
        chosen = {i: t for i, t in present.items() if outputs is None or i in outputs}
        made = self.graph.barrier(list(dict.fromkeys(inputs.values())),
                                  [planned_shape(t) for t in chosen.values()],
                                  name=op.debug_name())
        positions = {i: position for position, i in enumerate(present)}
        for (index, tensor), root in zip(chosen.items(), made, strict=True):
            self.barriers[root] = BarrierRecord(op, positions[index], inputs)
            self.root_names[root] = f"output {tensor.qualified_id!r} of {op.debug_name()} (Barrier)"
            self.define(tensor, root)

    def own_layout(self, tensor: Tensor, layout: OwnLayout, name: str) -> None:
        """Lay out ``tensor``'s Sink with ``layout`` (``name`` says what it is) when no
        path lays out any of it; the first rule to ask decides."""
        sink = self.tensor(tensor)
        if self.graph.kind(sink) != "sink":
            raise PlanError(f"tensor {tensor.qualified_id!r} is not a Sink; only a Sink's own "
                            f"elements can be given a layout")
        if sink not in self.own_layouts:
            self.own_layouts[sink] = layout
            self.own_layout_names[sink] = name

    # -- queries ---------------------------------------------------------------------------
    def owner(self, sink: TensorId) -> Tensor | None:
        """The IR tensor a Sink stands for (None for sinks rules made for themselves)."""
        return self._owner.get(sink)

    def describe(self, tensor: TensorId) -> str:
        """What an origin is, for explanations."""
        owner = self._owner.get(tensor)
        if owner is not None:
            return f"the linearly mapped part of {owner.qualified_id!r}"
        if tensor in self.root_names:
            return self.root_names[tensor]
        if self.graph.kind(tensor) == "sum_like_reduce":
            return "the broadcast-operand layout of an elementwise partner (SumLikeReduce)"
        return f"{self.graph.kind(tensor)} {tensor!r}"

    # -- the walk (ir.interpreter) -----------------------------------------------------
    def placeholder(self, tensor: Tensor) -> None:
        """A producer-less tensor becomes a Sink (``sink`` defines it)."""
        self.sink(tensor)

    def run_op(self, op: Op) -> None:
        for tensor in op.inputs:
            planned_shape(tensor)
        self.registry.layout_rule(op).unwind(op, self)
        for tensor in op.outputs:
            if key(tensor) not in self.env:
                raise PlanError(f"the layout rule of {op.debug_name()} did not define its "
                                f"output {tensor.qualified_id!r}")
        if self._tick is not None:
            self._tick()


def emit_ir(ir: Ir, target: TileMachine, valuations: Any, registry: OpRegistry,
            progress: Progress | None = None) -> Emitter:
    """The unwinding problem of the whole Ir."""
    total = sum(len(g.ops) for g in ir.graphs)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None and (done % 64 == 0 or done == total):
            progress("emit", done, total)

    if progress is not None:
        progress("emit", 0, total)
    emitter = Emitter(target, valuations, registry, tick)
    emitter.run(ir)
    return emitter
