"""IR tensors, modelled on PopART's ``Tensor``: a string id, a dtype, a shape and a type.

A tensor belongs to one graph, has at most one producer and any number of consumers (kept in
op-id order, so every walk over them is deterministic). Constants and initialised variables
carry their numpy data. ``tile_mapping`` is where a layout plan is written back (Poplar's
format: per tile, half-open intervals of the row-major flattened tensor).
"""

from __future__ import annotations

import enum
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from popart_unwind.errors import IrError
from popart_unwind.ir.dtypes import check_dtype
from popart_unwind.ir.tile_mapping import TileIntervals, TileMapping

if TYPE_CHECKING:
    from popart_unwind.ir.graph import Graph
    from popart_unwind.ir.op import Op



def qualified_id(graph_id: str, tensor_id: str) -> str:
    """A tensor's name across graphs: ``graph/tensor``, the bare id in the main graph."""
    return f"{graph_id}/{tensor_id}" if graph_id else tensor_id


class TensorType(enum.Enum):
    """PopART's tensor kinds: computed (ActGrad), constant, streamed from host, or variable."""

    ACT_GRAD = "ActGrad"
    CONST = "Const"
    STREAM = "Stream"
    VARIABLE = "Variable"


class Tensor:
    """One tensor of a graph. Create tensors through :class:`Graph`, never directly."""

    __slots__ = ("_consumers", "data", "dtype", "graph", "id", "producer", "shape",
                 "tensor_type", "tile_mapping")

    def __init__(self, graph: Graph, tensor_id: str, dtype: str,
                 shape: tuple[int, ...] | None, tensor_type: TensorType,
                 data: np.ndarray | None = None) -> None:
        self.graph = graph
        self.id = tensor_id
        self.dtype = check_dtype(dtype, tensor_id)
        self.shape = shape
        self.tensor_type = tensor_type
        self.data = data
        self.producer: Op | None = None
        self._consumers: dict[int, tuple[Op, int]] = {}  # op id -> (op, number of uses)
        self.tile_mapping: TileMapping | TileIntervals | None = None

    @property
    def consumers(self) -> list[Op]:
        """The distinct ops reading this tensor, in op-id order."""
        return [self._consumers[op_id][0] for op_id in sorted(self._consumers)]

    def num_uses(self) -> int:
        """How many op inputs read this tensor (an op reading it twice counts twice)."""
        return sum(count for _, count in self._consumers.values())

    def is_graph_input(self) -> bool:
        return self.id in self.graph.input_ids

    def is_graph_output(self) -> bool:
        return self.id in self.graph.output_ids

    @property
    def qualified_id(self) -> str:
        """The tensor's name across graphs (``qualified_id``)."""
        return qualified_id(self.graph.id, self.id)

    def describe(self) -> str:
        """``tensor 'x'``, naming the graph outside the main graph: for messages."""
        where = f" of graph {self.graph.id!r}" if self.graph.id else ""
        return f"tensor {self.id!r}{where}"

    def nelms(self) -> int:
        """The number of elements; the shape must be known."""
        if self.shape is None:
            raise IrError(f"tensor {self.id!r} has no known shape")
        return prod(self.shape)

    def info(self) -> str:
        shape = "?" if self.shape is None else "x".join(map(str, self.shape)) or "scalar"
        return f"{self.id} ({self.tensor_type.value} {self.dtype} {shape})"

    def __repr__(self) -> str:
        return f"Tensor({self.info()})"

    def _add_consumer(self, op: Op) -> None:
        _, count = self._consumers.get(op.id, (op, 0))
        self._consumers[op.id] = (op, count + 1)

    def _remove_consumer(self, op: Op) -> None:
        _, count = self._consumers[op.id]
        if count == 1:
            del self._consumers[op.id]
        else:
            self._consumers[op.id] = (op, count - 1)
