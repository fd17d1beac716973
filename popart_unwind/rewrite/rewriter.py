"""The rewriter: the one door through which patterns and folds change the IR.

It records every change it makes (``changes``, a short ``log``), which ops a change touched
(so the driver can revisit them) and which ops were changed in place (so the driver can
check their shapes still hold). Constants it creates are uniqued per graph: equal dtype,
shape and bytes give one Const tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from popart_unwind.errors import CanonicalizationError
from popart_unwind.ir.dtypes import check_dtype, numpy_dtype
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.names import (
    CONSTANT_PREFIX,
    FOLDED_PREFIX,
    RESERVED_PREFIXES,
    TRANSFORM_PREFIX,
    reserved_id,
)
from popart_unwind.ir.op import ONNX_DOMAIN, Op, OpSettings, OpType
from popart_unwind.ir.serialize import array_digest
from popart_unwind.ir.tensor import Tensor, TensorType


class OpRegistryLike(Protocol):
    """What the canonicalizer needs of an op registry (``popart_unwind.ops.OpRegistry``)."""

    def lookup(self, op: Op | OpType) -> Any: ...

    def patterns_for(self, op: Op) -> tuple[Any, ...]: ...

    def has_side_effects(self, op: Op) -> bool: ...


def is_constant(tensor: Tensor) -> bool:
    """A Const tensor with data (variables may change, so they never count)."""
    return tensor.tensor_type is TensorType.CONST and tensor.data is not None


def same_attribute(a: Any, b: Any) -> bool:
    """Attribute values equal as the IR stores them (arrays by dtype, shape and bytes)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_attribute(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


class ConstantPool:
    """The Const tensors of one graph by (dtype, digest of shape and bytes)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._by_key: dict[tuple[str, tuple[int, ...], str], list[Tensor]] = {}
        for tensor in graph.tensors:
            if is_constant(tensor) and not tensor.is_graph_input():
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
                and is_constant(tensor))


def _same_data(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _plain_stem(tensor_id: str) -> str:
    for prefix in RESERVED_PREFIXES:
        if tensor_id.startswith(prefix):
            return tensor_id[len(prefix):]
    return tensor_id


class Rewriter:
    """Makes and records IR changes for patterns, folds and the global rules."""

    def __init__(self, registry: OpRegistryLike) -> None:
        self.registry = registry
        #: Number of elementary changes made so far (the driver compares it around a rule).
        self.changes = 0
        #: One line per change since the last :meth:`take_record`.
        self.log: list[str] = []
        self._affected: list[Op] = []
        self._modified: list[Op] = []
        self._loose_constants: list[Tensor] = []
        self._pools: dict[str, ConstantPool] = {}

    # -- bookkeeping ---------------------------------------------------------------------
    def _record(self, what: str, affected: Sequence[Op | None] = ()) -> None:
        self.changes += 1
        self.log.append(what)
        self._affected += [op for op in affected if op is not None]

    def take_record(self) -> tuple[list[Op], list[Op], list[Tensor]]:
        """(ops touched, ops changed in place, Const tensors that lost a use) since the
        last call; clears them."""
        record = (self._affected, self._modified, self._loose_constants)
        self._affected, self._modified, self._loose_constants = [], [], []
        self.log = []
        return record

    def pool(self, graph: Graph) -> ConstantPool:
        pool = self._pools.get(graph.id)
        if pool is None or pool.graph is not graph:
            pool = self._pools[graph.id] = ConstantPool(graph)
        return pool

    def _lost_use(self, tensor: Tensor) -> list[Op]:
        if is_constant(tensor):
            self._loose_constants.append(tensor)
        return [] if tensor.producer is None else [tensor.producer]

    # -- constants -----------------------------------------------------------------------
    def constant(self, graph: Graph, array: np.ndarray | Any, *, dtype: str | None = None,
                 prefix: str = CONSTANT_PREFIX, stem: str = "value") -> Tensor:
        """A Const tensor of ``graph`` holding ``array``: an equal one if there is one, else a
        new one named ``prefix + stem``."""
        array = np.array(array, order="C")  # a copy, keeping 0-d arrays 0-d
        dtype = check_dtype(dtype or str(array.dtype), f"{prefix}{stem}")
        if array.dtype != numpy_dtype(dtype):
            raise CanonicalizationError(f"constant {prefix}{stem}: data of dtype {array.dtype} "
                                        f"cannot be stored as {dtype}")
        pool = self.pool(graph)
        found = pool.find(dtype, array)
        if found is not None:
            return found
        tensor = graph.add_tensor(reserved_id(graph, prefix, stem), dtype, array.shape,
                                  TensorType.CONST, array)
        pool.add(tensor)
        self._record(f"created constant {tensor.id!r}")
        return tensor

    def remove_tensor(self, tensor: Tensor) -> None:
        """Remove an unused producer-less tensor (a spare or dead constant)."""
        tensor.graph.remove_tensor(tensor)
        self._record(f"removed tensor {tensor.id!r}")

    # -- replacing and erasing -----------------------------------------------------------
    def replace_all_uses(self, old: Tensor, new: Tensor) -> None:
        """Every reader of ``old`` (ops and graph outputs) reads ``new`` instead."""
        if old is new:
            return
        readers = old.consumers
        if not readers and not old.is_graph_output():
            return
        old.graph.replace_all_uses(old, new)
        self._record(f"uses of {old.id!r} now read {new.id!r}",
                     [*readers, new.producer, *self._lost_use(old)])

    def replace_op(self, op: Op, values: Sequence[Tensor | np.ndarray]) -> None:
        """Replace each output of ``op`` by an existing tensor or a numpy value (a uniqued
        Const tensor), then erase ``op``. Replacements must keep each output's dtype and
        shape."""
        outputs = list(op.output_map().values())
        if len(values) != len(outputs):
            raise CanonicalizationError(f"op {op.debug_name()} has {len(outputs)} outputs but "
                                        f"{len(values)} replacements were given")
        replacements = []
        for old, value in zip(outputs, values, strict=True):
            if isinstance(value, Tensor):
                if value is old or value.graph is not op.graph:
                    where = "its own output" if value is old else "a tensor of another graph"
                    raise CanonicalizationError(f"op {op.debug_name()}: output {old.id!r} "
                                                f"cannot be replaced by {where} {value.id!r}")
                _check_replacement(op, old, value.dtype, value.shape, value.id)
                replacements.append((old, value))
                continue
            array = np.asarray(value)
            # an untyped output (no inference yet) takes the folded value's dtype
            dtype = old.dtype if old.shape is not None else check_dtype(str(array.dtype), old.id)
            _check_replacement(op, old, dtype, tuple(array.shape), "a folded value")
            if array.dtype != numpy_dtype(dtype):
                raise CanonicalizationError(
                    f"op {op.debug_name()}: folded value for output {old.id!r} has dtype "
                    f"{array.dtype}, expected {numpy_dtype(dtype)}")
            if old.num_uses() or old.is_graph_output():
                new = self.constant(op.graph, array, dtype=dtype, prefix=FOLDED_PREFIX,
                                    stem=_plain_stem(old.id))
                replacements.append((old, new))
        for old, new in replacements:
            self.replace_all_uses(old, new)
        self.erase_op(op)

    def erase_op(self, op: Op) -> None:
        """Erase ``op``; its outputs must be unused (IrError otherwise)."""
        inputs = op.inputs
        op.graph.erase_op(op)
        lost = [producer for t in inputs for producer in self._lost_use(t)]
        self._record(f"erased {op.debug_name()}", lost)

    # -- creating and changing ops -------------------------------------------------------
    def create_op(self, graph: Graph, op_type: OpType | str, inputs: Sequence[Tensor | None],
                  attributes: dict[str, Any] | None = None, like: Op | None = None,
                  num_outputs: int = 1) -> Op:
        """A new op whose outputs have reserved ids and inferred dtypes and shapes.

        It inherits scope and placement attributes from ``like``; a plain name means an
        ``ai.onnx`` op at ``like``'s opset version.
        """
        if isinstance(op_type, str):
            version = like.type.version if like is not None else 1
            op_type = OpType(ONNX_DOMAIN, op_type, version)
        opdef = self.registry.lookup(op_type)
        if opdef is None or opdef.infer is None:
            raise CanonicalizationError(f"cannot create an op of type {op_type}: the registry "
                                        f"has no shape rule for it")
        settings = OpSettings(scope=like.settings.scope if like is not None else "")
        op = graph.create_op(op_type, inputs, outputs=[], attributes=attributes,
                             settings=settings)
        if like is not None:
            op.inherit_placement_attributes(like)
        for index in range(num_outputs):
            stem = f"{op_type.name}{op.id}:{index}"
            graph.create_output(op, index, reserved_id(graph, TRANSFORM_PREFIX, stem))
        try:
            inferred = opdef.infer(op)
        except Exception:
            graph.erase_op(op)
            raise
        for tensor, (dtype, shape) in zip(op.outputs, inferred, strict=True):
            tensor.dtype, tensor.shape = dtype, tuple(shape)
        self._record(f"created {op.debug_name()}", [op, *(t.producer for t in op.inputs)])
        return op

    def set_input(self, op: Op, index: int, tensor: Tensor | None) -> None:
        """Make input ``index`` of ``op`` read ``tensor`` (None: leave it absent)."""
        old = op.input(index) if op.has_input(index) else None
        if old is tensor:
            return
        touched: list[Op | None] = [op, *_readers(op)]
        if old is not None:
            op.graph.disconnect_input(op, index)
            touched += self._lost_use(old)
        if tensor is not None:
            op.graph.connect_input(op, index, tensor)
            touched.append(tensor.producer)
        self._modified.append(op)
        new_id = None if tensor is None else tensor.id
        self._record(f"{op.debug_name()} input {index} now reads {new_id!r}", touched)

    def set_attribute(self, op: Op, key: str, value: Any) -> None:
        if key in op.attributes and same_attribute(op.attributes[key], value):
            return
        op.attributes[key] = value
        self._modified.append(op)
        self._record(f"{op.debug_name()} attribute {key!r} set", [op, *_readers(op)])


def _readers(op: Op) -> list[Op]:
    return [reader for tensor in op.outputs for reader in tensor.consumers]


def _check_replacement(op: Op, old: Tensor, dtype: str, shape: tuple[int, ...] | None,
                       what: str) -> None:
    """A replacement must look like the output it replaces (when that output is typed)."""
    if old.shape is None:
        return
    if shape != old.shape or dtype != old.dtype:
        raise CanonicalizationError(
            f"op {op.debug_name()}: output {old.id!r} ({old.dtype} {old.shape}) cannot be "
            f"replaced by {what} ({dtype} {shape})")
