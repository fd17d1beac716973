"""Layout rules of the view ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Slice,
Identity, Expand, Split and Concat.

In Poplar these ops make views: no data moves, each output element *is* an input element.
So a view rule's whole meaning is an element map, written once as a list of steps
(reshape, dim_shuffle, slice, sub_sample, reverse, expand). The same steps build the
``memory.Chain`` of ``view_chain`` (applied to tile arrays by ``output_tiles``) and the
unwinding Graph's view ops of ``unwind``, so the two can never disagree. Views need no
exchange and carry no ValuedPairs.

The op parameters (Transpose's perm, Slice's starts/ends/axes/steps, Split's sizes) are
read with the shape rules' own helpers in ``ops/views.py``, imported on use because that
module imports this one to attach the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.memory import Chain
from popart_unwind.ops.layout import LayoutRule, TileTarget, UnwindEmitter

if TYPE_CHECKING:
    from popart_unwind.ir.op import Op
    from popart_unwind.unwind import Graph, TensorId

#: One step of an element map: (name, *arguments), names as the unwind Graph's methods.
Step = tuple[Any, ...]


def _views_module():
    from popart_unwind.ops import views

    return views


def _shape(op: Op, tensor, what: str) -> tuple[int, ...]:
    if tensor.shape is None:
        raise PlanError(f"op {op.debug_name()}: {what} {tensor.id!r} has no known shape; "
                        f"layouts need shapes (run InferShapes first)")
    return tensor.shape


def chain_of(in_shape: Sequence[int], steps: Sequence[Step]) -> Chain:
    """The Chain performing ``steps`` on a tensor of ``in_shape``."""
    chain = Chain(tuple(in_shape))
    for step in steps:
        name, args = step[0], step[1:]
        if name == "sub_sample":
            for axis, stride in enumerate(args[0]):
                if stride > 1:
                    chain.sub_sample(stride, axis)
        else:
            getattr(chain, name)(*args)
    return chain


def emit_steps(graph: Graph, tensor: TensorId, steps: Sequence[Step], name: str) -> TensorId:
    """The unwind Graph's view ops performing ``steps`` on ``tensor``; the last is named."""
    if not steps:
        return graph.identity(tensor, name=name)
    for k, step in enumerate(steps):
        tensor = getattr(graph, step[0])(tensor, *step[1:],
                                         name=name if k == len(steps) - 1 else "")
    return tensor


def flat(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1)


def unwound(chain: Chain, out_tiles: np.ndarray) -> np.ndarray:
    """Input tiles that ``chain`` takes to ``out_tiles`` (-1 where no output reads them)."""
    from popart_unwind.unwind.ops import unwind_chain

    back = unwind_chain(chain)
    shifted = np.asarray(out_tiles).reshape(chain.out_shape).astype(np.int64) + 1
    return flat(back.apply(shifted)) - 1


