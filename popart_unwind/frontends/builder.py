"""A graph builder in the spirit of ``popart.Builder``: build an Ir op by op from Python.

Ops take ONNX names and attributes (``b.ai_onnx.matmul([a, w])``), and every op's output
shapes are inferred as it is added, so a mistake raises at the call that made it. Placement
(virtual graph, pipeline stage, execution phase) and name scopes are set by context managers,
as PopART's builder does; subgraph builders and ``call`` make PopART CallOps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from popart_unwind.errors import IrError, ShapeError
from popart_unwind.ir.dtypes import check_dtype
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.names import CONSTANT_PREFIX, reserved_id
from popart_unwind.ir.op import (
    DEFAULT_ONNX_OPSET,
    GRAPHCORE_DOMAIN,
    ONNX_DOMAIN,
    Op,
    OpSettings,
    OpType,
)
from popart_unwind.ir.tensor import TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.shape_inference import infer_op
from popart_unwind.options import SessionOptions

#: ONNX op names, so that ``b.ai_onnx.layer_normalization`` and ``layernormalization``
#: both find ``LayerNormalization`` (op types registered in ``popart_unwind.ops`` count too).
_ONNX_NAMES_TEXT = """Abs Add And ArgMax ArgMin AveragePool BatchNormalization Cast CastLike Ceil
Celu Clip Concat ConstantOfShape Conv ConvTranspose Cos CumSum DepthToSpace Div Dropout Einsum
Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gelu Gemm
GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual GroupNormalization HardSigmoid
HardSwish Identity InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu Less
LessOrEqual Log LogSoftmax LpNormalization MatMul Max MaxPool Mean Min Mish Mod Mul Neg
NonZero Not OneHot Or Pad Pow PRelu Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum
ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu
Reshape Resize Round ScatterElements ScatterND Selu Shape Sigmoid Sign Sin Size Slice Softmax
Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK
Transpose Trilu Unsqueeze Where Xor"""
_ONNX_NAMES = tuple(_ONNX_NAMES_TEXT.split())


def onnx_op_name(attribute_name: str) -> str:
    """The ONNX op type a snake_case (or all-lowercase) builder method name stands for."""
    key = attribute_name.replace("_", "").lower()
    known = [*_ONNX_NAMES, *(name for domain, name in REGISTRY.names() if domain == ONNX_DOMAIN)]
    for name in known:
        if name.lower() == key:
            return name
    return "".join(part[:1].upper() + part[1:] for part in attribute_name.split("_"))


class _OnnxNamespace:
    """``b.ai_onnx.<op>(inputs, num_outputs=1, name=None, **attributes)`` for any ONNX op."""

    def __init__(self, builder: Builder) -> None:
        self._builder = builder

    def constant(self, array: Any, name: str | None = None) -> str:
        """ONNX Constant: a Const tensor, as the importer makes of Constant nodes."""
        return self._builder.add_constant(np.asarray(array), name)

    def __getattr__(self, attribute_name: str):
        if attribute_name.startswith("_"):
            raise AttributeError(attribute_name)
        op_name = onnx_op_name(attribute_name)

        def make(inputs: Sequence[Any], num_outputs: int = 1, name: str | None = None,
                 **attributes: Any) -> str | list[str]:
            return self._builder.op(op_name, inputs, attributes, num_outputs, debug_name=name)

        make.__name__ = attribute_name
        make.__doc__ = f"Add an ONNX {op_name} op; returns its output id(s)."
        return make


class _GraphcoreNamespace:
    """PopART's own ops (domain ``ai.graphcore``)."""

    def __init__(self, builder: Builder) -> None:
        self._builder = builder

    def call(self, inputs: Sequence[str], num_outputs: int, callee: Builder
             ) -> str | list[str]:
        return self._builder.call(callee, inputs, num_outputs)


