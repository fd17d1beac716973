"""The rewriter: the one door through which transforms, patterns and folds change the IR.

It records every change it makes (``changes``, a short ``log``), so whoever hands it out can
hold a claim of "changed" or "unchanged" against what happened without comparing IRs: the
transform registry makes one per application, the canonicalizer's driver one per run. It
also notes which ops a change touched (so the driver can revisit them) and which ops were
changed in place (so the driver can check their shapes still hold). Constants it creates
are uniqued per graph (``constant_pool``): equal dtype, shape and bytes give one Const
tensor. Setting what is already there is not a change. The main graph's output ids never
change: a replaced output's id passes to its replacement (docs/canonicalizer.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from popart_unwind.errors import CanonicalizationError, IrError
from popart_unwind.ir.dtypes import check_dtype, numpy_dtype
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.names import (
    CONSTANT_PREFIX,
    FOLDED_PREFIX,
    RESERVED_PREFIXES,
    TRANSFORM_PREFIX,
    reserved_id,
)
from popart_unwind.ir.op import ONNX_DOMAIN, PLACEMENT_FIELDS, Op, OpSettings, OpType
from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.ir.tile_mapping import TileIntervals, TileMapping
from popart_unwind.rewrite.constant_pool import ConstantPool, is_constant

if TYPE_CHECKING:
    from popart_unwind.ir.ir import Ir


class OpRegistryLike(Protocol):
    """What the canonicalizer needs of an op registry (``popart_unwind.ops.OpRegistry``)."""

    def lookup(self, op: Op | OpType) -> Any: ...

    def patterns_for(self, op: Op) -> tuple[Any, ...]: ...

    def has_side_effects(self, op: Op) -> bool: ...


def same_attribute(a: Any, b: Any) -> bool:
    """Attribute values equal as the IR stores them (arrays by dtype, shape and bytes)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_attribute(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _plain_stem(tensor_id: str) -> str:
    for prefix in RESERVED_PREFIXES:
        if tensor_id.startswith(prefix):
            return tensor_id[len(prefix):]
    return tensor_id


class Rewriter:
    """Makes and records IR changes for transforms, patterns, folds and the global rules.

    ``registry`` gives the shape rules of the ops :meth:`create_op` makes.
    """

    def __init__(self, registry: OpRegistryLike) -> None:
        self.registry = registry
        #: Number of elementary changes made so far (compared around a rule or a transform).
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
        # a copy, keeping 0-d arrays 0-d; a read-only fill of one value broadcast over its
        # shape (a folded ConstantOfShape) is kept as it is, its elements never made
        if not _one_value_broadcast(array):
            array = np.array(array, order="C")
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

    def variable(self, graph: Graph, prefix: str, stem: str, dtype: str,
                 shape: Sequence[int]) -> Tensor:
        """A new Variable of ``graph`` named ``prefix + stem`` (an optimizer's state), all
        zeros. Its data is one zero seen at every position (a numpy broadcast view), so a
        state as large as a model's weights takes no host memory while it is planned."""
        zero = np.zeros((), dtype=numpy_dtype(check_dtype(dtype, prefix + stem)))
        tensor = graph.add_tensor(reserved_id(graph, prefix, stem), dtype, tuple(shape),
                                  TensorType.VARIABLE, np.broadcast_to(zero, tuple(shape)))
        self._record(f"created variable {tensor.id!r}")
        return tensor

    # -- tensors -------------------------------------------------------------------------
    def remove_tensor(self, tensor: Tensor) -> None:
        """Remove an unused producer-less tensor that is no graph input or output (a spare
        or dead constant, an unused weight)."""
        tensor.graph.remove_tensor(tensor)
        self._record(f"removed tensor {tensor.id!r}")

    def set_type(self, tensor: Tensor, dtype: str, shape: Sequence[int] | None) -> None:
        """Give ``tensor`` a dtype and a shape (None: unknown), as shape inference does."""
        shape = None if shape is None else tuple(shape)
        if tensor.dtype == dtype and tensor.shape == shape:
            return
        tensor.dtype, tensor.shape = check_dtype(dtype, tensor.id), shape
        # its readers may fold, or be typed, now that the shape is known
        self._record(f"{tensor.id!r} is now {dtype} {shape}", tensor.consumers)

    def set_tile_mapping(self, tensor: Tensor,
                         mapping: TileMapping | TileIntervals | None) -> None:
        """Write a layout plan's mapping (Poplar's format) onto ``tensor``; None clears it.

        The mapping is stored as given, not copied: plans hand over immutable mappings.
        """
        old = tensor.tile_mapping
        if old is mapping or (old is not None and mapping is not None and mapping == old):
            return
        tensor.tile_mapping = mapping
        self._record(f"tile mapping of {tensor.id!r} set")

    # -- replacing and erasing -----------------------------------------------------------
    def replace_all_uses(self, old: Tensor, new: Tensor) -> None:
        """Every reader of ``old`` (ops and graph outputs) reads ``new`` instead.

        The main graph's outputs keep their ids (the model's interface, PopART's anchors;
        docs/canonicalizer.md): an output ``old`` that will go (it has a producer) passes
        its id on to ``new`` if that is an ordinary intermediate, else to a copy of ``new``
        if it is a constant, else to one ``Identity`` of ``new``. An output that stays (no
        producer), or an ``Identity`` that already holds the name for ``new``, keeps it.
        """
        if old is new:
            return
        graph = old.graph
        readers = old.consumers
        if not _keeps_output_ids(graph) or not old.is_graph_output():
            if not readers and not old.is_graph_output():
                return
            graph.replace_all_uses(old, new)
            self._record(f"uses of {old.id!r} now read {new.id!r}",
                         [*readers, new.producer, *self._lost_use(old)])
            return
        outputs = list(graph.output_ids)
        if old.producer is None or holds_output_name(old.producer, new):
            if not readers:
                return
            graph.replace_all_uses(old, new)
            graph.output_ids = outputs
            self._record(f"op readers of {old.id!r} now read {new.id!r} (the graph output "
                         f"stays)", [*readers, new.producer])
            return
        name, lost, renamable = old.id, self._lost_use(old), can_take_name(new)
        graph.replace_all_uses(old, new)
        graph.output_ids = outputs
        graph.rename_tensor(old, reserved_id(graph, TRANSFORM_PREFIX,
                                             f"replaced_{_plain_stem(name)}"))
        holder = self._output_holder(graph, name, new, renamable, like=lost[0])
        graph.output_ids = outputs
        self._record(f"uses of {name!r} now read {new.id!r}; graph output {name!r} is "
                     f"{holder}", [*readers, new.producer, *lost])

    def _output_holder(self, graph: Graph, name: str, new: Tensor, renamable: bool,
                       like: Op) -> str:
        """Give the graph output id ``name`` (free again) to ``new`` or to a tensor equal
        to it; says which."""
        if renamable:
            old_id = new.id
            graph.rename_tensor(new, name)
            return f"{old_id!r} renamed"
        if is_constant(new):
            graph.add_tensor(name, new.dtype, new.shape, TensorType.CONST,
                             np.array(new.data, order="C"))
            return "a copy of the constant"
        identity = self.create_op(graph, "Identity", [new], like=like)
        graph.rename_tensor(identity.output(0), name)
        return f"produced by {identity.debug_name()}"

    def _fold_graph_output(self, old: Tensor, array: np.ndarray, dtype: str) -> None:
        """A main-graph output folded to ``array`` becomes a Const tensor under its own id,
        outside the constant pool (an equal constant elsewhere is another tensor: sharing
        one would merge two outputs, or rename a weight); its readers read it too."""
        graph, name = old.graph, old.id
        readers, outputs, lost = old.consumers, list(graph.output_ids), self._lost_use(old)
        graph.rename_tensor(old, reserved_id(graph, TRANSFORM_PREFIX,
                                             f"replaced_{_plain_stem(name)}"))
        tensor = graph.add_tensor(name, dtype, array.shape, TensorType.CONST,
                                  np.array(array, order="C"))
        graph.replace_all_uses(old, tensor)
        graph.output_ids = outputs
        self._record(f"graph output {name!r} folded to a constant", [*readers, *lost])

    def replace_op(self, op: Op, values: Sequence[Tensor | np.ndarray]) -> bool:
        """Replace each output of ``op`` by an existing tensor or a numpy value (a uniqued
        Const tensor), then erase ``op``. Replacements must keep each output's dtype and
        shape. True iff the IR changed: an ``Identity`` that holds a graph output's id for
        its input (:func:`holds_output_name`) stays, and is no change."""
        outputs = list(op.output_map().values())
        if len(values) != len(outputs):
            raise CanonicalizationError(f"op {op.debug_name()} has {len(outputs)} outputs but "
                                        f"{len(values)} replacements were given")
        before = self.changes
        replacements: list[tuple[Tensor, Tensor]] = []
        folded: list[tuple[Tensor, np.ndarray, str]] = []
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
            if old.is_graph_output() and _keeps_output_ids(op.graph):
                folded.append((old, array, dtype))
            elif old.num_uses() or old.is_graph_output():
                new = self.constant(op.graph, array, dtype=dtype, prefix=FOLDED_PREFIX,
                                    stem=_plain_stem(old.id))
                replacements.append((old, new))
        for old, new in replacements:
            self.replace_all_uses(old, new)
        for old, array, dtype in folded:
            self._fold_graph_output(old, array, dtype)
        if not any(t.is_graph_output() for t in op.outputs):
            self.erase_op(op)
        return self.changes != before

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
        """A new op of a type the registry has a shape rule for, outputs named
        ``Transform___<Type><op id>:<index>`` (a reserved prefix, so they never collide
        with a model's names).

        It inherits scope and every set placement attribute from ``like`` (PopART's
        ``inheritPlacementAttributes``: what keeps VGRAPH/PSTAGE/EPHASE/BPHASE true across a
        change); a plain name means an ``ai.onnx`` op at ``like``'s opset version. Output
        dtypes and shapes come from the rule at once when every input's shape is known;
        otherwise they are left for shape inference. A rule that fails leaves nothing behind.
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
        if all(t.shape is not None for t in op.inputs):
            try:
                # a rule may type trailing optional outputs (LayerNormalization's
                # statistics, Dropout's mask) the op was created without
                inferred = list(opdef.infer(op))[:num_outputs]
                if len(inferred) != num_outputs:
                    raise IrError(f"the shape rule of {op_type} gives {len(inferred)} "
                                  f"outputs; op {op.debug_name()} was created with "
                                  f"{num_outputs}")
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

    def move_input(self, op: Op, index: int, new_index: int) -> None:
        """Op input ``index`` moves to the free slot ``new_index`` (renumbering inputs)."""
        graph = op.graph
        self._move(op, "input", index, new_index, op.has_input, graph.connect_input,
                   graph.disconnect_input)

    def set_attribute(self, op: Op, key: str, value: Any) -> None:
        """Set attribute ``key`` of ``op`` (an equal value already there is no change)."""
        if key in op.attributes and same_attribute(op.attributes[key], value):
            return
        op.attributes[key] = value
        self._modified.append(op)
        self._record(f"{op.debug_name()} attribute {key!r} set", [op, *_readers(op)])

    def set_op_name(self, op: Op, name: str) -> None:
        """Name ``op`` (``OpSettings.name``): names label ops in logs and reports."""
        if op.settings.name == name:
            return
        old = op.debug_name()
        op.settings.name = name
        self._record(f"{old} renamed {name!r}")

    def mark_recomputed(self, op: Op, original: Op) -> None:
        """Record that ``op`` recomputes ``original`` (``OpSettings.recomputed_from``): a
        clone of it, computing the same values in the backward pass."""
        if original.graph is not op.graph or original.type != op.type:
            raise IrError(f"{op.debug_name()} cannot recompute {original.debug_name()}: "
                          f"a recomputing op is a clone in the same graph")
        op.settings.recomputed_from = original.id
        self._record(f"{op.debug_name()} recomputes {original.debug_name()}", [op])

    def mark_serialized(self, op: Op, layer: int, index: int, axes: str) -> None:
        """Record that ``op`` is piece ``index`` of the serialized layer whose forward op was
        ``layer``, computing the pass of cube axes ``axes`` (``OpSettings.serialized``)."""
        op.settings.serialized = (layer, index, axes)
        self._record(f"{op.debug_name()} is piece {index} of layer {layer} ({axes})", [op])

    def set_placement(self, op: Op, field: str, value: int) -> None:
        """Set placement attribute ``field`` of ``op`` (``OpSettings``: ``vgraph_id``,
        ``pipeline_stage``, ...)."""
        if field not in PLACEMENT_FIELDS:
            raise IrError(f"{field!r} is no placement attribute; known: {PLACEMENT_FIELDS}")
        if getattr(op.settings, field) == value:
            return
        setattr(op.settings, field, int(value))
        self._record(f"{op.debug_name()} {field} {value}", [op])

    def set_schedule_priority(self, op: Op, priority: float) -> None:
        """Of the ops ready to run, those of higher priority run first
        (``OpSettings.schedule_priority``)."""
        if op.settings.schedule_priority == priority:
            return
        op.settings.schedule_priority = float(priority)
        self._record(f"{op.debug_name()} schedule priority {priority}", [op])

    def remove_output(self, op: Op, index: int) -> None:
        """Drop output ``index`` of ``op`` together with its tensor, which must be unused."""
        tensor = op.output(index)
        if tensor.num_uses() or tensor.is_graph_output():
            raise IrError(f"output {index} ({tensor.id!r}) of {op.debug_name()} is still used")
        op.graph.remove_tensor(op.graph.disconnect_output(op, index))
        self._record(f"{op.debug_name()} lost output {index} ({tensor.id!r})", [op])

    def move_output(self, op: Op, index: int, new_index: int) -> None:
        """Op output ``index`` (its tensor) moves to the free slot ``new_index``."""
        graph = op.graph
        self._move(op, "output", index, new_index, op.has_output, graph.connect_output,
                   graph.disconnect_output)

    def _move(self, op: Op, side: str, index: int, new_index: int, taken: Any, connect: Any,
              disconnect: Any) -> None:
        if taken(new_index):
            raise IrError(f"op {op.debug_name()} already has an {side} at index {new_index}")
        connect(op, new_index, disconnect(op, index))
        self._record(f"{op.debug_name()} {side} {index} is now {side} {new_index}", [op])

    # -- graphs --------------------------------------------------------------------------
    def create_graph(self, ir: Ir, graph_id: str) -> Graph:
        """A new, empty subgraph of ``ir`` (its id must be free)."""
        graph = ir.create_graph(graph_id)
        self._record(f"created graph {graph_id!r}")
        return graph

    def add_graph_output(self, graph: Graph, tensor: Tensor) -> None:
        """Append ``tensor`` (of ``graph``) to ``graph``'s outputs."""
        graph.mark_output(tensor)
        self._record(f"graph {graph.id!r} gained output {tensor.id!r}")

    def add_graph_input(self, graph: Graph, tensor_id: str, dtype: str,
                        shape: Sequence[int] | None) -> Tensor:
        """A new tensor appended to ``graph``'s inputs."""
        tensor = graph.add_tensor(tensor_id, dtype, shape)
        graph.input_ids.append(tensor.id)
        self._record(f"graph {graph.id!r} gained input {tensor.id!r}")
        return tensor

    def remove_graph_input(self, graph: Graph, index: int) -> None:
        """Remove input ``index`` of ``graph`` and its tensor, which must be unused; the
        later inputs move down by one. Call sites are the caller's to keep in step."""
        tensor = graph.inputs[index]
        if tensor.num_uses() or tensor.is_graph_output():
            raise IrError(f"input {index} ({tensor.id!r}) of graph {graph.id!r} is still used")
        graph.input_ids.pop(index)
        graph.remove_tensor(tensor)
        self._record(f"graph {graph.id!r} lost input {index} ({tensor.id!r})")

    def remove_graph_output(self, graph: Graph, index: int) -> None:
        """Drop output ``index`` of ``graph`` (the tensor stays); the later outputs move
        down by one. Call sites are the caller's to keep in step."""
        tensor_id = graph.output_ids.pop(index)
        self._record(f"graph {graph.id!r} lost output {index} ({tensor_id!r})")

    def remove_graph(self, graph: Graph) -> None:
        """Remove a subgraph that no op calls any more."""
        graph.ir.remove_graph(graph.id)
        self._record(f"removed graph {graph.id!r}")


def _keeps_output_ids(graph: Graph) -> bool:
    """Only the main graph's output ids are an interface; a subgraph's outputs are
    positional (call sites map them by index), so their slots may name other tensors."""
    return graph is graph.ir.main_graph


def can_take_name(tensor: Tensor) -> bool:
    """An ordinary intermediate: computed by an op, no graph input or output, so its id
    names nothing outside (a graph output's id can pass to it)."""
    return (tensor.tensor_type is TensorType.ACT_GRAD and tensor.producer is not None
            and not tensor.is_graph_input() and not tensor.is_graph_output())


def holds_output_name(op: Op, source: Tensor) -> bool:
    """``op`` is the ``Identity`` the rewriter would make to keep a graph output's id for
    ``source`` (a tensor with its own identity: input, weight, other output), so
    replacing it by ``source`` would only make it again."""
    return (op.is_type("Identity", ONNX_DOMAIN) and op.input_map() == {0: source}
            and len(op.outputs) == 1 and op.output(0).is_graph_output()
            and _keeps_output_ids(op.graph) and not can_take_name(source)
            and not is_constant(source))


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


def _one_value_broadcast(array: Any) -> bool:
    """A read-only array of several elements that all read one (every stride 0)."""
    return (isinstance(array, np.ndarray) and not array.flags.writeable and array.size > 1
            and not any(array.strides))
