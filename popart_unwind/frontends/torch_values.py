"""The state of one ``torch.export`` → IR conversion: values by FX node, op emission.

Every FX node carries the value torch computed while tracing (``node.meta["val"]``), so
outputs get torch's dtypes and shapes at once; ops created without a node of their own (the
Add of a decomposed ``addmm``) get theirs from the op registry's shape rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popart_unwind.errors import ModelImportError
from popart_unwind.ir import Graph, OpSettings, OpType, Tensor
from popart_unwind.ir.dtypes import ONNX_DTYPES
from popart_unwind.ir.names import CONSTANT_PREFIX, reserved_id
from popart_unwind.ir.op import DEFAULT_ONNX_OPSET, ONNX_DOMAIN
from popart_unwind.ir.serialize import array_digest
from popart_unwind.ops import REGISTRY

ATEN_DOMAIN = "aten"


def torch_dtype_name(dtype: Any) -> str:
    """``torch.float32`` → ``"float32"`` (the IR's numpy-style names)."""
    return str(dtype).removeprefix("torch.")


class TorchContext:
    """Maps FX nodes to IR tensors (or Python values) while ops are emitted."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.values: dict[str, Any] = {}
        self._constants: dict[str, Tensor] = {}

    # -- reading FX values ---------------------------------------------------------------
    def is_tensor(self, value: Any) -> bool:
        if isinstance(value, Tensor):
            return True
        return isinstance(self.values.get(getattr(value, "name", None)), Tensor)

    def tensor(self, value: Any) -> Tensor:
        if isinstance(value, Tensor):
            return value
        resolved = self.values.get(getattr(value, "name", None))
        if not isinstance(resolved, Tensor):
            raise ModelImportError(f"FX value {value!r} is not a tensor")
        return resolved

    def shape(self, value: Any) -> tuple[int, ...]:
        shape = self.tensor(value).shape
        if shape is None:
            raise ModelImportError(f"tensor {self.tensor(value).id!r} has no known shape")
        return shape

    def dtype(self, value: Any) -> str:
        return self.tensor(value).dtype

    @staticmethod
    def _meta(node: Any) -> Any:
        value = node.meta.get("val")
        if value is None:
            raise ModelImportError(f"FX node {node.name!r} ({node.target}) has no traced value")
        return value

    def out_shapes(self, node: Any) -> list[tuple[int, ...]]:
        value = self._meta(node)
        values = value if isinstance(value, tuple | list) else [value]
        return [tuple(int(d) for d in v.shape) for v in values if v is not None]

    def out_shape(self, node: Any) -> tuple[int, ...]:
        return self.out_shapes(node)[0]

    def out_dtype(self, node: Any) -> str:
        value = self._meta(node)
        value = value[0] if isinstance(value, tuple | list) else value
        return torch_dtype_name(value.dtype)

    @staticmethod
    def onnx_dtype(name: str) -> int:
        return ONNX_DTYPES[name]

    # -- emitting ------------------------------------------------------------------------
    def op(self, node: Any, onnx_name: str, inputs: list[Any],
           attributes: dict[str, Any] | None = None, num_outputs: int = 1,
           domain: str = ONNX_DOMAIN) -> Any:
        """Create one op. With ``node`` its outputs take the node's name and traced
        dtype/shape; without, they are named after the op and shaped by its rule."""
        tensors = [None if v is None else self.tensor(v) for v in inputs]
        stem = node.name if node is not None else f"{onnx_name}"
        settings = OpSettings(name=stem)
        ids = ([self.graph.unique_id(stem)] if num_outputs == 1 else
               [self.graph.unique_id(f"{stem}:{i}") for i in range(num_outputs)])
        op_type = OpType(domain, onnx_name, DEFAULT_ONNX_OPSET if domain == ONNX_DOMAIN else 1)
        op = self.graph.create_op(op_type, tensors, ids, attributes, settings)
        if node is not None:
            value = self._meta(node)
            values = value if isinstance(value, tuple | list) else [value]
            for tensor, traced in zip(op.outputs, values, strict=False):
                if traced is not None and hasattr(traced, "shape"):
                    tensor.dtype = torch_dtype_name(traced.dtype)
                    tensor.shape = tuple(int(d) for d in traced.shape)
        self._infer(op, seeded=node is not None)
        outputs = op.outputs
        return outputs[0] if num_outputs == 1 else outputs

    def _infer(self, op: Any, seeded: bool) -> None:
        opdef = REGISTRY.lookup(op)
        if opdef is None or opdef.infer is None or seeded:
            return
        results = list(opdef.infer(op))  # one per output index; optional ones may be absent
        for index, tensor in op.output_map().items():
            tensor.dtype, tensor.shape = results[index]

    def constant(self, array: np.ndarray) -> Tensor:
        """A Const tensor holding ``array``; equal values share one tensor."""
        array = np.asarray(array, order="C")
        key = array_digest(array)
        if key not in self._constants:
            tensor_id = reserved_id(self.graph, CONSTANT_PREFIX, f"{len(self._constants)}")
            self._constants[key] = self.graph.add_constant(tensor_id, array)
        return self._constants[key]

    def int_constant(self, values: Any) -> Tensor:
        return self.constant(np.asarray(values, dtype=np.int64))

    def float_constant(self, values: Any, like: Any) -> Tensor:
        return self.constant(np.asarray(values, dtype=self.dtype(like)))

    def static_value(self, node: Any) -> Tensor:
        """Evaluate a node whose arguments are all static (``arange``, ``full``) now."""
        import torch

        args = [a for a in node.args]
        if any(hasattr(a, "op") for a in args):
            raise ModelImportError(f"FX node {node.name!r} ({node.target}) is not static")
        kwargs = {k: v for k, v in node.kwargs.items() if k not in ("device", "pin_memory")}
        with torch.device("cpu"):
            value = node.target(*args, **kwargs)
        array = value.detach().numpy() if hasattr(value, "detach") else np.asarray(value)
        tensor_id = self.graph.unique_id(node.name)
        return self.graph.add_constant(tensor_id, np.asarray(array, order="C"))


def scalar_constant(ctx: TorchContext, value: Any, like: Any, node: Any = None) -> Tensor:
    """A 0-d Const for a Python scalar operand, in the dtype of the tensor it meets."""
    dtype = ctx.dtype(like) if like is not None else ctx.out_dtype(node)
    return ctx.constant(np.asarray(value, dtype=dtype))
