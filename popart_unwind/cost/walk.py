"""The cost walk: what a plan costs on the IPU Model, op by op and tile by tile.

Given a tile for every element of every producer-less tensor (a plan), every other tensor's
tiles are derived the way Poplar lays them out (each op's layout rule: views alias, matmul
outputs follow the matmul plan, elementwise outputs clone an input, the rest linear), and
each op is charged for the data its tiles must receive before it computes. The same walk
scores the plan on the planner's own objective (the rules' ``agreement``), so our plan,
PopART's and a linear one compare on one scale. The walk decides layouts and what each op
is charged (``cost/charges.py``); the memory it holds is booked in ``cost/memory.py``.
docs/ipu-model.md states every assumption.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from popart_unwind.cost.charges import NO_WORK, Charges
from popart_unwind.cost.layouts import (
    Mappings,
    ReadOnDemand,
    expanded,
    given_tiles,
    held,
    held_results,
    numel,
    producerless_mappings,
)
from popart_unwind.cost.memory import Residency
from popart_unwind.cost.placement import Placement
from popart_unwind.cost.report import CostReport
from popart_unwind.cost.terms import totals
from popart_unwind.errors import PlanError
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.interpreter import CALLEES_FIRST, Interpreter, Key, key
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.names import ACCUM_PREFIX, is_optimizer_state
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ir.tile_mapping import TileIntervals
from popart_unwind.machine import TileTarget
from popart_unwind.machine.count_memo import read_only, remembered_counts, same_values
from popart_unwind.machine.interface import ExchangeNeed, MatmulPlan, TileMachine
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import InputTiles, LayoutRule, output_layouts
from popart_unwind.rewrite.constant_pool import is_constant

#: (graph id, op id) -> the matmul plan chosen for the op.
OpPlans = Mapping[tuple[str, int], MatmulPlan]


def evaluate(ir: Ir, target: TileMachine | None = None, mappings: Mappings | None = None,
             registry: Any = REGISTRY, valuations: Any = None,
             op_plans: OpPlans | None = None, explain: bool = True) -> CostReport:
    """Cost ``ir`` under a plan: ``mappings`` (graph id, tensor id) -> tiles for every
    producer-less tensor, or, when None, each such tensor's ``tile_mapping`` (Poplar format);
    ``op_plans`` (graph id, op id) -> the matmul plan of each op the plan chose one for (the
    others are planned alone).

    ``explain=False`` leaves out what only explains a plan — each op's avoidable bytes
    (its rule's ``least_received``) and the planner's objective (the rules'
    ``agreement``), a third of a walk at real size — for a caller that compares plans by
    their cycles, exchange and memory alone, which come out the same (the memory search's
    settings; ``tests/cost/test_unexplained_walk.py``). The report's ``objective`` and
    ``upper_bound`` are then NaN and every op's avoidable bytes 0: not computed.

    Raises PlanError naming the first producer-less tensor without a valid mapping."""
    target = target if target is not None else TileTarget()
    valuations = valuations if valuations is not None else ir.options.unwind_valuations
    target = target.with_plans(op_plans or {})
    target.reset()  # the rotating linear mapper must give the same tiles on every run
    walk = CostWalk(ir, target, mappings, registry, valuations, explain=explain)
    report = walk.report()
    if walk.found_throughout:
        # Buffers live for the whole program that the walk met only at their op (stashes,
        # gradient accumulators): walked again with them live from the start, so that the
        # fullest moment is found among moments that hold them all.
        target.reset()
        report = CostWalk(ir, target, mappings, registry, valuations,
                          walk.found_throughout, explain=explain).report()
    return report


def computed_layouts(ir: Ir, target: TileMachine, mappings: Mappings | None,
                     tensor_ids: set[str], op_plans: OpPlans | None = None
                     ) -> dict[str, np.ndarray]:
    """The tiles the cost walk gives each main-graph tensor named in ``tensor_ids`` under a
    plan (``evaluate``'s arguments): a computed tensor's layout as Poplar would make it,
    for asking what a producer-less tensor laid out like it would cost."""
    target = target.with_plans(op_plans or {})
    target.reset()
    if any(REGISTRY.layout_rule(op).runs_subgraphs for op in ir.all_ops()):
        walk = _Recording(ir, target, mappings, REGISTRY, ir.options.unwind_valuations,
                          set(tensor_ids))
        walk.report()
        return walk.found
    layouts = _LayoutWalk(ir, target, mappings, set(tensor_ids))
    layouts.run(ir)
    return layouts.found


def call_counts(ir: Ir) -> dict[str, int]:
    """How often each graph runs per step: a graph no op calls (the main graph) once, a
    subgraph once per static call site per run of its caller (loop trip counts and If
    conditions are unknown: each body and branch counts once per call)."""
    called = {callee.id for op in ir.all_ops() for callee in op.called_graphs()}
    counts = {graph.id: 0 if graph.id in called else 1 for graph in ir.graphs}
    for graph in reversed(ir.callees_first()):
        for op in graph.ops:
            for callee in op.called_graphs():
                counts[callee.id] += counts[graph.id]
    return counts


class CostWalk(Interpreter):
    """One walk over the IR (``ir.interpreter``): callees before callers, each graph's ops
    in schedule order; each tensor's result is its layout, dropped once no later op reads
    it (which is also when liveness frees its memory)."""

    order = CALLEES_FIRST
    release_dead = True
    # A producer-less tensor given as intervals stays so in ``env`` and is expanded at each
    # read: the walk never holds a whole plan as tile arrays.

    def __init__(self, ir: Ir, target: TileMachine, mappings: Mappings | None,
                 registry: Any, valuations: Any,
                 throughout: Mapping[Key, np.ndarray] | None = None,
                 explain: bool = True) -> None:
        super().__init__()
        self.ir, self.target, self.mappings = ir, target, mappings
        self.explain = explain
        self.registry, self.valuations = registry, valuations
        self.num_tiles = target.num_tiles
        self.placement = Placement(ir, target)
        self.base = producerless_mappings(ir, target, mappings)
        self.executions = call_counts(ir)
        self.called = {callee.id for op in ir.all_ops() for callee in op.called_graphs()}
        self.charges = Charges(self.placement)
        self.memory = Residency(self.placement, throughout)
        self.liveness = self.memory.liveness
        self.objective = 0.0
        self.upper_bound = 0.0
        self.pipelined = target.num_ipus > 1 and ir.options.enable_pipelining

    @property
    def found_throughout(self) -> dict[Key, np.ndarray]:
        """Buffers live for the whole program that this walk met only at their op."""
        return self.memory.found_throughout

    def report(self) -> CostReport:
        """Walk the IR and say what the plan costs; each layout's tiles are counted once
        while the walk holds it (``remembered_counts``)."""
        with remembered_counts():
            return self._report()

    def _report(self) -> CostReport:
        for (graph_id, tensor_id), layout in self.base.items():
            tensor = self.ir.graph(graph_id).tensor(tensor_id)
            if not (self._argument(tensor) or self._filled_by_reader(tensor)):
                self.liveness.add_always_live(self._placed(tensor, layout), key(tensor))
        roots = [g.id for g in self.ir.graphs if g.id not in self.called]
        self.memory.start(roots)
        self.run(self.ir)
        liveness = self.liveness.result(roots)
        resident = self.memory.op_peak + liveness.always_live
        budget = self.target.bytes_per_tile
        rows = self.charges.rows
        return CostReport(
            ops=rows,
            max_tile_bytes=int(resident.max()) if resident.size else 0,
            tiles_over_budget=int(np.count_nonzero(resident > budget)),
            bytes_per_tile=budget,
            received_bytes_per_tile=self.charges.received,
            resident_bytes_per_tile=resident,
            objective=float(self.objective) if self.explain else float("nan"),
            upper_bound=float(self.upper_bound) if self.explain else float("nan"),
            peak_bytes_per_tile=liveness.peak,
            always_live_bytes_per_tile=liveness.always_live,
            fullest_tile=liveness.fullest,
            peak_tile_bytes_floor=liveness.peak_floor,
            num_ipus=self.placement.num_ipus,
            pipelined=self.pipelined,
            stash_bytes_per_ipu=tuple(self.memory.stash_bytes),
            accumulator_bytes_per_ipu=tuple(self.memory.accumulator_bytes),
            copy_phase_cycles=self.charges.copy_phase_cycles() if self.pipelined else 0,
            **totals(rows),
        )

    def _placed(self, tensor: Tensor, layout: np.ndarray | TileIntervals) -> np.ndarray:
        """``tensor`` laid out as ``layout``: its bytes per tile of the whole machine."""
        tiles = expanded(layout, numel(tensor), self.num_tiles)
        return self.placement.placed_bytes(key(tensor), tiles, tensor.dtype)

    # -- the walk (ir.interpreter) ---------------------------------------------------------
    def placeholder(self, tensor: Tensor) -> np.ndarray | TileIntervals:
        layout = self.base[key(tensor)]
        argument = self._argument(tensor)
        self.memory.from_parameters[key(tensor)] = not argument
        if argument:  # the call's copy in: live from the callee's start to its last reader
            self.liveness.create(key(tensor), self._placed(tensor, layout))
        return layout

    def read(self, tensor: Tensor) -> np.ndarray:
        value = super().read(tensor)
        return expanded(value, numel(tensor), self.num_tiles, tensor.describe())

    def _filled_by_reader(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` is a constant fill its one reader makes itself at run time
        (the reader's rule's ``filled_input``): its memory is the reader's result, live
        from then, not a constant held for the whole program."""
        if not is_constant(tensor) or tensor.num_uses() != 1 or tensor.is_graph_output():
            return False
        reader = tensor.consumers[0]
        index = next(i for i, t in reader.input_map().items() if t is tensor)
        if self.registry.layout_rule(reader).filled_input(reader) != index:
            return False
        data = np.asarray(tensor.data)
        return data.size > 0 and bool(np.all(data == data.flat[0]))

    def _argument(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` is an input of a graph some op calls: memory each call copies
        its argument into, live while the callee needs it, not for the whole program."""
        return tensor.graph.id in self.called and tensor.is_graph_input()

    def run_graph(self, graph: Graph) -> None:
        self.liveness.begin_graph(graph.id)
        super().run_graph(graph)
        self.liveness.end_graph()

    def write(self, tensor: Tensor, value: Any) -> None:
        super().write(tensor, held(value, self.num_tiles))

    def run_op(self, op: Op) -> None:
        rule = self.registry.layout_rule(op)
        avoidable = link = 0
        work = NO_WORK
        if rule.runs_subgraphs:
            input_tiles = _indexed([self.read(t) for t in op.inputs], op)
            outputs, need, score, bound = rule.call_cost(op, input_tiles, self, self.target,
                                                         self.valuations)
        else:
            input_tiles = self._inputs(op)
            outputs = self._outputs(op, output_layouts(rule, op, input_tiles, self.target))
            need = rule.exchange(op, input_tiles, outputs, self.target)
            if self.explain:
                avoidable = self._avoidable(op, rule, input_tiles, outputs, need)
                score, bound = rule.agreement(op, input_tiles, self.target, self.valuations)
            else:
                score = bound = 0.0
            work = rule.work(op, input_tiles, outputs, self.target)
            link = rule.link_bytes(op, self.target)
            updated = rule.updated_weight(op) if self.pipelined else None
            if updated is not None and self._implicit_accumulator(op.input(updated)):
                self._accumulator(op, op.input(updated), input_tiles[updated])
        self.objective += score
        self.upper_bound += bound
        aliases = rule.aliases_outputs(op)
        self.charges.charge(op, need, self.executions.get(op.graph.id, 1), avoidable, work,
                            link)
        from_parameters = self.memory.from_parameters
        parameters = all(from_parameters[key(t)] for t in op.inputs)
        for tensor, out in zip(op.outputs, _held_values(outputs), strict=True):
            self.write(tensor, out)
            from_parameters[key(tensor)] = aliases and parameters
        self._live_from_here(op, rule, aliases)
        for tensor in dict.fromkeys(op.inputs):
            if self._argument(tensor) and self.last_read_by(op, tensor) \
                    and not tensor.is_graph_output():
                self.liveness.release(key(tensor))
        live = [t for t in op.inputs if not from_parameters[key(t)]]
        self._resident(live + ([] if aliases else op.outputs))

    def _inputs(self, op: Op) -> ReadOnDemand:
        """The op's input layouts by index, large ones expanded only while read."""
        indices = list(op.input_map())
        count = indices[-1] + 1 if indices else 0
        values: list[Any] = [None] * count
        sizes, names = [0] * count, [""] * count
        for index, tensor in op.input_map().items():
            values[index] = super().read(tensor)
            sizes[index], names[index] = numel(tensor), tensor.describe()
        return ReadOnDemand(values, sizes, self.num_tiles, names)

    def _outputs(self, op: Op, layouts: list[np.ndarray]) -> list[np.ndarray] | ReadOnDemand:
        """The op's result layouts as its rule's later questions read them (``held_results``:
        a large one is not held expanded beside the operands each question expands). Each
        is a value from here on: read-only, so that the questions asked about it, this
        op's and its readers', key it once (``CountMemo.value_key``)."""
        for layout in layouts:
            if isinstance(layout, np.ndarray):
                read_only(layout)
        return held_results(layouts, [numel(t) for t in op.outputs], self.num_tiles,
                            [t.describe() for t in op.outputs])

    def released(self, tensor_key: Key) -> None:
        self.memory.released(tensor_key)

    def _live_from_here(self, op: Op, rule: LayoutRule, aliases: bool) -> None:
        """Tell liveness of the op's results (new memory, or views of what their viewed
        inputs hold) and that the op runs, its callees' peak included."""
        if aliases:
            inputs = op.input_map()
            viewed = [key(inputs[index]) for index in rule.viewed_inputs(op)
                      if index in inputs]
            for tensor in op.outputs:
                self.liveness.view(key(tensor), viewed)
        elif (overwritten := self._computed_in_place(op, rule)) is not None:
            self.liveness.view(key(op.outputs[0]), [key(overwritten)])
        elif rule.persistent_outputs(op):
            self._live_throughout(op)
        else:
            for tensor in op.outputs:
                self.memory.new_buffer(key(tensor), self._placed(tensor, self.read(tensor)))
        self.liveness.step((callee.id for callee in op.called_graphs()),
                           op.name or op.debug_name())

    def _live_throughout(self, op: Op) -> None:
        """Results live for the whole program (a stash buffer, the only such results, which
        ``stash_bytes`` adds up per IPU): counted with the weights (``evaluate`` walks
        again when the first walk found such buffers, so that they count from the first
        moment)."""
        for tensor in op.outputs:
            self.memory.stash(self.placement.op_ipu(op), key(tensor),
                              self._placed(tensor, self.read(tensor)))

    @staticmethod
    def _implicit_accumulator(weight: Tensor) -> bool:
        """Whether a pipelined step's update of ``weight`` implies an accumulator the graph
        does not hold: not for an optimizer's state (its update reads no gradient of its
        own), nor for a weight whose accumulator the step already has (``Accum___``, made
        with ``gradient_accumulation``)."""
        return not is_optimizer_state(weight.id) and \
            not weight.graph.has_tensor(ACCUM_PREFIX + weight.id)

    def _accumulator(self, op: Op, weight: Tensor, tiles: np.ndarray) -> None:
        """A pipelined training step accumulates each weight's gradient over the
        micro-batches (PopART's ``Accum___<weight>``, made by its optimizer decomposition
        when gradient accumulation is on): a buffer of the weight's shape, dtype and
        layout, live throughout."""
        self.memory.accumulator(
            self.placement.op_ipu(op), (weight.graph.id, ACCUM_PREFIX + weight.id),
            lambda: self.placement.placed_bytes(key(weight), tiles, weight.dtype))

    def _computed_in_place(self, op: Op, rule: LayoutRule) -> Tensor | None:
        """The input ``op``'s one result overwrites, as PopART's Inplace pattern would
        make it, or None. An input qualifies when the rule allows it
        (``inplace_inputs``), it has the result's dtype, shape and tiles, and ``op`` reads
        it last; a computed input must be no graph output and hold memory of its own that
        nothing else holds (``LivenessTracker.overwritable``: not a view of a weight), and
        a producer-less one (or a view of one) is overwritten only when ``op`` is its
        update (the rule's ``updated_weight``: PopART's optimizer writes into the
        weight)."""
        if len(op.outputs) != 1:
            return None
        out = op.outputs[0]
        for index in rule.inplace_inputs(op):
            tensor = op.input(index)
            if tensor.dtype != out.dtype or tensor.shape != out.shape \
                    or not self.last_read_by(op, tensor):
                continue
            if tensor.producer is None or self.memory.from_parameters[key(tensor)]:
                if rule.updated_weight(op) != index:
                    continue
            elif tensor.is_graph_output() or not self.liveness.overwritable(key(tensor)):
                continue
            if same_values(self.read(tensor), self.read(out)):
                return tensor
        return None

    def _avoidable(self, op: Op, rule: LayoutRule, input_tiles: InputTiles,
                   outputs: list[np.ndarray], need: ExchangeNeed) -> int:
        """Bytes this op receives beyond the least it could with its planned operands
        (producer-less tensors and views of them) laid out in any way."""
        planned = {index for index, tensor in op.input_map().items()
                   if self.memory.from_parameters[key(tensor)]}
        if not planned:
            return 0
        least = rule.least_received(op, input_tiles, outputs, planned, self.target)
        avoidable = int(np.asarray(need.received_bytes).sum()) - least
        if avoidable < 0:
            raise PlanError(f"op {op.debug_name()}: its layout rule's least exchange exceeds "
                            f"what this plan pays by {-avoidable} bytes")
        return avoidable

    def _resident(self, tensors: list[Tensor]) -> None:
        """Raise each tile's peak to this op's live data: its operands and results not
        counted in the base term (parameters and views of them), results only when they
        are new memory (not views)."""
        unique = {t.id: t for t in tensors}.values()
        self.memory.op_data((key(t), lambda t=t: self._placed(t, self.read(t)))
                            for t in unique)

    # -- what ops that run subgraphs ask (ops.layout_rule.CalleeLayouts) -----------------
    def tiles(self, tensor: Tensor) -> np.ndarray:
        """A callee tensor's layout: planned (an input) or computed (an output)."""
        return self.read(tensor)

    def planned(self, tensor: Tensor) -> np.ndarray | None:
        """The plan's layout of ``tensor`` (a call output), if the plan gives one."""
        return given_tiles(tensor, self.target, self.mappings, required=False)


class _Recording(CostWalk):
    """The cost walk, keeping a copy of the layouts of the main-graph tensors ``wanted``."""

    def __init__(self, ir: Ir, target: TileMachine, mappings: Mappings | None,
                 registry: Any, valuations: Any, wanted: set[str]) -> None:
        super().__init__(ir, target, mappings, registry, valuations)
        self.wanted = wanted
        self.found: dict[str, np.ndarray] = {}

    def write(self, tensor: Tensor, value: Any) -> None:
        if tensor.graph is self.ir.main_graph and tensor.id in self.wanted:
            self.found[tensor.id] = np.array(expanded(value, numel(tensor), self.num_tiles))
        super().write(tensor, value)


class _LayoutWalk(Interpreter):
    """The cost walk's layouts and nothing else (no exchange, cycles or liveness): each
    op's results as its rule lays them out, kept for the main-graph tensors ``wanted``.
    For an IR that calls no subgraph (a call's layouts come from costing its callee)."""

    order = CALLEES_FIRST
    release_dead = True

    def __init__(self, ir: Ir, target: TileMachine, mappings: Mappings | None,
                 wanted: set[str]) -> None:
        super().__init__()
        self.ir, self.target, self.wanted = ir, target, wanted
        self.num_tiles = target.num_tiles
        self.base = producerless_mappings(ir, target, mappings)
        self.found: dict[str, np.ndarray] = {}

    def placeholder(self, tensor: Tensor) -> np.ndarray | TileIntervals:
        return self.base[key(tensor)]

    def read(self, tensor: Tensor) -> np.ndarray:
        value = super().read(tensor)
        return expanded(value, numel(tensor), self.num_tiles, tensor.describe())

    def run_op(self, op: Op) -> None:
        rule = REGISTRY.layout_rule(op)
        inputs = _indexed([self.read(t) for t in op.inputs], op)
        for tensor, out in zip(op.outputs, output_layouts(rule, op, inputs, self.target),
                               strict=True):
            self.write(tensor, out)

    def write(self, tensor: Tensor, value: Any) -> None:
        if tensor.graph is self.ir.main_graph and tensor.id in self.wanted:
            self.found[tensor.id] = np.array(expanded(value, numel(tensor), self.num_tiles))
        super().write(tensor, value)


def _held_values(layouts: list[np.ndarray] | ReadOnDemand) -> list[Any]:
    """Layouts as the walk keeps them: ``ReadOnDemand``'s own values, not expanded again."""
    return layouts.held_values() if isinstance(layouts, ReadOnDemand) else list(layouts)


def _indexed(values: list[np.ndarray], op: Op) -> list[np.ndarray | None]:
    """Input layouts by input index, None where an optional input is absent."""
    indices = list(op.input_map())
    result: list[np.ndarray | None] = [None] * (indices[-1] + 1 if indices else 0)
    for index, value in zip(indices, values, strict=True):
        result[index] = value
    return result
