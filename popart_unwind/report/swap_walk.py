"""What one planned tensor's layout changes: our plan with that tensor alone laid out as
PopART lays it out, priced at the ops that read it.

Our plan's layouts are walked once as the cost walk (``cost/walk.py``) makes them; at each
op that reads a tensor laid out otherwise — directly, or through views of it (a reshape, a
transpose, a slice) — the op is priced twice: with every input as ours lays it out, and
with that one tensor (and its views) as PopART lays it out instead. Both prices come from
the rule calls the cost walk makes (exchange, compute, copies), from the same state of the
linear mapper, so a tensor whose tiles make no difference to its readers (a scalar every
tile receives anyway) is worth exactly 0.

It is local: only the readers are priced again. Where a reader's result takes its layout
from the swapped tensor (an elementwise op clones an input's layout), the ops after it
would move too; they are not counted (docs/cli.md, *The report*).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from popart_unwind.cost.charges import NO_WORK
from popart_unwind.cost.layouts import (
    Mappings,
    expanded,
    given_tiles,
    numel,
    producerless_mappings,
)
from popart_unwind.cost.placement import Placement
from popart_unwind.cost.report import OpCost
from popart_unwind.cost.terms import OpCharge, measured
from popart_unwind.cost.walk import OpPlans, call_counts
from popart_unwind.ir.interpreter import CALLEES_FIRST, Interpreter, Key, key
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import LayoutRule, output_layouts

#: (exchange bytes, cycles) of an op per step.
Figures = tuple[int, int]


def swapped_figures(ir: Ir, target: TileMachine, ours: Mappings, op_plans: OpPlans,
                    theirs: Mapping[Key, np.ndarray], swapped: Iterable[Key]
                    ) -> dict[Key, dict[tuple[str, int], tuple[Figures, Figures]]]:
    """For each tensor of ``swapped`` (planned tensors, with ``theirs`` its other layout):
    each op reading it (graph id, op id) -> (its figures under ``ours``, its figures under
    ``ours`` with only that tensor laid out as ``theirs``)."""
    target = target.with_plans(op_plans)
    target.reset()
    walk = _SwapWalk(ir, target, ours, {k: theirs[k] for k in swapped})
    walk.run(ir)
    return walk.found


class _SwapWalk(Interpreter):
    """The cost walk's layouts (each op's results as its rule lays them out, from the same
    linear mapper), pricing again the ops that read a swapped tensor."""

    order = CALLEES_FIRST
    release_dead = True

    def __init__(self, ir: Ir, target: TileMachine, mappings: Mappings,
                 theirs: dict[Key, np.ndarray]) -> None:
        super().__init__()
        self.ir, self.target, self.mappings = ir, target, mappings
        self.num_tiles = target.num_tiles
        self.valuations = ir.options.unwind_valuations
        self.base = producerless_mappings(ir, target, mappings)
        self.placement = Placement(ir, target)
        self.executions = call_counts(ir)
        self.theirs = theirs
        #: tensor -> swapped root -> the tensor's tiles with that root laid out otherwise
        self.views: dict[Key, dict[Key, np.ndarray]] = {}
        self.found: dict[Key, dict[tuple[str, int], tuple[Figures, Figures]]] = {}

    def placeholder(self, tensor: Tensor) -> Any:
        layout = self.base[key(tensor)]
        other = self.theirs.get(key(tensor))
        if other is not None:
            self.views[key(tensor)] = {key(tensor): expanded(other, numel(tensor),
                                                              self.num_tiles)}
        return layout

    def run_op(self, op: Op) -> None:
        roots = sorted({root for tensor in op.inputs
                        for root in self.views.get(key(tensor), ())})
        if roots:
            self._price(op, roots)
        rule = REGISTRY.layout_rule(op)
        inputs = self._inputs(op)
        if rule.runs_subgraphs:
            outputs = rule.call_cost(op, inputs, self, self.target, self.valuations)[0]
        else:
            outputs = output_layouts(rule, op, inputs, self.target)
        for tensor, out in zip(op.outputs, outputs, strict=True):
            self.write(tensor, out)

    def read(self, tensor: Tensor) -> np.ndarray:
        value = super().read(tensor)
        return expanded(value, numel(tensor), self.num_tiles, tensor.describe())

    # what ops that run subgraphs ask (ops.layout_rule.CalleeLayouts), as the cost walk
    def tiles(self, tensor: Tensor) -> np.ndarray:
        return self.read(tensor)

    def planned(self, tensor: Tensor) -> np.ndarray | None:
        return given_tiles(tensor, self.target, self.mappings, required=False)

    def _inputs(self, op: Op) -> list[np.ndarray | None]:
        """Input tiles by input index, None where an optional input is absent."""
        inputs = op.input_map()
        tiles: list[np.ndarray | None] = [None] * (max(inputs) + 1 if inputs else 0)
        for index, tensor in inputs.items():
            tiles[index] = self.read(tensor)
        return tiles

    def _price(self, op: Op, roots: list[Key]) -> None:
        rule = REGISTRY.layout_rule(op)
        inputs = op.input_map()
        ours = self._inputs(op)
        if rule.aliases_outputs(op):  # a view: its results carry the swap on
            viewed = set(rule.viewed_inputs(op))
            for root in roots:
                swapped = self._swapped(inputs, ours, root, viewed)
                if swapped is None:
                    continue
                outs = output_layouts(rule, op, swapped, copy.copy(self.target))
                for tensor, out in zip(op.outputs, outs, strict=True):
                    self.views.setdefault(key(tensor), {})[root] = np.asarray(out)
            return
        mine = self._figures(op, rule, ours)
        for root in roots:
            swapped = self._swapped(inputs, ours, root, set(inputs))
            if swapped is not None:
                self.found.setdefault(root, {})[(op.graph.id, op.id)] = (
                    mine, self._figures(op, rule, swapped))

    def _swapped(self, inputs: dict[int, Tensor], ours: list[np.ndarray | None], root: Key,
                 indices: set[int]) -> list[np.ndarray | None] | None:
        """The op's input tiles with ``root``'s views in its other layout (None: no input
        of ``indices`` is one)."""
        swapped = list(ours)
        changed = False
        for index, tensor in inputs.items():
            other = self.views.get(key(tensor), {}).get(root)
            if index in indices and other is not None:
                swapped[index] = other
                changed = True
        return swapped if changed else None

    def _figures(self, op: Op, rule: LayoutRule, inputs: list[np.ndarray | None]) -> Figures:
        """The op's exchange bytes and cycles per step with these input tiles, priced as the
        walk prices it, from the linear mapper's present state (a copy of the target)."""
        target = copy.copy(self.target)
        work, link = NO_WORK, 0
        if rule.runs_subgraphs:
            _, need, _, _ = rule.call_cost(op, inputs, self, target, self.valuations)
        else:
            outputs = output_layouts(rule, op, inputs, target)
            need = rule.exchange(op, inputs, outputs, target)
            work = rule.work(op, inputs, outputs, target)
            link = rule.link_bytes(op, target)
        charge = OpCharge(np.asarray(need.received_bytes, np.int64).reshape(-1),
                          np.asarray(need.regions, np.int64).reshape(-1), 0, work, link)
        row = OpCost(op.id, op.name, op.type.name, op.graph.id,
                     self.executions.get(op.graph.id, 1), self.placement.op_ipu(op),
                     **measured(charge, target))
        return row.per_step("exchange_bytes"), row.per_step("total_cycles")

    def released(self, tensor_key: Key) -> None:
        self.views.pop(tensor_key, None)
