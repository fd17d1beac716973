"""Where the cost walk's rotating linear mapper stands when each op runs.

PopART's linear mapper starts each mapping where the one before it ended, so the results
of an op Poplar maps linearly (an op no rule models) land on tiles that depend on every
linear mapping made before it in the program. The planner lays out the tensors tied to
such a result before any walk has run; to tie them to the tiles the walk will give the
result, it asks here where the rotation stands at each op: the walk's order (callees
first, each graph in schedule order) replayed without layouts, each rule asked for its
results with inputs that cannot be read.

Approximate where a rule reads its inputs' layouts, or asks the machine anything but a
linear mapping, before it maps linearly: such an op is taken not to move the rotation
(every rule today maps linearly only when the inputs it would follow are absent). A call's
results are taken to be planned (the planner plans every call output), so calls do not
move it either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import LazyInputTiles

#: (graph id, op id) -> the tile the op's first linear mapping starts on in the cost walk.
RotationStarts = dict[tuple[str, int], int]


class _ReadsLayouts(Exception):
    """Raised to a rule that asks for more than the replay can answer."""


def linear_rotation_starts(ir: Ir, target: TileMachine, registry: Any = REGISTRY
                           ) -> RotationStarts:
    """Each op's rotation start in the cost walk of ``ir`` on ``target`` (module
    docstring): where its first linear mapping would begin."""
    rotation = target.rotated_to(0)
    only_linear = _OnlyLinear(rotation)
    starts: RotationStarts = {}
    for graph in ir.callees_first():
        for op in graph.schedule():
            starts[(graph.id, op.id)] = rotation.next_start_tile
            rule = registry.layout_rule(op)
            if rule.runs_subgraphs:
                continue
            with contextlib.suppress(_ReadsLayouts):
                rule.output_tiles(op, _unreadable(op), only_linear)
    return starts


def _unreadable(op: Op) -> LazyInputTiles:
    """An op's input layouts by index as the walk passes them: None where an optional
    input is absent; reading a present one stops the replay of the op."""
    present = set(op.input_map())

    def layout(index: int) -> None:
        if index in present:
            raise _ReadsLayouts
        return None

    return LazyInputTiles(max(present, default=-1) + 1, layout)


class _OnlyLinear:
    """A machine that answers linear mappings (from its rotation) and its size alone."""

    def __init__(self, target: TileMachine) -> None:
        self._target = target
        self.num_tiles = target.num_tiles

    def linear_tiles(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        return self._target.linear_tiles(shape, dtype)

    def __getattr__(self, name: str) -> Any:
        raise _ReadsLayouts