class Builder:
    """Builds one graph of an Ir; ``create_subgraph_builder`` gives builders of subgraphs."""

    def __init__(self, opset: int = DEFAULT_ONNX_OPSET, options: SessionOptions | None = None,
                 ) -> None:
        self._ir = Ir(options)
        self._graph = self._ir.main_graph
        self._opset = opset
        self._parent: Builder | None = None
        self._placement: dict[str, int] = {}
        self._scopes: list[str] = []
        self._op_names: dict[str, int] = {}
        self.ai_onnx = _OnnxNamespace(self)
        self.ai_graphcore = _GraphcoreNamespace(self)

    @property
    def graph(self) -> Graph:
        return self._graph

    # -- tensors ----------------------------------------------------------------------------
    def add_input_tensor(self, dtype: Any, shape: Sequence[int], name: str | None = None
                         ) -> str:
        """A graph input: a host Stream of the main graph, an argument of a subgraph."""
        kind = TensorType.STREAM if self._parent is None else TensorType.ACT_GRAD
        tensor_id = self._fresh_id(name or "input")
        self._graph.add_input(tensor_id, _dtype_name(dtype, tensor_id), tuple(shape), kind)
        return tensor_id

    def add_initialized_input_tensor(self, array: Any, name: str | None = None) -> str:
        """A Variable (a weight) holding ``array``."""
        tensor_id = self._fresh_id(name or "weight")
        self._graph.add_variable(tensor_id, np.asarray(array))
        return tensor_id

    def add_constant(self, array: Any, name: str | None = None) -> str:
        tensor_id = (self._fresh_id(name) if name
                     else reserved_id(self._graph, CONSTANT_PREFIX, self._scoped("constant")))
        self._graph.add_constant(tensor_id, np.asarray(array))
        return tensor_id

    def add_output_tensor(self, tensor_id: str) -> None:
        self._graph.mark_output(tensor_id)

    def get_tensor_shape(self, tensor_id: str) -> list[int]:
        shape = self._graph.tensor(tensor_id).shape
        if shape is None:
            raise ShapeError(f"tensor {tensor_id!r} has no known shape")
        return list(shape)

    def get_tensor_dtype(self, tensor_id: str) -> str:
        return self._graph.tensor(tensor_id).dtype

    # -- ops --------------------------------------------------------------------------------
    def op(self, name: str, inputs: Sequence[Any], attributes: dict[str, Any] | None = None,
           num_outputs: int = 1, domain: str = ONNX_DOMAIN, version: int | None = None, *,
           debug_name: str | None = None,
           output_types: Sequence[tuple[str, Sequence[int]]] | None = None) -> str | list[str]:
        """Add op ``name`` of ``domain``; inputs are tensor ids, numpy arrays (made constants)
        or None (an absent optional input). ``debug_name`` names the op (default: its
        type); ``output_types`` gives (dtype, shape) of an opaque op's outputs.
        Returns the output id, or the list of ids when ``num_outputs != 1``."""
        if version is None:
            version = self._opset if domain == ONNX_DOMAIN else 1
        tensors = [self._input(value) for value in inputs]
        values = {key: _attribute(value) for key, value in (attributes or {}).items()}
        return self._add(OpType(domain, name, version), tensors, values, num_outputs,
                         debug_name, output_types)

    def call(self, subgraph: Builder, inputs: Sequence[str], num_outputs: int | None = None
             ) -> str | list[str]:
        """A CallOp running ``subgraph`` on ``inputs`` (input i -> subgraph input i)."""
        if subgraph._ir is not self._ir or subgraph._parent is None:
            raise IrError("call needs a builder made by create_subgraph_builder of this Ir")
        callee = subgraph.graph
        if len(inputs) != len(callee.input_ids):
            raise IrError(f"graph {callee.id!r} takes {len(callee.input_ids)} input(s), "
                          f"{len(inputs)} given")
        count = len(callee.output_ids) if num_outputs is None else num_outputs
        if count != len(callee.output_ids):
            raise IrError(f"graph {callee.id!r} has {len(callee.output_ids)} output(s), "
                          f"{count} asked for")
        return self._add(OpType(GRAPHCORE_DOMAIN, "Call", 1), list(inputs),
                         {"callee": callee.id}, count, None, None)

    def create_subgraph_builder(self, graph_id: str | None = None) -> Builder:
        """A builder of a new subgraph of the same Ir (for ``call``)."""
        if graph_id is None:
            count = 0
            while self._ir.has_graph(f"subgraph{count}"):
                count += 1
            graph_id = f"subgraph{count}"
        child = Builder.__new__(Builder)
        child.__dict__.update(self.__dict__)
        child._graph = self._ir.create_graph(graph_id)
        child._parent = self
        child._placement, child._scopes, child._op_names = {}, [], {}
        child.ai_onnx, child.ai_graphcore = _OnnxNamespace(child), _GraphcoreNamespace(child)
        return child

    def ir(self) -> Ir:
        """The Ir built so far, verified (every tensor shaped, every call site consistent)."""
        self._ir.verify()
        return self._ir

    # -- context --------------------------------------------------------------------------
    @contextlib.contextmanager
    def virtual_graph(self, vgraph_id: int) -> Iterator[None]:
        with self._placed("vgraph_id", vgraph_id):
            yield

    @contextlib.contextmanager
    def pipeline_stage(self, stage: int) -> Iterator[None]:
        with self._placed("pipeline_stage", stage):
            yield

    @contextlib.contextmanager
    def execution_phase(self, phase: int) -> Iterator[None]:
        with self._placed("execution_phase", phase):
            yield

    @contextlib.contextmanager
    def name_scope(self, name: str) -> Iterator[None]:
        """Names of ops and tensors made inside get the prefix ``name/`` (scopes nest)."""
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    @contextlib.contextmanager
    def _placed(self, field: str, value: int) -> Iterator[None]:
        previous = self._placement.get(field)
        self._placement[field] = int(value)
        try:
            yield
        finally:
            if previous is None:
                del self._placement[field]
            else:
                self._placement[field] = previous

    # -- helpers ----------------------------------------------------------------------------
    def _scoped(self, name: str) -> str:
        return "/".join([*self._scopes, name])

    def _fresh_id(self, name: str) -> str:
        tensor_id = self._scoped(name)
        if self._graph.has_tensor(tensor_id):
            raise IrError(f"tensor {tensor_id!r} already exists in the graph being built")
        return tensor_id

    def _input(self, value: Any) -> str | None:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, np.ndarray | np.generic):
            return self.add_constant(value)
        raise TypeError(f"op inputs are tensor ids, numpy arrays or None, got "
                        f"{type(value).__name__}")

    def _op_stem(self, name: str) -> str:
        stem = self._scoped(name)
        count = self._op_names.get(stem, 0)
        self._op_names[stem] = count + 1
        return stem if count == 0 else f"{stem}_{count}"

    def _add(self, op_type: OpType, inputs: list[str | None], attributes: dict[str, Any],
             num_outputs: int, name: str | None,
             output_types: Sequence[tuple[str, Sequence[int]]] | None) -> str | list[str]:
        stem = self._op_stem(name or op_type.name)
        settings = OpSettings(name=stem, scope="/".join(self._scopes), **self._placement)
        outputs = [self._graph.unique_id(f"{stem}:{i}") for i in range(num_outputs)]
        op = self._graph.create_op(op_type, inputs, outputs, attributes, settings)
        try:
            for tensor, typed in zip(op.outputs, output_types or (), strict=False):
                tensor.dtype, tensor.shape = check_dtype(typed[0], tensor.id), tuple(typed[1])
            infer_op(op)
            _require_shapes(op)
        except Exception:
            self._graph.erase_op(op)
            raise
        return outputs[0] if num_outputs == 1 else outputs


def _require_shapes(op: Op) -> None:
    for index, tensor in op.output_map().items():
        if tensor.shape is None:
            raise ShapeError(f"op {op.debug_name()} output {index}: the shape cannot be "
                             f"inferred (unknown op type or data-dependent); pass output_types")


def _dtype_name(dtype: Any, tensor_id: str) -> str:
    if isinstance(dtype, str):
        return check_dtype(dtype, tensor_id)
    try:
        return check_dtype(np.dtype(dtype).name, tensor_id)
    except TypeError:
        raise IrError(f"tensor {tensor_id!r}: {dtype!r} is not a dtype") from None


def _attribute(value: Any) -> Any:
    """Attribute values as the importer gives them: lists, not tuples."""
    if isinstance(value, tuple):
        return [_attribute(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
