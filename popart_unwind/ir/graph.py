"""IR graphs, modelled on PopART's ``Graph``: ops, tensors, ordered inputs and outputs.

All mutation of the IR goes through a graph's methods, which keep producers and consumers in
step. Every listing is ordered (tensors by creation, ops by id), so walks and serialisations
are deterministic whatever the hash seed.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from popart_unwind.errors import IrError
from popart_unwind.ir.dtypes import dtype_of_array
from popart_unwind.ir.op import Op, OpSettings, OpType, op_class, place
from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.validation import as_shape

if TYPE_CHECKING:
    from popart_unwind.ir.ir import Ir

TensorLike = Tensor | str


class TensorIds(list):
    """A graph's input or output ids: a list, whose membership test (``id in
    graph.output_ids``, asked per op by the cost walk and the layout rules) reads a set
    built on first use and dropped by every change, so it does not scan the list."""

    _members: frozenset[str] | None = None

    def __contains__(self, tensor_id: object) -> bool:
        if not isinstance(tensor_id, str):
            return list.__contains__(self, tensor_id)
        if self._members is None:
            self._members = frozenset(self)
        return tensor_id in self._members

    def __getstate__(self) -> None:
        return None  # copies and pickles rebuild the set from their own items


def _dropping_members(name: str) -> Any:
    change = getattr(list, name)

    def changed(self: TensorIds, *args: Any, **kwargs: Any) -> Any:
        self._members = None
        return change(self, *args, **kwargs)

    changed.__name__ = name
    return changed


for _name in ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
              "__setitem__", "__delitem__", "__iadd__", "__imul__"):
    setattr(TensorIds, _name, _dropping_members(_name))


class Graph:
    """A graph of an :class:`Ir`. The main graph has id ``""``, as in PopART."""

    def __init__(self, ir: Ir, graph_id: str) -> None:
        self.ir = ir
        self.id = graph_id
        self._tensors: dict[str, Tensor] = {}
        self._ops: dict[int, Op] = {}
        self.input_ids = TensorIds()
        self.output_ids = TensorIds()

    @property
    def input_ids(self) -> TensorIds:
        """The graph inputs' ids, in order (a list; assigning any list keeps it so)."""
        return self._input_ids

    @input_ids.setter
    def input_ids(self, ids: Sequence[str]) -> None:
        self._input_ids = TensorIds(ids)

    @property
    def output_ids(self) -> TensorIds:
        """The graph outputs' ids, in order (a list; assigning any list keeps it so)."""
        return self._output_ids

    @output_ids.setter
    def output_ids(self, ids: Sequence[str]) -> None:
        self._output_ids = TensorIds(ids)

    def __repr__(self) -> str:
        name = self.id or "main"
        return f"Graph({name!r}: {len(self._ops)} ops, {len(self._tensors)} tensors)"

    # -- tensors -------------------------------------------------------------------------
    def tensor(self, tensor_id: str) -> Tensor:
        try:
            return self._tensors[tensor_id]
        except KeyError:
            where = f"graph {self.id!r}" if self.id else "the main graph"
            raise IrError(f"no tensor {tensor_id!r} in {where}") from None

    def has_tensor(self, tensor_id: str) -> bool:
        return tensor_id in self._tensors

    @property
    def tensors(self) -> list[Tensor]:
        """All tensors, in creation order."""
        return list(self._tensors.values())

    @property
    def inputs(self) -> list[Tensor]:
        return [self._tensors[t] for t in self.input_ids]

    @property
    def outputs(self) -> list[Tensor]:
        return [self._tensors[t] for t in self.output_ids]

    def add_tensor(self, tensor_id: str, dtype: str, shape: Sequence[int] | None,
                   tensor_type: TensorType = TensorType.ACT_GRAD,
                   data: np.ndarray | None = None) -> Tensor:
        if not isinstance(tensor_id, str) or not tensor_id:
            raise IrError(f"tensor ids must be non-empty strings, got {tensor_id!r}")
        if tensor_id in self._tensors:
            raise IrError(f"tensor {tensor_id!r} already exists in graph {self.id!r}")
        checked = None if shape is None else as_shape(shape, f"shape of {tensor_id!r}", IrError)
        if data is not None and checked is not None and tuple(data.shape) != checked:
            raise IrError(f"tensor {tensor_id!r}: data of shape {data.shape} "
                          f"does not match shape {checked}")
        tensor = Tensor(self, tensor_id, dtype, checked, tensor_type, data)
        self._tensors[tensor_id] = tensor
        return tensor

    def add_input(self, tensor_id: str, dtype: str, shape: Sequence[int],
                  tensor_type: TensorType = TensorType.ACT_GRAD) -> Tensor:
        """A graph input (subgraph argument, or a host stream of the main graph)."""
        tensor = self.add_tensor(tensor_id, dtype, shape, tensor_type)
        self.input_ids.append(tensor_id)
        return tensor

    def add_constant(self, tensor_id: str, data: np.ndarray) -> Tensor:
        data = np.asarray(data)
        return self.add_tensor(tensor_id, dtype_of_array(data, tensor_id), data.shape,
                               TensorType.CONST, data)

    def add_variable(self, tensor_id: str, data: np.ndarray) -> Tensor:
        data = np.asarray(data)
        return self.add_tensor(tensor_id, dtype_of_array(data, tensor_id), data.shape,
                               TensorType.VARIABLE, data)

    def mark_output(self, tensor: TensorLike) -> None:
        self.output_ids.append(self._resolve(tensor).id)

    def unique_id(self, stem: str) -> str:
        """``stem``, or ``stem`` with the smallest numeric suffix that is still free."""
        if stem not in self._tensors:
            return stem
        suffix = 1
        while f"{stem}__{suffix}" in self._tensors:
            suffix += 1
        return f"{stem}__{suffix}"

    def rename_tensor(self, tensor: TensorLike, tensor_id: str) -> None:
        """Give ``tensor`` the free id ``tensor_id``. It keeps its place in the creation
        order, and the graph's input and output lists follow it."""
        tensor = self._resolve(tensor)
        if not isinstance(tensor_id, str) or not tensor_id:
            raise IrError(f"tensor ids must be non-empty strings, got {tensor_id!r}")
        if tensor_id in self._tensors:
            raise IrError(f"cannot rename {tensor.id!r}: tensor {tensor_id!r} already exists "
                          f"in graph {self.id!r}")
        old_id = tensor.id
        self._tensors = {(tensor_id if key == old_id else key): value
                         for key, value in self._tensors.items()}
        tensor.id = tensor_id
        self.input_ids = [tensor_id if t == old_id else t for t in self.input_ids]
        self.output_ids = [tensor_id if t == old_id else t for t in self.output_ids]

    def remove_tensor(self, tensor: TensorLike) -> None:
        tensor = self._resolve(tensor)
        if tensor.producer is not None or tensor.num_uses():
            raise IrError(f"tensor {tensor.id!r} is still connected; disconnect it first")
        if tensor.id in self.input_ids or tensor.id in self.output_ids:
            raise IrError(f"tensor {tensor.id!r} is a graph input or output")
        del self._tensors[tensor.id]

    # -- ops -----------------------------------------------------------------------------
    def op(self, op_id: int) -> Op:
        try:
            return self._ops[op_id]
        except KeyError:
            raise IrError(f"no op with id {op_id} in graph {self.id!r}") from None

    def has_op(self, op_id: int) -> bool:
        return op_id in self._ops

    @property
    def ops(self) -> list[Op]:
        """All ops in id order."""
        return [self._ops[i] for i in sorted(self._ops)]

    def create_op(self, op_type: OpType, inputs: Sequence[TensorLike | None] = (),
                  outputs: Sequence[str] | int = 1, attributes: dict[str, Any] | None = None,
                  settings: OpSettings | None = None) -> Op:
        """Create an op connected to ``inputs`` (``None`` leaves an optional input absent)
        and to new output tensors: ``outputs`` is a list of ids or a count of outputs to
        name after the op. Output dtypes and shapes are left unknown for shape inference.
        """
        settings = settings or OpSettings()
        cls = op_class(op_type)
        op = cls(self, self.ir._next_op_id(), op_type, dict(attributes or {}), settings)
        self._ops[op.id] = op
        for index, tensor in enumerate(inputs):
            if tensor is not None:
                self.connect_input(op, index, tensor)
        if isinstance(outputs, int):
            stem = settings.name or f"{op_type.name}{op.id}"
            outputs = [self.unique_id(f"{stem}:{i}") for i in range(outputs)]
        for index, tensor_id in enumerate(outputs):
            self.create_output(op, index, tensor_id)
        return op

    def create_output(self, op: Op, index: int, tensor_id: str, dtype: str = "float32",
                      shape: Sequence[int] | None = None) -> Tensor:
        if op.has_output(index):
            raise IrError(f"op {op.debug_name()} already has an output at index {index}")
        tensor = self.add_tensor(tensor_id, dtype, shape)
        tensor.producer = op
        place(op._outputs, index, tensor)
        return tensor

    def connect_input(self, op: Op, index: int, tensor: TensorLike) -> None:
        tensor = self._resolve(tensor)
        if op.has_input(index):
            raise IrError(f"op {op.debug_name()} already has an input at index {index}")
        place(op._inputs, index, tensor)
        tensor._add_consumer(op)

    def disconnect_input(self, op: Op, index: int) -> Tensor:
        tensor = op.input(index)
        del op._inputs[index]
        tensor._remove_consumer(op)
        return tensor

    def connect_output(self, op: Op, index: int, tensor: TensorLike) -> None:
        """Make an existing producer-less tensor the output ``index`` of ``op``."""
        tensor = self._resolve(tensor)
        if tensor.producer is not None:
            raise IrError(f"tensor {tensor.id!r} already has producer "
                          f"{tensor.producer.debug_name()}")
        if op.has_output(index):
            raise IrError(f"op {op.debug_name()} already has an output at index {index}")
        place(op._outputs, index, tensor)
        tensor.producer = op

    def disconnect_output(self, op: Op, index: int) -> Tensor:
        tensor = op.output(index)
        del op._outputs[index]
        tensor.producer = None
        return tensor

    def replace_all_uses(self, old: TensorLike, new: TensorLike) -> None:
        """Make every reader of ``old`` (ops and graph outputs) read ``new`` instead."""
        old, new = self._resolve(old), self._resolve(new)
        if old is new:
            return
        for op in old.consumers:
            for index, tensor in op.input_map().items():
                if tensor is old:
                    self.disconnect_input(op, index)
                    self.connect_input(op, index, new)
        self.output_ids = [new.id if t == old.id else t for t in self.output_ids]

    def erase_op(self, op: Op, remove_outputs: bool = True) -> None:
        """Remove ``op``; its outputs must be unused (their tensors go too by default)."""
        for index, tensor in op.output_map().items():
            if tensor.num_uses() or tensor.id in self.output_ids:
                raise IrError(f"cannot erase op {op.debug_name()}: its output "
                              f"{tensor.id!r} is still used")
            self.disconnect_output(op, index)
            if remove_outputs:
                self.remove_tensor(tensor)
        for index in list(op.input_map()):
            self.disconnect_input(op, index)
        del self._ops[op.id]

    # -- order ---------------------------------------------------------------------------
    def schedule(self) -> list[Op]:
        """A topological order of the ops: of the ready ops, the one of highest
        ``schedule_priority`` (PopART's ``schedulePriority``; 0 unless a transform sets it)
        runs first, then the lowest id.

        Raises ``IrError`` naming an op on a cycle if there is one.
        """
        waiting = {op.id: len({t.producer.id for t in op.inputs if t.producer is not None})
                   for op in self._ops.values()}
        ready = [(-self._ops[op_id].settings.schedule_priority, op_id)
                 for op_id, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        order: list[Op] = []
        while ready:
            op = self._ops[heapq.heappop(ready)[1]]
            order.append(op)
            for consumer in {c.id: c for t in op.outputs for c in t.consumers}.values():
                waiting[consumer.id] -= 1
                if waiting[consumer.id] == 0:
                    heapq.heappush(ready, (-consumer.settings.schedule_priority, consumer.id))
        if len(order) != len(self._ops):
            stuck = min(op_id for op_id, count in waiting.items() if count > 0)
            raise IrError(f"graph {self.id!r} has a cycle through op "
                          f"{self._ops[stuck].debug_name()}")
        return order

    def producerless_tensors(self) -> list[Tensor]:
        """Tensors no op produces (inputs, variables, constants), in creation order."""
        return [t for t in self._tensors.values() if t.producer is None]

    def _resolve(self, tensor: TensorLike) -> Tensor:
        if isinstance(tensor, Tensor):
            if tensor.graph is not self:
                raise IrError(f"tensor {tensor.id!r} belongs to graph {tensor.graph.id!r}, "
                              f"not {self.id!r}")
            return tensor
        return self.tensor(tensor)
