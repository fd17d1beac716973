"""Small random unwinding graphs, for property tests and solver comparisons.

``random_graph(rng, size, max_elements)`` grows a graph from a few sinks and sources by
applying ``size * 4`` random steps to tensors already in the graph. The steps use every op
of :class:`UnwindGraph` (sink, source, barrier, fixed_point, sum_like with equal and broadcast
inputs and one or several unwind indices, sum_like_reduce, the eight view ops, concat,
expand, call, valued_pair) and plant the two kinds of conflict a solver must weigh:

* *competition*: several sources of one shape, tied with different values to one tensor
  that unwinds to a sink;
* *dependency*: a barrier fed by a sink, whose output is tied back to that sink or to a
  sink that feeds a barrier tied to the first (taking both is a cycle).

About one graph in eight has no source or fixed_point at all: its preferred layouts come
from barriers, which exercises solvers where no label is free of dependencies.

Every tensor has at most ``max_elements`` elements and all sinks together at most
``size * max_elements``; at the default sizes the exact solver proves its optimum well
under a second (the slowest of 300 seeds takes about 0.2 s). The graph
depends only on the generator's state: the same ``rng`` state gives the same graph.
"""

from __future__ import annotations

import math

import numpy as np

from popart_unwind.errors import GraphError
from popart_unwind.memory.fill_sample import region_from_ons
from popart_unwind.unwind.graph import Shape, TensorId, UnwindGraph

VALUES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.5, 7.0, 10.0)


def random_graph(rng: np.random.Generator, size: int = 3, max_elements: int = 12) -> UnwindGraph:
    """A random unwinding graph of ``4 * size`` steps (see the module docstring)."""
    if size < 1 or max_elements < 1:
        raise GraphError(
            f"random_graph: size {size} and max_elements {max_elements} must be at least 1"
        )
    return _Builder(rng, size, max_elements).build()


