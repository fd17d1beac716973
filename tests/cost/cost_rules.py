"""Small layout rules of our own for the cost-model and baseline tests, so that each test
states exactly what the ops mean (views alias, elementwise outputs clone an input, matmuls
follow the target's plan, PopART's creator search passes through views and elementwise ops
but Add), independently of the library's rule classes. Calls keep the library's own rule:
what a call copies is a property of the IR's index maps, not of a layout choice."""

from __future__ import annotations

from math import prod

import numpy as np

from popart_unwind.ir import GRAPHCORE_DOMAIN, Builder, Op, OpType
from popart_unwind.machine import ExchangeNeed, read_need
from popart_unwind.memory import Chain, Region
from popart_unwind.ops import REGISTRY, OpDef, OpRegistry
from popart_unwind.ops.layout_rule import LayoutRule
from popart_unwind.ops.slicing import slice_plan
from popart_unwind.target import IpuModel, TileTarget


class ViewRule(LayoutRule):
    """Reshape-like, Transpose, Identity and Slice (unit steps): the output aliases input 0."""

    kind = "view"

    def view_chain(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        if in_index != 0 or out_index != 0:
            return None
        source, output = op.input(0).shape, op.output(0).shape
        chain = Chain(source)
        name = op.type.name
        if name == "Transpose":
            return chain.dim_shuffle(op.attributes.get("perm", list(range(len(source)))[::-1]))
        if name == "Slice":
            plan = slice_plan(op, source)
            return chain.slice([start for start, *_ in plan],
                               [start + size for start, _, _, size in plan])
        if name == "Identity":
            return chain
        if name == "Expand":
            return chain.expand(output)
        return chain.reshape(output)

    def output_tiles(self, op, input_tiles, target):
        tiles = input_tiles[0].reshape(op.input(0).shape)
        return [self.view_chain(op, 0, 0).apply(tiles).reshape(-1)]

    def exchange(self, op, input_tiles, output_tiles, target):
        return ExchangeNeed.none(target.num_tiles)

    def aliases_outputs(self, op):
        return True

    def popart_view(self, op, in_index, out_index):
        return self.view_chain(op, in_index, out_index)


class ConcatRule(LayoutRule):
    kind = "view"

    def input_slab(self, op: Op, in_index: int) -> tuple[int, int, int]:
        axis = op.attributes["axis"] % len(op.output(0).shape)
        begin = sum(op.input(i).shape[axis] for i in range(in_index))
        return axis, begin, begin + op.input(in_index).shape[axis]

    def aliases_outputs(self, op):
        return True

    def popart_view(self, op, in_index, out_index):
        """Input ``in_index`` fills its slab of the output."""
        axis, begin, end = self.input_slab(op, in_index)
        shape = op.output(0).shape
        lower, upper = [0] * len(shape), list(shape)
        lower[axis], upper[axis] = begin, end
        return Chain(op.input(in_index).shape).sett_fill_into(
            Region.from_bounds(shape, lower, upper))

    def output_tiles(self, op, input_tiles, target):
        axis = op.attributes["axis"] % len(op.output(0).shape)
        parts = [tiles.reshape(t.shape) for tiles, t in zip(input_tiles, op.inputs, strict=True)]
        return [np.concatenate(parts, axis=axis).reshape(-1)]


class ElementwiseRule(LayoutRule):
    """Output clones the best full-shape input; broadcast inputs are fetched per reader."""

    kind = "elementwise"

    def output_tiles(self, op, input_tiles, target):
        out = op.output(0)
        full = [tiles for tiles, t in zip(input_tiles, op.inputs, strict=True)
                if t.shape == out.shape]
        if not full:
            return [target.linear_tiles(out.shape, out.dtype)]
        return [full[target.elementwise_output(full)].copy()]

    def exchange(self, op, input_tiles, output_tiles, target):
        out = op.output(0)
        need = ExchangeNeed.none(target.num_tiles)
        for tiles, tensor in zip(input_tiles, op.inputs, strict=True):
            size = target.dtype_size(tensor.dtype)
            if tensor.shape == out.shape:
                need = need + read_need(output_tiles[0], None, tiles, size, target.num_tiles)
                continue
            small = prod(tensor.shape)
            padded = (1,) * (len(out.shape) - len(tensor.shape)) + tuple(tensor.shape)
            reads = np.broadcast_to(np.arange(small).reshape(padded), out.shape).reshape(-1)
            keys = output_tiles[0].astype(np.int64) * small + reads
            pairs = np.flatnonzero(np.bincount(keys, minlength=target.num_tiles * small))
            tile, element = pairs // small, pairs % small
            moved = tiles[element] != tile
            received = np.bincount(tile[moved], minlength=target.num_tiles) * size
            need = need + ExchangeNeed(received.astype(np.int64),
                                       np.bincount(tile[moved], minlength=target.num_tiles))
        return need

    def agreement(self, op, input_tiles, target, valuations):
        out = op.output(0)
        full = [tiles for tiles, t in zip(input_tiles, op.inputs, strict=True)
                if t.shape == out.shape]
        score = bound = 0.0
        for other in full[1:]:
            score += valuations.elementwise * np.count_nonzero(full[0] == other)
            bound += valuations.elementwise * other.size
        return score, bound

    def popart_view(self, op, in_index, out_index):
        """A same-shape input is its result, but PopART's AddOpx stops the search."""
        shape = op.input(in_index).shape
        if op.type.name == "Add" or shape != op.output(out_index).shape:
            return None
        return Chain(shape)


def matmul_groups(lhs, rhs):
    """(G, M, K, N) of a 2-D rhs or equal batch axes; None otherwise."""
    if len(rhs) == 2 and lhs[-1] == rhs[0]:
        return 1, prod(lhs[:-1]), lhs[-1], rhs[1]
    if len(lhs) == len(rhs) > 2 and lhs[:-2] == rhs[:-2] and lhs[-1] == rhs[-2]:
        return prod(lhs[:-2]), lhs[-2], lhs[-1], rhs[-1]
    return None


class MatMulRule(LayoutRule):
    kind = "matmul"

    def _groups(self, op):
        return matmul_groups(op.input(0).shape, op.input(1).shape)

    def wanted_input_tiles(self, op, index, target):
        groups = self._groups(op)
        if groups is None or index not in (0, 1):
            return None
        return target.matmul_tiles(*groups, op.input(0).dtype, ("lhs", "rhs")[index])

    def output_tiles(self, op, input_tiles, target):
        groups, out = self._groups(op), op.output(0)
        if groups is None:
            return [target.linear_tiles(out.shape, out.dtype)]
        return [target.matmul_tiles(*groups, op.input(0).dtype, "output")]

    def exchange(self, op, input_tiles, output_tiles, target):
        groups, dtype = self._groups(op), op.input(0).dtype
        return (target.matmul_readers(*groups, dtype, "lhs", input_tiles[0])
                + target.matmul_readers(*groups, dtype, "rhs", input_tiles[1]))

    def agreement(self, op, input_tiles, target, valuations):
        groups, dtype = self._groups(op), op.input(0).dtype
        score = bound = 0.0
        for index, operand in enumerate(("lhs", "rhs")):
            wanted = target.matmul_tiles(*groups, dtype, operand)
            score += valuations.matmul * np.count_nonzero(wanted == input_tiles[index])
            bound += valuations.matmul * wanted.size
        return score, bound

    def creates_input(self, op, in_index):
        return 2 if in_index in (0, 1) else None


class GatherRule(LayoutRule):
    kind = "gather"

    def wanted_input_tiles(self, op, index, target):
        table = op.input(0).shape
        if index != 0 or op.attributes.get("axis", 0) != 0:
            return None
        return target.sliceable_tiles(table[0], prod(table[1:]), op.input(0).dtype)

    def creates_input(self, op, in_index):
        return 1 if in_index == 0 else None


def cost_registry() -> OpRegistry:
    registry = OpRegistry()
    for name in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
                 "Identity", "Expand"):
        registry.register(OpDef(name, layout=ViewRule()))
    registry.register(OpDef("Concat", layout=ConcatRule()))
    for name in ("Add", "Mul", "Relu", "Neg"):
        registry.register(OpDef(name, layout=ElementwiseRule()))
    registry.register(OpDef("MatMul", layout=MatMulRule()))
    registry.register(OpDef("Gather", layout=GatherRule()))
    for domain, name in ((GRAPHCORE_DOMAIN, "Call"), ("ai.onnx", "Loop"), ("ai.onnx", "If")):
        registry.register(OpDef(name, domain=domain,
                                layout=REGISTRY.lookup(OpType(domain, name)).layout))
    return registry


RULES = cost_registry()


def small_target(tiles: int = 16) -> TileTarget:
    return TileTarget(IpuModel(tiles_per_ipu=tiles))


def weight(builder: Builder, shape, name: str) -> str:
    return builder.add_initialized_input_tensor(np.zeros(shape, np.float32), name)


def const(builder: Builder, values, name: str) -> str:
    return builder.add_constant(np.asarray(values, np.int64), name)
