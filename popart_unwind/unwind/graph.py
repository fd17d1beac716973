"""The UnwindGraph (after poprithms' memory/unwind): tensors, the ops that make them,
and ValuedPairs.

Tensors are created in order and named by :class:`TensorId`; every op checks its inputs
and raises :class:`GraphError` naming the op and the shapes when they do not fit. The
objective is the sum, over ValuedPairs (a, b, v), of v for each flat index where a and b have
the same mapping (``solution.elementwise_score``; docs/unwind.md).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from popart_unwind.errors import ChainError, GraphError, RegionError
from popart_unwind.memory import Chain, Region
from popart_unwind.unwind.ops import Node
from popart_unwind.validation import Shape, as_shape


@dataclass(frozen=True, order=True)
class TensorId:
    """A tensor of an UnwindGraph: its creation index (identity and order) and a display name."""

    index: int
    name: str = field(default="", compare=False)

    def __repr__(self) -> str:
        return f"{self.name}#{self.index}" if self.name else f"#{self.index}"


@dataclass(frozen=True)
class ValuedPair:
    """Two tensors of one shape that gain ``value`` per element with equal mappings."""

    a: TensorId
    b: TensorId
    value: float


@dataclass(frozen=True)
class SumLikeOut:
    """The result of ``sum_like``: its output, and for each broadcast input, the
    ``(input index, sum_like_reduce output, input tensor)`` tied together."""

    out: TensorId
    reductions: list[tuple[int, TensorId, TensorId]]


@dataclass(frozen=True)
class _Tensor:
    shape: Shape
    node: Node
    out_index: int


def _as_shape(shape: object, what: str) -> Shape:
    return as_shape(shape, f"{what}: shape", GraphError)


def _as_value(value: object, what: str) -> float:
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number < 0:
        raise GraphError(f"{what}: value {value!r} must be finite and non-negative")
    return number


class UnwindGraph:
    """An unwinding problem: build it with the op methods, then ``solve``."""

    def __init__(self) -> None:
        self._tensors: list[_Tensor] = []
        self._ids: list[TensorId] = []
        self._pairs: list[ValuedPair] = []
        self._consumers: list[list[TensorId]] = []
        self._concat_ends: dict[TensorId, list[int]] = {}  # per concat: where inputs end

    # ----- queries ---------------------------------------------------------------------
    def shape(self, tensor: TensorId) -> Shape:
        return self._record(tensor, "shape").shape

    def node(self, tensor: TensorId) -> Node:
        return self._record(tensor, "node").node

    def kind(self, tensor: TensorId) -> str:
        return self.node(tensor).kind

    def numel(self, tensor: TensorId) -> int:
        return math.prod(self.shape(tensor))

    def tensors(self) -> list[TensorId]:
        return list(self._ids)

    def tensor(self, index: int) -> TensorId:
        """The tensor created ``index``-th."""
        return self._ids[index]

    def sinks(self) -> list[TensorId]:
        return [t for t in self.tensors() if self.kind(t) == "sink"]

    def sources(self) -> list[TensorId]:
        return [t for t in self.tensors() if self.kind(t) == "source"]

    def valued_pairs(self) -> list[ValuedPair]:
        return list(self._pairs)

    def consumers(self, tensor: TensorId) -> list[TensorId]:
        """Outputs of the ops that read ``tensor``, in creation order."""
        self._record(tensor, "consumers")
        return list(self._consumers[tensor.index])

    def in_shapes(self, node: Node) -> list[Shape]:
        return [self.shape(t) for t in node.inputs]

    def __len__(self) -> int:
        return len(self._tensors)

    def _record(self, tensor: object, what: str) -> _Tensor:
        if not isinstance(tensor, TensorId) or not 0 <= tensor.index < len(self._tensors):
            raise GraphError(f"{what}: {tensor!r} is not a tensor of this graph")
        return self._tensors[tensor.index]

    # ----- creating tensors ----------------------------------------------------------------
    def _add(self, shape: Shape, node: Node, out_index: int = 0, name: str = "") -> TensorId:
        tensor = TensorId(len(self._tensors), name)
        self._tensors.append(_Tensor(shape, node, out_index))
        self._ids.append(tensor)
        self._consumers.append([])
        for source in dict.fromkeys(node.inputs):
            self._consumers[source.index].append(tensor)
        return tensor

    def _inputs(self, tensors: Sequence[TensorId], what: str) -> tuple[TensorId, ...]:
        tensors = tuple(tensors)
        for tensor in tensors:
            self._record(tensor, what)
        return tensors

    def sink(self, shape: Sequence[int], name: str = "") -> TensorId:
        """A tensor whose layout the solver chooses (a producer-less tensor of the model)."""
        return self._add(_as_shape(shape, "sink"), Node("sink", ()), name=name)

    def source(self, shape: Sequence[int], name: str = "") -> TensorId:
        """A tensor with a known, fixed layout (e.g. what a Poplibs create* function makes)."""
        return self._add(_as_shape(shape, "source"), Node("source", ()), name=name)

    def barrier(
        self, inputs: Sequence[TensorId], out_shapes: Sequence[Sequence[int]], name: str = ""
    ) -> list[TensorId]:
        """Outputs whose layouts are new and known only once every input's layout is."""
        return self._multi_out("barrier", inputs, out_shapes, name)

    def fixed_point(
        self, inputs: Sequence[TensorId], out_shapes: Sequence[Sequence[int]], name: str = ""
    ) -> list[TensorId]:
        """Outputs whose layouts are new and independent of the inputs (e.g. a matmul)."""
        return self._multi_out("fixed_point", inputs, out_shapes, name)

    def _multi_out(self, kind, inputs, out_shapes, name) -> list[TensorId]:
        node = Node(kind, self._inputs(inputs, kind))
        shapes = [_as_shape(s, kind) for s in out_shapes]
        return [self._add(s, node, i, name) for i, s in enumerate(shapes)]

    def sum_like_reduce(self, full: TensorId, shape: Sequence[int], name: str = "") -> TensorId:
        """A barrier whose output lays out a broadcast operand (a bias) from ``full``."""
        shape = _as_shape(shape, "sum_like_reduce")
        full_shape = self.shape(full)
        if not _broadcasts_to(shape, full_shape):
            raise GraphError(
                f"sum_like_reduce: shape {shape} does not broadcast to {full!r}'s {full_shape}"
            )
        return self._add(shape, Node("sum_like_reduce", (full,)), name=name)

    def valued_pair(self, a: TensorId, b: TensorId, value: float) -> None:
        """Tie ``a`` and ``b``: each flat index where their mappings agree scores ``value``."""
        if self.shape(a) != self.shape(b):
            raise GraphError(
                f"valued_pair: {a!r} has shape {self.shape(a)} but {b!r} has shape "
                f"{self.shape(b)}; ValuedPairs join tensors of equal shape only"
            )
        self._pairs.append(ValuedPair(a, b, _as_value(value, "valued_pair")))

    # ----- view ops --------------------------------------------------------------------------
    def _view(self, tensor: TensorId, build, what: str, name: str = "") -> TensorId:
        chain = Chain(self.shape(tensor))
        try:
            build(chain)
        except (ChainError, RegionError) as error:
            raise GraphError(
                f"{what} of {tensor!r} (shape {self.shape(tensor)}): {error}"
            ) from error
        return self._add(chain.out_shape, Node("view", (tensor,), chain=chain), name=name)

    def reshape(self, t: TensorId, shape: Sequence[int], name: str = "") -> TensorId:
        return self._view(t, lambda c: c.reshape(_as_shape(shape, "reshape")), "reshape", name)

    def flatten(self, t: TensorId, name: str = "") -> TensorId:
        return self._view(t, lambda c: c.flatten(), "flatten", name)

    def dim_shuffle(self, t: TensorId, permutation: Sequence[int], name: str = "") -> TensorId:
        return self._view(t, lambda c: c.dim_shuffle(permutation), "dim_shuffle", name)

    def reverse(self, t: TensorId, dims: Sequence[int], name: str = "") -> TensorId:
        return self._view(t, lambda c: c.reverse(dims), "reverse", name)

    def identity(self, t: TensorId, name: str = "") -> TensorId:
        return self._view(t, lambda c: None, "identity", name)

    def slice(
        self, t: TensorId, lower: Sequence[int], upper: Sequence[int], name: str = ""
    ) -> TensorId:
        """A slice; of a concat's output within one input's slab, a slice of that input
        (the same elements: the view skips the concat, so a concat of k inputs split again
        into k gives k paths, not k²)."""
        inner = self._within_concat_input(t, lower, upper)
        if inner is not None:
            t, lower, upper = inner
        return self._view(t, lambda c: c.slice(lower, upper), "slice", name)

    def _within_concat_input(
        self, t: TensorId, lower: Sequence[int], upper: Sequence[int]
    ) -> tuple[TensorId, list[int], list[int]] | None:
        """(input, lower, upper in it) when ``t`` is a concat's output and the valid,
        non-empty slice lies within one input's slab; None otherwise."""
        node = self.node(t)
        shape = self.shape(t)
        if node.kind != "concat" or len(lower) != len(shape) or len(upper) != len(shape):
            return None
        lower, upper = [int(x) for x in lower], [int(x) for x in upper]
        if not all(0 <= a < b <= n for a, b, n in zip(lower, upper, shape, strict=True)):
            return None
        ends = self._concat_ends.get(t)
        if ends is None:
            sizes = [self.shape(x)[node.axis] for x in node.inputs]
            ends = self._concat_ends[t] = list(itertools.accumulate(sizes))
        axis = node.axis
        index = bisect.bisect_right(ends, lower[axis])  # the input holding the first row
        if index == len(ends) or upper[axis] > ends[index]:
            return None
        start = ends[index] - self.shape(node.inputs[index])[axis]
        lower[axis] -= start
        upper[axis] -= start
        return node.inputs[index], lower, upper

    def sub_sample(self, t: TensorId, strides: Sequence[int], name: str = "") -> TensorId:
        shape = self.shape(t)
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape) or any(s < 1 for s in strides):
            raise GraphError(
                f"sub_sample of {t!r}: strides {strides} must be one positive int per axis "
                f"of shape {shape}"
            )

        def build(chain: Chain) -> None:
            for axis, stride in enumerate(strides):
                if stride > 1:
                    chain.sub_sample(stride, axis)

        return self._view(t, build, "sub_sample", name)

    def sett_sample(self, t: TensorId, region: Region, name: str = "") -> TensorId:
        return self._view(t, lambda c: c.sett_sample(region), "sett_sample", name)

    def expand(self, t: TensorId, shape: Sequence[int], name: str = "") -> TensorId:
        shape = _as_shape(shape, "expand")
        if 0 in shape and 0 not in self.shape(t):
            raise GraphError(f"expand of {t!r}: cannot broadcast {self.shape(t)} to {shape}")
        return self._view(t, lambda c: c.expand(shape), "expand", name)

    def concat(self, tensors: Sequence[TensorId], axis: int, name: str = "") -> TensorId:
        tensors = self._inputs(tensors, "concat")
        if not tensors:
            raise GraphError("concat: needs at least one tensor")
        shapes = [self.shape(t) for t in tensors]
        rank = len(shapes[0])
        if not 0 <= axis < rank:
            raise GraphError(f"concat: axis {axis} is outside the rank {rank} of {shapes[0]}")
        for tensor, shape in zip(tensors, shapes, strict=True):
            if len(shape) != rank or any(
                a != b for i, (a, b) in enumerate(zip(shape, shapes[0], strict=True)) if i != axis
            ):
                raise GraphError(
                    f"concat along axis {axis}: {tensor!r} has shape {shape}, which does not "
                    f"match {tensors[0]!r}'s {shapes[0]} off that axis"
                )
        out = list(shapes[0])
        out[axis] = sum(shape[axis] for shape in shapes)
        return self._add(tuple(out), Node("concat", tensors, axis=axis), name=name)

    # ----- elementwise ops and calls ----------------------------------------------------------
    def sum_like(
        self,
        inputs: Sequence[TensorId],
        unwind_indices: int | Sequence[int],
        value: float | Mapping,
        name: str = "",
    ) -> SumLikeOut:
        """A variadic elementwise op (numpy broadcasting); see docs/unwind.md.

        The output has the layout of the first input in ``unwind_indices``; a layout wanted at
        the output may unwind to any of them. Inputs of the output's shape are tied pairwise;
        each smaller (broadcast) input is tied to a ``sum_like_reduce`` of the first unwind
        input. ``value`` is a float, or a mapping ``{(i, j): v, "default": v}``.
        """
        inputs = self._inputs(inputs, "sum_like")
        shapes = [self.shape(t) for t in inputs]
        try:
            out_shape = np.broadcast_shapes(*shapes) if shapes else None
        except ValueError as error:
            raise GraphError(f"sum_like: input shapes {shapes} do not broadcast") from error
        if out_shape is None:
            raise GraphError("sum_like: needs at least one input")
        indices = (unwind_indices,) if isinstance(unwind_indices, int) else tuple(unwind_indices)
        if not indices:
            raise GraphError("sum_like: needs at least one unwind index")
        for index in indices:
            if not 0 <= index < len(inputs):
                raise GraphError(
                    f"sum_like: unwind index {index} is out of range for {len(inputs)} inputs"
                )
            if shapes[index] != out_shape:
                raise GraphError(
                    f"sum_like: unwind input {index} ({inputs[index]!r}) has shape "
                    f"{shapes[index]}, not the output shape {out_shape}"
                )
        values = _pair_values(value, len(inputs))
        out = self._add(
            tuple(out_shape), Node("sum_like", inputs, unwind_indices=indices), name=name
        )
        full = [i for i, s in enumerate(shapes) if s == out_shape]
        for k, i in enumerate(full):
            for j in full[k + 1 :]:
                self.valued_pair(inputs[i], inputs[j], values(i, j))
        reductions = []
        for j, shape in enumerate(shapes):
            if shape != out_shape:
                reduced = self.sum_like_reduce(inputs[indices[0]], shape)
                self.valued_pair(reduced, inputs[j], values(indices[0], j))
                reductions.append((j, reduced, inputs[j]))
        return SumLikeOut(out, reductions)

    def call(
        self,
        copy_in_srcs: Sequence[TensorId],
        copy_in_dsts: Sequence[TensorId],
        copy_out_srcs: Sequence[TensorId],
        value: float,
    ) -> list[TensorId]:
        """Copies into and out of a subgraph: a ValuedPair across each copy in, and a new
        sink for each copy out, tied to the tensor it copies."""
        if len(copy_in_srcs) != len(copy_in_dsts):
            raise GraphError(
                f"call: {len(copy_in_srcs)} copy-in sources but {len(copy_in_dsts)} destinations"
            )
        for src, dst in zip(copy_in_srcs, copy_in_dsts, strict=True):
            self.valued_pair(src, dst, value)
        outs = []
        for src in copy_out_srcs:
            out = self.sink(self.shape(src))
            self.valued_pair(src, out, value)
            outs.append(out)
        return outs

    # ----- solving ---------------------------------------------------------------------------
    def solve(self, algo: str = "default", **options):
        """Choose the sinks' layouts with solver ``algo``; returns a Solution."""
        from popart_unwind.unwind.solvers import solve

        return solve(self, algo, **options)


def _broadcasts_to(shape: Shape, target: Shape) -> bool:
    """Whether numpy broadcasting takes ``shape`` to exactly ``target``."""
    if len(shape) > len(target):
        return False
    trailing = target[len(target) - len(shape) :]
    return all(s in (1, t) for s, t in zip(shape, trailing, strict=True))


def _pair_values(value: float | Mapping, count: int):
    """A function (i, j) -> value for sum_like's pairs."""
    if isinstance(value, Mapping):
        table = {}
        for key, v in value.items():
            if key == "default":
                continue
            i, j = key
            if not (0 <= i < count and 0 <= j < count):
                raise GraphError(f"sum_like: value key {key} is out of range for {count} inputs")
            table[(min(i, j), max(i, j))] = _as_value(v, "sum_like")
        default = value.get("default")
        if default is not None:
            default = _as_value(default, "sum_like")

        def lookup(i: int, j: int) -> float:
            found = table.get((min(i, j), max(i, j)), default)
            if found is None:
                raise GraphError(f"sum_like: no value for inputs ({i}, {j}) and no default")
            return found

        return lookup
    number = _as_value(value, "sum_like")
    return lambda i, j: number
