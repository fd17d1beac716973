"""Stash and Restore (``ai.graphcore``): a pipeline's ring of a tensor's past values.

In a pipelined training step a tensor made in forward stage ``s`` and read again in a later
stage ``k`` of the same IPU belongs, by the time stage ``k`` reads it, to a micro-batch
``k - s`` pipeline cycles older. PopART's Pipeline transform keeps the values in between
in a stash: ``Stash`` writes the tensor into slot ``i`` of a buffer of ``stashSize`` slots
(then ``i = (i + 1) mod stashSize``), ``Restore`` reads the oldest slot back in the later
stage. Their rules:

- shape: a Stash's result is ``[stashSize, *shape]``; a Restore's is one slot, ``shape``;
- layout: PopART's ``StashOpx`` makes the buffer with
  ``popops::createSliceableTensorFromSlice`` from the input, so every slot has the input's
  tile mapping, and ``RestoreOpx`` reads a slot with ``popops::dynamicSlice``, whose result
  is mapped like the slot. The planner ties all three like views: layouts pass through
  unchanged, nothing crosses tiles (the scalar slot index is not counted). PopART's creator
  search does not pass through them (their Opx create no input), which the baseline keeps;
- memory: both results are new memory (no alias). A stash buffer lives for the whole
  program, as Poplar allocates it (``persistent_outputs``): in a running pipeline each of
  its slots always holds some micro-batch's value. PopART restores in place into the
  activation's own tensor; a restored value here is a new tensor live from the Restore to
  its last reader, which is what Poplar's liveness makes of the in-place one;
- cost: a Stash copies its input into a slot, a Restore copies a slot out: on each tile,
  the slot's elements at one vector per cycle.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.machine.hooks import tile_counts
from popart_unwind.machine.interface import TileMachine
from popart_unwind.ops.layout_rule import InputTiles, OpWork, known_shape
from popart_unwind.ops.registry import InferredOutputs, OpDef, register
from popart_unwind.ops.views import CopiedViewRule, Step

STASH = "Stash"
RESTORE = "Restore"
#: The attribute giving a stash's number of slots (PopART's ``stashSize``).
STASH_SIZE = "stashSize"


def is_stash(op: Op) -> bool:
    """Whether ``op`` writes a tensor into a stash (a Stash)."""
    return op.is_type(STASH)


def is_restore(op: Op) -> bool:
    """Whether ``op`` reads a value back from a stash (a Restore)."""
    return op.is_type(RESTORE)


def stash_size(op: Op) -> int:
    """The number of slots of ``op``'s stash (a Stash or a Restore)."""
    size = int(op.attributes.get(STASH_SIZE, 0))
    if size < 1:
        raise ShapeError(f"op {op.debug_name()}: attribute {STASH_SIZE} must be a positive "
                         f"int; got {op.attributes.get(STASH_SIZE)!r}")
    return size


def _infer_stash(op: Op) -> InferredOutputs:
    tensor = op.input(0)
    return [(tensor.dtype, (stash_size(op), *known_shape(op, tensor)))]


def _infer_restore(op: Op) -> InferredOutputs:
    stash = op.input(0)
    shape = known_shape(op, stash)
    if not shape or shape[0] != stash_size(op):
        raise ShapeError(f"op {op.debug_name()}: reads a stash of shape {shape}, which "
                         f"has not the {stash_size(op)} slots of its {STASH_SIZE}")
    return [(stash.dtype, shape[1:])]


class StashRule(CopiedViewRule):
    """Every slot of the buffer is laid out as the input."""

    kind = "stash"

    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = known_shape(op, op.input(0))
        return [("reshape", (1, *shape)), ("expand", (stash_size(op), *shape))]

    def persistent_outputs(self, op: Op) -> bool:
        """The buffer is live for the whole program (module docstring)."""
        return True

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """One slot written: the input's elements on its busiest tile (not the buffer's,
        which the default would count)."""
        tiles = input_tiles[0]
        flat = np.asarray(tiles).reshape(-1) if tiles is not None else np.zeros(0, np.int64)
        if not flat.size:
            return OpWork(0, 0)
        busiest = int(tile_counts(flat, target.num_tiles).max())
        return OpWork(target.elementwise_cycles(busiest, op.input(0).dtype), 0)


class RestoreRule(CopiedViewRule):
    """The result is laid out as one slot of the buffer."""

    kind = "restore"

    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = known_shape(op, op.input(0))
        return [("slice", (0,) * len(shape), (1, *shape[1:])), ("reshape", shape[1:])]

    def worked_inputs(self, op: Op) -> list[int]:
        """One slot read: the default work counts the result's elements alone."""
        return []


register(OpDef(STASH, domain=GRAPHCORE_DOMAIN, infer=_infer_stash, side_effects=False,
               layout=StashRule()))
register(OpDef(RESTORE, domain=GRAPHCORE_DOMAIN, infer=_infer_restore, side_effects=False,
               layout=RestoreRule()))
