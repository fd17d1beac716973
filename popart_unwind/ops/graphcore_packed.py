"""Op family: PopART's ai.graphcore PackedDataBlock, which runs a ``callback`` graph on
sequences unpacked from packed data and packs its results back.

Inputs come in threes, one per packed input i: ``data_i`` (sequences laid back to back along
axis 0), ``offsets_i`` and ``lengths_i`` (where each sequence starts in ``data_i`` and how
many rows it has); then the result's ``offsets`` and ``lengths``. Attributes:
``maxSequenceLengths`` (one per packed input: the rows each unpacked sequence is padded to),
``resultSize`` (the result's axis 0), ``callbackBatchSize`` (B: sequences per callback run)
and the ``callback`` graph. The importer reads the graph attribute into a subgraph, as it
reads a Loop's body; outer values the callback reads become implicit inputs after the
explicit ones.

Callback input i is ``[B, maxSequenceLengths[i], *data_i.shape[1:]]`` of ``data_i``'s type
(PopART types the callback's inputs so, whatever the GraphProto declares); its one output
is ``[B, M, ...]``. The result is ``[resultSize, *output.shape[2:]]`` of the output's type.
The callback runs ``L / B`` times, L the offsets' length: run k unpacks sequences
``k*B .. k*B+B-1`` (each zero-padded to its maximum length), and sequence j of its output
writes its first ``lengths[k*B+j]`` rows to the result at ``offsets[k*B+j]``; rows no
sequence writes stay zero (PopART's PackedDataBlock pattern: a zeroed result, a Loop of
SequenceSlices around the callback).

Values: ``reference_values`` evaluates the op, the callback through its ops' own folds. It is
no ``OpDef.fold``: folding the op away during canonicalization would leave its callback
unreachable mid-transform, and no op that runs a subgraph (Call, Loop, If, Scan) is folded.

Layouts: a barrier (the base rule: its result laid out linearly, as PopART's zeroed result
tensor is, and no exchange counted for the unpacking and packing copies, an
approximation). The callback is a subgraph of its own, planned once for its call site; its
ops are charged once per PackedDataBlock, as a Loop body's are, not once per callback run
(``cost/walk.call_counts``). PopART makes no gradient ops for it, so no gradient flows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popart_unwind.errors import IrError, PopartUnwindError, ShapeError
from popart_unwind.ir.dtypes import numpy_dtype
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op, register_op_class
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import constant_value, input_shape
from popart_unwind.ops.control import CallSite, body_has_side_effects
from popart_unwind.ops.gradient import GradientBuilder
from popart_unwind.ops.registry import REGISTRY, Constants, InferredOutputs, OpDef, register
from popart_unwind.rewrite import Rewriter

_INTEGER_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class PackedDataBlockOp(CallSite):
    """PopART's ``PackedDataBlockOp``: op input ``3*i`` (packed data i) feeds callback input i
    after unpacking (a stacked input: the two differ in shape); offsets and lengths feed no
    callback input; implicit inputs feed the callback inputs after the N data inputs. Op
    output 0 is callback output 0 packed (a stacked output)."""

    CALLED_GRAPH_ATTRIBUTES = ("callback",)

    def called_graphs(self) -> list[Graph]:
        graph_id = self.attributes.get("callback")
        if not isinstance(graph_id, str) or not self.graph.ir.has_graph(graph_id):
            raise IrError(f"op {self.debug_name()}: PackedDataBlock needs a 'callback' graph "
                          f"attribute, got {graph_id!r}")
        return [self.graph.ir.graph(graph_id)]

    def data_inputs(self) -> int:
        """N, the packed inputs: the explicit inputs are 3N + 2 (PopART's layout)."""
        explicit = self._explicit_inputs()
        if explicit < 5 or (explicit - 2) % 3:
            raise ShapeError(f"op {self.debug_name()}: PackedDataBlock takes (data, offsets, "
                             f"lengths) per packed input and then the result's offsets and "
                             f"lengths (3N + 2 inputs, N at least 1), got {explicit}")
        return (explicit - 2) // 3

    def op_in_to_subgraph_in_index(self, graph: Graph, op_in: int) -> int | None:
        self._check_called(graph)
        explicit, count = self._explicit_inputs(), self.data_inputs()
        if op_in >= explicit:
            inner = count + op_in - explicit
        elif op_in < 3 * count and op_in % 3 == 0:
            inner = op_in // 3
        else:
            return None
        return inner if inner < len(graph.input_ids) else None

    def subgraph_in_to_op_in_index(self, graph: Graph, graph_in: int) -> int | None:
        self._check_called(graph)
        count = self.data_inputs()
        op_in = 3 * graph_in if graph_in < count else self._explicit_inputs() + graph_in - count
        return op_in if self.has_input(op_in) else None

    def feeds_no_subgraph(self, op_in: int) -> bool:
        """Offsets and lengths are read by the unpacking and packing, not by the callback."""
        return op_in < self._explicit_inputs() and not (
            op_in < 3 * self.data_inputs() and op_in % 3 == 0)

    def stacked_input(self, op_in: int) -> bool:
        return op_in < 3 * self.data_inputs() and op_in % 3 == 0

    def stacked_output(self, op_out: int) -> bool:
        return True

    def same_every_run(self, graph: Graph, graph_in: int) -> bool:
        """Each run reads other sequences; only the implicit inputs stay the same."""
        return graph_in >= self.data_inputs()

    def callee_input_type(self, graph: Graph, graph_in: int):
        """Callback input i is ``[B, maxSequenceLengths[i], *data_i.shape[1:]]``."""
        if graph_in >= self.data_inputs():
            return super().callee_input_type(graph, graph_in)
        data = self.input(3 * graph_in)
        if data.shape is None or not data.shape:
            return None
        batch, maxima = _batch_and_maxima(self)
        return data.dtype, (batch, maxima[graph_in], *data.shape[1:])

    def drop_subgraph_input(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        """A data input the callback no longer reads: its three op inputs and its maximum
        length go (the last one cannot: the op needs a packed input); an implicit input:
        its op input goes."""
        count = self.data_inputs()
        if index >= count:
            CallSite.drop_subgraph_input(self, graph, self._explicit_inputs() + index - count,
                                         rewriter)
            rewriter.set_attribute(self, "num_implicit_inputs",
                                   int(self.attributes["num_implicit_inputs"]) - 1)
            return
        if count == 1:
            raise IrError(f"cannot drop the only packed input of {self.debug_name()}")
        for _ in range(3):
            CallSite.drop_subgraph_input(self, graph, 3 * index, rewriter)
        maxima = list(self.attributes["maxSequenceLengths"])
        rewriter.set_attribute(self, "maxSequenceLengths", maxima[:index] + maxima[index + 1:])

    def drop_subgraph_output(self, graph: Graph, index: int, rewriter: Rewriter) -> None:
        raise IrError(f"cannot drop output {index} of the callback of {self.debug_name()}: "
                      f"its one output is what the op packs")


# -- the shape rule ---------------------------------------------------------------------------
def _batch_and_maxima(op: PackedDataBlockOp) -> tuple[int, list[int]]:
    """(callbackBatchSize, maxSequenceLengths), checked: B at least 1, one maximum of at
    least 1 per packed input."""
    batch = op.attributes.get("callbackBatchSize")
    maxima = op.attributes.get("maxSequenceLengths")
    if not isinstance(batch, int) or batch < 1:
        raise ShapeError(f"op {op.debug_name()}: PackedDataBlock needs a 'callbackBatchSize' "
                         f"of at least 1, got {batch!r}")
    count = op.data_inputs()
    if (not isinstance(maxima, list) or len(maxima) != count
            or any(not isinstance(m, int) or m < 1 for m in maxima)):
        raise ShapeError(f"op {op.debug_name()}: PackedDataBlock needs 'maxSequenceLengths' "
                         f"of {count} positive length(s), one per packed input, got {maxima!r}")
    return batch, list(maxima)


def _result_size(op: Op) -> int:
    size = op.attributes.get("resultSize")
    if not isinstance(size, int) or size < 0:
        raise ShapeError(f"op {op.debug_name()}: PackedDataBlock needs a non-negative "
                         f"'resultSize', got {size!r}")
    return size


def _index_inputs(op: PackedDataBlockOp) -> list[int]:
    """The offsets and lengths inputs: of each packed input, then of the result."""
    count = op.data_inputs()
    return [i for k in range(count) for i in (3 * k + 1, 3 * k + 2)] + [3 * count, 3 * count + 1]


def _check_class(op: Op) -> None:
    if not isinstance(op, PackedDataBlockOp):
        raise IrError(f"op {op.debug_name()} was built as {type(op).__name__}, not as "
                      f"PackedDataBlockOp (its class, which knows its callback)")


def _infer_packed_data_block(op: Op) -> InferredOutputs:
    _check_class(op)
    batch, _ = _batch_and_maxima(op)
    size = _result_size(op)
    count = op.data_inputs()
    sizes = set()
    for index in _index_inputs(op):
        shape = input_shape(op, index)
        if len(shape) != 1 or op.input(index).dtype not in _INTEGER_TYPES:
            raise ShapeError(f"op {op.debug_name()}: offsets and lengths must be 1-D integers, "
                             f"input {index} ({op.input(index).id!r}) is {op.input(index).dtype} "
                             f"{shape}")
        sizes.add(shape[0])
    if len(sizes) != 1 or next(iter(sizes)) % batch:
        raise ShapeError(f"op {op.debug_name()}: every offsets and lengths input must hold "
                         f"one count per sequence, a multiple of callbackBatchSize {batch}, "
                         f"got lengths {sorted(sizes)}")
    callback = op.called_graphs()[0]
    implicit = int(op.attributes.get("num_implicit_inputs", 0))
    if len(callback.input_ids) != count + implicit or len(callback.output_ids) != 1:
        raise ShapeError(f"op {op.debug_name()}: callback {callback.id!r} must have "
                         f"{count + implicit} input(s) (one per packed input, then outer "
                         f"values) and one output, has {len(callback.input_ids)} and "
                         f"{len(callback.output_ids)}")
    for i in range(count):
        if not input_shape(op, 3 * i):
            raise ShapeError(f"op {op.debug_name()}: packed data {op.input(3 * i).id!r} must "
                             f"have an axis of sequences")
        want = op.callee_input_type(callback, i)
        inner = callback.inputs[i]
        if inner.shape is not None and (inner.dtype, inner.shape) != want:
            raise ShapeError(f"op {op.debug_name()}: callback input {inner.id!r} is "
                             f"{inner.dtype} {inner.shape}, the unpacked sequences "
                             f"{want[0]} {want[1]}")
    out = callback.outputs[0]
    if out.shape is None:
        return [(out.dtype, None)]
    if len(out.shape) < 2 or out.shape[0] != batch:
        raise ShapeError(f"op {op.debug_name()}: callback output {out.id!r} {out.shape} must "
                         f"be [callbackBatchSize={batch}, sequence length, ...]")
    return [(out.dtype, (size, *out.shape[2:]))]


# -- values -----------------------------------------------------------------------------------
def reference_values(op: Op, operands: Constants) -> list[np.ndarray] | None:
    """The op's result from its inputs' values (by input index), the callback evaluated by
    its ops' folds; None where a value is missing, the callback cannot be folded, or the
    indices leave what PopART states: a sequence outside its data or longer than its maximum,
    a result run outside the result or longer than the callback's sequences, or a zero length
    before a non-zero one within one callback batch (PopART's lowering copies each batch with
    one SequenceSlice, whose copies this IR reads as ending at the first zero count)."""
    _check_class(op)
    batch, maxima = _batch_and_maxima(op)
    count, explicit = op.data_inputs(), op._explicit_inputs()
    if any(i >= len(operands) or operands[i] is None for i in range(explicit)):
        return None
    data = [np.asarray(operands[3 * i]) for i in range(count)]
    indices = [np.asarray(operands[i]).astype(np.int64) for i in _index_inputs(op)]
    offsets, lengths = indices[0::2], indices[1::2]  # per packed input, then the result's
    if any(_zero_before_nonzero(n, batch) for n in lengths):
        return None
    outer = [operands[i] if i < len(operands) else None
             for i in range(explicit, explicit + int(op.attributes.get("num_implicit_inputs", 0)))]
    out_tensor = op.output(0)
    if out_tensor.shape is None or any(v is None for v in outer):
        return None
    result = np.zeros(out_tensor.shape, numpy_dtype(out_tensor.dtype))
    for run in range(offsets[0].shape[0] // batch):
        picked = range(run * batch, run * batch + batch)
        unpacked = []
        for i in range(count):
            padded = np.zeros((batch, maxima[i], *data[i].shape[1:]), data[i].dtype)
            for j, seq in enumerate(picked):
                start, rows = int(offsets[i][seq]), int(lengths[i][seq])
                if start < 0 or rows < 0 or rows > maxima[i] or start + rows > data[i].shape[0]:
                    return None
                padded[j, :rows] = data[i][start:start + rows]
            unpacked.append(padded)
        outputs = _evaluate(op.called_graphs()[0], [*unpacked, *outer])
        if outputs is None:
            return None
        made = np.asarray(outputs[0])
        for j, seq in enumerate(picked):
            start, rows = int(offsets[count][seq]), int(lengths[count][seq])
            if start < 0 or rows < 0 or rows > made.shape[1] or start + rows > result.shape[0]:
                return None
            result[start:start + rows] = made[j, :rows]
    return [result]


def _zero_before_nonzero(lengths: np.ndarray, batch: int) -> bool:
    for run in lengths.reshape(-1, batch):
        zero = np.flatnonzero(run == 0)
        if zero.size and np.any(run[zero[0]:] != 0):
            return True
    return False


def _evaluate(graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """``graph``'s outputs for ``inputs``, each op computed by its own fold (so exactly the
    values the family states); None at an op without a fold, one that draws random numbers,
    has effects or runs a subgraph, a weight (a variable's value can change), or a fold that
    gives nothing."""
    env: dict[str, np.ndarray] = {t.id: np.asarray(v) for t, v in zip(graph.inputs, inputs,
                                                                       strict=True)}

    def value(tensor: Tensor) -> np.ndarray | None:
        return env[tensor.id] if tensor.id in env else constant_value(tensor)

    for op in graph.schedule():
        opdef = REGISTRY.lookup(op)
        if (opdef is None or opdef.fold is None or opdef.random or opdef.has_side_effects(op)
                or op.CALLED_GRAPH_ATTRIBUTES):
            return None
        operands = [value(op.input(i)) if op.has_input(i) else None
                    for i in range(max(op.input_map(), default=-1) + 1)]
        if any(operands[i] is None for i in op.input_map()):
            return None
        try:
            results = opdef.fold(op, operands)
        except (PopartUnwindError, ValueError, TypeError, IndexError, ArithmeticError):
            return None
        if results is None:
            return None
        for index, tensor in op.output_map().items():
            made = results[index]
            made = value(made) if isinstance(made, Tensor) else np.asarray(made)
            if made is None:
                return None
            env[tensor.id] = made
    found = [value(t) for t in graph.outputs]
    return None if any(v is None for v in found) else found


register_op_class(GRAPHCORE_DOMAIN, "PackedDataBlock", PackedDataBlockOp)
def _no_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """None for every input: PopART's PackedDataBlockOp makes no gradient ops."""
    return [None] * (max(op.input_map(), default=-1) + 1)


register(OpDef("PackedDataBlock", domain=GRAPHCORE_DOMAIN, infer=_infer_packed_data_block,
               side_effects=body_has_side_effects, gradient=_no_gradient))
