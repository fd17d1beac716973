"""The Const tensors of a graph, uniqued: equal dtype, shape and bytes give one tensor.

Const tensors play the part of MLIR's constant ops; the rewriter keeps one pool per graph
so that a constant it creates reuses an equal one, and the canonicalizer can find spares.
Graph inputs and outputs stay out of the pool: their ids are interfaces, so an equal
constant elsewhere is never merged into them, nor they into it.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.ir.graph import Graph
from popart_unwind.ir.serialize import array_digest, row_blocks
from popart_unwind.ir.tensor import Tensor, TensorType


def is_constant(tensor: Tensor) -> bool:
    """A Const tensor with data (variables may change, so they never count)."""
    return tensor.tensor_type is TensorType.CONST and tensor.data is not None


class ConstantPool:
    """The Const tensors of one graph by (dtype, digest of shape and bytes)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._by_key: dict[tuple[str, tuple[int, ...], str], list[Tensor]] = {}
        for tensor in graph.tensors:
            if is_constant(tensor) and not tensor.is_graph_input() \
                    and not tensor.is_graph_output():
                self.add(tensor)

    @staticmethod
    def key(dtype: str, array: np.ndarray) -> tuple[str, tuple[int, ...], str]:
        # the shape is part of the key: the digest alone does not tell () from (1,)
        return dtype, tuple(array.shape), array_digest(array)

    def add(self, tensor: Tensor) -> None:
        self._by_key.setdefault(self.key(tensor.dtype, tensor.data), []).append(tensor)

    def find(self, dtype: str, array: np.ndarray) -> Tensor | None:
        """The first live Const tensor holding exactly ``array`` as ``dtype``."""
        for tensor in self._by_key.get(self.key(dtype, array), ()):
            if self._live(tensor) and _same_data(tensor.data, array):
                return tensor
        return None

    def duplicates(self) -> list[tuple[Tensor, Tensor]]:
        """(spare, kept) pairs: each live constant equal to an earlier one (creation order)."""
        pairs = []
        for group in self._by_key.values():
            live = [t for t in group if self._live(t)]
            pairs += [(spare, live[0]) for spare in live[1:]
                      if _same_data(spare.data, live[0].data)]
        order = {t.id: k for k, t in enumerate(self.graph.tensors)}
        return sorted(pairs, key=lambda pair: order[pair[0].id])

    def _live(self, tensor: Tensor) -> bool:
        graph = self.graph
        return (graph.has_tensor(tensor.id) and graph.tensor(tensor.id) is tensor
                and is_constant(tensor) and not tensor.is_graph_output())


def _same_data(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bytes, compared a block at a time."""
    return a.dtype == b.dtype and a.shape == b.shape and all(
        x == y for x, y in zip(row_blocks(a), row_blocks(b), strict=True))