class ViewRule(LayoutRule):
    """A view of input 0: each output's element map is ``steps(op, out_index)``."""

    kind = "view"

    def steps(self, op: Op, out_index: int) -> list[Step]:
        raise NotImplementedError

    def view_chain(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        if in_index != 0 or not op.has_input(0) or not op.has_output(out_index):
            return None
        return chain_of(_shape(op, op.input(0), "input"), self.steps(op, out_index))

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        source = emitter.tensor(op.input(0))
        for index, out in op.output_map().items():
            emitter.define(out, emit_steps(emitter.graph, source, self.steps(op, index),
                                           out.id))

    def output_tiles(self, op: Op, input_tiles: list[np.ndarray | None],
                     target: TileTarget) -> list[np.ndarray]:
        tiles = _input(op, input_tiles, 0)
        shaped = np.asarray(tiles).reshape(_shape(op, op.input(0), "input"))
        return [flat(self.view_chain(op, 0, j).apply(shaped)) for j in op.output_map()]

    def unwind_tiles(self, op: Op, in_index: int, out_index: int,
                     out_tiles: np.ndarray) -> np.ndarray | None:
        chain = self.view_chain(op, in_index, out_index)
        return None if chain is None else unwound(chain, out_tiles)


def _input(op: Op, input_tiles: Sequence[np.ndarray | None], index: int) -> np.ndarray:
    tiles = input_tiles[index] if index < len(input_tiles) else None
    if tiles is None:
        raise PlanError(f"op {op.debug_name()}: the layout of input {index} is needed")
    return np.asarray(tiles)


class ReshapeRule(ViewRule):
    """Reshape, Flatten, Squeeze, Unsqueeze: the elements in row-major order, reshaped."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        out = _shape(op, op.output(out_index), "output")
        return [] if out == _shape(op, op.input(0), "input") else [("reshape", out)]


class TransposeRule(ViewRule):
    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = _shape(op, op.input(0), "input")
        perm = tuple(_views_module().transpose_perm(op, len(shape)))
        return [] if perm == tuple(range(len(shape))) else [("dim_shuffle", perm)]


class SliceRule(ViewRule):
    """A box of the input, every |step|-th element, reversed on axes with negative steps."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = _shape(op, op.input(0), "input")
        lower, upper, strides, reverse = [], [], [], []
        for axis, (start, _end, step, size) in enumerate(_views_module().slice_plan(op, shape)):
            if size == 0:
                lower.append(0)
                upper.append(0)
            elif step > 0:
                lower.append(start)
                upper.append(start + (size - 1) * step + 1)
            else:
                lower.append(start + (size - 1) * step)
                upper.append(start + 1)
                if size > 1:
                    reverse.append(axis)
            strides.append(abs(step) if size > 1 else 1)
        steps: list[Step] = []
        if lower != [0] * len(shape) or upper != list(shape):
            steps.append(("slice", tuple(lower), tuple(upper)))
        if any(s > 1 for s in strides):
            steps.append(("sub_sample", tuple(strides)))
        if reverse:
            steps.append(("reverse", tuple(reverse)))
        return steps


class IdentityRule(ViewRule):
    def steps(self, op: Op, out_index: int) -> list[Step]:
        return []


class ExpandRule(ViewRule):
    """Numpy broadcasting: leading unit axes added, then size-1 axes repeated."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        out = _shape(op, op.output(out_index), "output")
        return [] if out == _shape(op, op.input(0), "input") else [("expand", out)]


class SplitRule(ViewRule):
    """Output j is the slab of the input between the sizes before it and its own end."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        shape = _shape(op, op.input(0), "input")
        axis, sizes = _views_module().split_sizes(op, shape)
        outputs = sorted(op.output_map())
        position = outputs.index(out_index)
        begin = sum(sizes[:position])
        lower, upper = [0] * len(shape), list(shape)
        lower[axis], upper[axis] = begin, begin + sizes[position]
        if lower == [0] * len(shape) and upper == list(shape):
            return []
        return [("slice", tuple(lower), tuple(upper))]


class ConcatRule(LayoutRule):
    """Concat: input i is the slab ``concat_slab(op, i)`` of the output (a Poplar view)."""

    kind = "view"

    def _axis(self, op: Op) -> int:
        rank = len(_shape(op, op.output(0), "output"))
        axis = int(op.attributes.get("axis", 0))
        if not -rank <= axis < rank:
            raise PlanError(f"op {op.debug_name()}: axis {axis} is out of range for rank "
                            f"{rank}")
        return axis % rank

    def concat_slab(self, op: Op, in_index: int) -> tuple[int, int, int]:
        """(axis, begin, end): where input ``in_index`` lies along the output's axis."""
        axis = self._axis(op)
        begin = 0
        for index, tensor in op.input_map().items():
            size = _shape(op, tensor, "input")[axis]
            if index == in_index:
                return axis, begin, begin + size
            begin += size
        raise PlanError(f"op {op.debug_name()} has no input {in_index}")

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        inputs = [emitter.tensor(t) for t in op.inputs]
        out = op.output(0)
        emitter.define(out, emitter.graph.concat(inputs, self._axis(op), name=out.id))

    def output_tiles(self, op: Op, input_tiles: list[np.ndarray | None],
                     target: TileTarget) -> list[np.ndarray]:
        parts = [np.asarray(_input(op, input_tiles, i)).reshape(_shape(op, t, "input"))
                 for i, t in op.input_map().items()]
        return [flat(np.concatenate(parts, axis=self._axis(op)))]

    def unwind_tiles(self, op: Op, in_index: int, out_index: int,
                     out_tiles: np.ndarray) -> np.ndarray | None:
        if out_index != 0 or not op.has_input(in_index):
            return None
        axis, begin, end = self.concat_slab(op, in_index)
        shaped = np.asarray(out_tiles).reshape(_shape(op, op.output(0), "output"))
        return flat(np.take(shaped, np.arange(begin, end), axis=axis)).astype(np.int64)


RESHAPE = ReshapeRule()
TRANSPOSE = TransposeRule()
SLICE = SliceRule()
IDENTITY = IdentityRule()
EXPAND = ExpandRule()
SPLIT = SplitRule()
CONCAT = ConcatRule()