class _Builder:
    """The graph being grown, the tensors steps may use, and the sink budget."""

    def __init__(self, rng: np.random.Generator, size: int, max_elements: int) -> None:
        self.rng = rng
        self.size = size
        self.max_elements = max_elements
        self.sink_budget = size * max_elements
        self.free_roots = bool(rng.random() < 7 / 8)
        self.graph = UnwindGraph()
        self.pool: list[TensorId] = []

    # ----- randomness ----------------------------------------------------------------------
    def coin(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)

    def value(self) -> float:
        return float(VALUES[int(self.rng.integers(len(VALUES)))])

    def pick(self, tensors: list[TensorId]) -> TensorId:
        return tensors[int(self.rng.integers(len(tensors)))]

    def shape(self) -> Shape:
        """A shape of rank 0 to 3, dimensions 1 to 3, at most ``max_elements`` elements."""
        dims: list[int] = []
        for _ in range(int(self.rng.integers(0, 4))):
            dim = int(self.rng.integers(1, 4))
            if math.prod(dims) * dim <= self.max_elements:
                dims.append(dim)
        return tuple(dims)

    def subset(self, count: int) -> np.ndarray:
        """A non-empty sorted subset of ``range(count)``."""
        keep = self.rng.random(count) < 0.6
        keep[int(self.rng.integers(count))] = True
        return np.flatnonzero(keep)

    # ----- tensors -----------------------------------------------------------------------------
    def new_sink(self, shape: Shape) -> TensorId:
        """A sink, or when the sink budget is spent a tensor of that shape from elsewhere."""
        if math.prod(shape) > self.sink_budget:
            return self.target(shape)
        self.sink_budget -= math.prod(shape)
        return self.keep(self.graph.sink(shape))

    def target(self, shape: Shape) -> TensorId:
        """A tensor with a prescribed layout: a source, or a barrier output without them."""
        if self.free_roots:
            return self.keep(self.graph.source(shape))
        return self.keep(self.graph.barrier([self.pick(self.pool)], [shape])[0])

    def keep(self, tensor: TensorId) -> TensorId:
        if self.graph.numel(tensor) > 0:
            self.pool.append(tensor)
        return tensor

    def same_shape(self, tensor: TensorId) -> list[TensorId]:
        shape = self.graph.shape(tensor)
        return [t for t in self.pool if t != tensor and self.graph.shape(t) == shape]

    def partner(self, tensor: TensorId) -> TensorId:
        """Another tensor of ``tensor``'s shape: mostly one already made, if any, else a new
        sink or target."""
        others = self.same_shape(tensor)
        if others and self.coin(0.7):
            return self.pick(others)
        shape = self.graph.shape(tensor)
        return self.new_sink(shape) if self.coin() else self.target(shape)

    # ----- growing ----------------------------------------------------------------------------
    def build(self) -> UnwindGraph:
        for _ in range(1 + self.size // 2):
            self.new_sink(self.shape())
        self.target(self.shape())
        steps = [getattr(self, name) for name in sorted(vars(_Builder)) if name.startswith("op_")]
        for _ in range(4 * self.size):
            step = steps[int(self.rng.integers(len(steps)))]
            step(self.pick(self.pool))
        return self.graph

    def op_reshape(self, t: TensorId) -> None:
        shape = self.graph.shape(t)
        count = math.prod(shape)
        dims = []
        while count > 1:
            factors = [f for f in range(2, count + 1) if count % f == 0]
            dims.append(factors[int(self.rng.integers(len(factors)))])
            count //= dims[-1]
        if self.coin(0.3):
            dims.insert(int(self.rng.integers(len(dims) + 1)), 1)
        self.keep(self.graph.reshape(t, dims))

    def op_flatten(self, t: TensorId) -> None:
        self.op_pair(self.keep(self.graph.flatten(t)))

    def op_dim_shuffle(self, t: TensorId) -> None:
        rank = len(self.graph.shape(t))
        self.keep(self.graph.dim_shuffle(t, [int(a) for a in self.rng.permutation(rank)]))

    def op_reverse(self, t: TensorId) -> None:
        rank = len(self.graph.shape(t))
        dims = [a for a in range(rank) if self.coin()]
        self.op_pair(self.keep(self.graph.reverse(t, dims)))

    def op_identity(self, t: TensorId) -> None:
        self.keep(self.graph.identity(t))

    def op_slice(self, t: TensorId) -> None:
        lower, upper = [], []
        for dim in self.graph.shape(t):
            lo = int(self.rng.integers(dim))
            lower.append(lo)
            upper.append(int(self.rng.integers(lo + 1, dim + 1)))
        self.op_pair(self.keep(self.graph.slice(t, lower, upper)))

    def op_sub_sample(self, t: TensorId) -> None:
        strides = [int(self.rng.integers(1, 3)) for _ in self.graph.shape(t)]
        self.keep(self.graph.sub_sample(t, strides))

    def op_sett_sample(self, t: TensorId) -> None:
        shape = self.graph.shape(t)
        region = region_from_ons(shape, [self.subset(dim) for dim in shape])
        self.op_pair(self.keep(self.graph.sett_sample(t, region)))

    def op_concat(self, t: TensorId) -> None:
        shape = self.graph.shape(t)
        if not shape:
            return
        axis = int(self.rng.integers(len(shape)))
        fits = [
            u
            for u in self.pool
            if _joins(self.graph.shape(u), shape, axis)
            and self.graph.numel(u) + math.prod(shape) <= self.max_elements
        ]
        if not fits:
            return
        first = self.pick(fits)
        if first == t and self.coin():
            first = self.graph.reverse(t, [axis])
        self.op_pair(self.keep(self.graph.concat([t, first], axis)))

    def op_expand(self, t: TensorId) -> None:
        shape = self.graph.shape(t)
        grown = [int(self.rng.integers(2, 4)) if d == 1 and self.coin() else d for d in shape]
        if self.coin() or grown == list(shape):
            grown.insert(0, 2)
        if math.prod(grown) <= self.max_elements:
            self.op_pair(self.keep(self.graph.expand(t, grown)))

    def op_sum_like(self, t: TensorId) -> None:
        """Inputs of t's shape (one or more unwind indices) and maybe a broadcast bias."""
        shape = self.graph.shape(t)
        inputs = [t] + [self.partner(t) for _ in range(int(self.rng.integers(0, 3)))]
        if shape and self.coin(0.6):
            bias = tuple(d if self.coin() else 1 for d in shape)[int(self.rng.integers(2)) :]
            inputs.insert(int(self.rng.integers(len(inputs) + 1)), self.new_sink(bias))
        full = [i for i, u in enumerate(inputs) if self.graph.shape(u) == shape]
        unwind = [int(i) for i in self.rng.permutation([full[k] for k in self.subset(len(full))])]
        value: float | dict = self.value()
        if self.coin(0.3):
            value = {"default": self.value(), (0, len(inputs) - 1): self.value()}
        out = self.keep(self.graph.sum_like(inputs, unwind, value).out)
        if self.coin():
            self.op_pair(out)

    def op_sum_like_reduce(self, t: TensorId) -> None:
        shape = self.graph.shape(t)
        reduced = tuple(d if self.coin() else 1 for d in shape)[int(self.rng.integers(2)) :]
        out = self.keep(self.graph.sum_like_reduce(t, reduced))
        self.graph.valued_pair(out, self.partner(out), self.value())

    def op_barrier(self, t: TensorId) -> None:
        """A barrier; its first output has t's shape and is tied to t's partner or a sink
        behind t (a dependency conflict when that sink feeds it)."""
        inputs = [t] + ([self.pick(self.pool)] if self.coin() else [])
        shapes = [self.graph.shape(t)] + ([self.shape()] if self.coin() else [])
        outs = [self.keep(o) for o in self.graph.barrier(inputs, shapes)]
        self.graph.valued_pair(outs[0], t if self.coin() else self.partner(t), self.value())

    def op_fixed_point(self, t: TensorId) -> None:
        if not self.free_roots:
            return
        outs = self.graph.fixed_point([t], [self.shape() for _ in range(1 + self.coin())])
        for out in outs:
            self.keep(out)
        self.op_pair(outs[0])

    def op_call(self, t: TensorId) -> None:
        """Copy t into a subgraph input (a sink), compute a view there, copy it out."""
        shape = self.graph.shape(t)
        if 2 * math.prod(shape) > self.sink_budget:
            return
        inner = self.new_sink(shape)
        body = self.keep(self.graph.reverse(inner, list(range(len(shape)))))
        self.sink_budget -= math.prod(shape)
        for out in self.graph.call([t], [inner], [body], self.value()):
            self.keep(out)

    def op_pair(self, t: TensorId) -> None:
        self.graph.valued_pair(t, self.partner(t), self.value())

    def op_compete(self, t: TensorId) -> None:
        """Several targets, each wanting t with its own value."""
        shape = self.graph.shape(t)
        for _ in range(int(self.rng.integers(2, 4))):
            self.graph.valued_pair(t, self.target(shape), self.value())

    def op_conflict(self, t: TensorId) -> None:
        """Two sinks each tied to a barrier over the other: only one tie can hold."""
        shape = self.graph.shape(t)
        if 2 * math.prod(shape) > self.sink_budget:
            return
        a, b = self.new_sink(shape), self.new_sink(shape)
        over_a = self.keep(self.graph.barrier([a], [shape])[0])
        over_b = self.keep(
            self.graph.barrier([self.graph.dim_shuffle(b, list(range(len(shape))[::-1]))], [shape])[
                0
            ]
        )
        self.graph.valued_pair(b, over_a, self.value())
        self.graph.valued_pair(a, over_b, self.value())
        self.graph.valued_pair(t, a, self.value())


def _joins(shape: Shape, other: Shape, axis: int) -> bool:
    """Whether the two shapes may be concatenated along ``axis``."""
    return len(shape) == len(other) and all(
        a == b for i, (a, b) in enumerate(zip(shape, other, strict=True)) if i != axis
    )
