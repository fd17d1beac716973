"""ONNX as the judge of an op's rules: its shape inference, its reference evaluator and its
backend node test cases (one-node models with inputs and the outputs ONNX expects)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_conformance_cases import onnx_node_tests

from popart_unwind.ir import Ir, OpType
from popart_unwind.ops import REGISTRY


def one_node_model(op_type: str, inputs: list[np.ndarray], attributes: dict,
                   version: int, outputs: int = 1) -> onnx.ModelProto:
    """A model of one ``op_type`` node reading graph inputs of ``inputs``' types."""
    names = [f"x{i}" for i in range(len(inputs))]
    outs = [f"y{i}" for i in range(outputs)]
    node = oh.make_node(op_type, names, outs, **attributes)
    graph = oh.make_graph(
        [node], "g",
        [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in zip(names, inputs, strict=True)],
        [onnx.ValueInfoProto(name=o) for o in outs])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", version)])


def reference_outputs(op_type: str, inputs: list[np.ndarray], attributes: dict,
                      version: int, outputs: int = 1) -> list[np.ndarray]:
    """What ``onnx.reference.ReferenceEvaluator`` computes."""
    model = one_node_model(op_type, inputs, attributes, version, outputs)
    feeds = {f"x{i}": a for i, a in enumerate(inputs)}
    with np.errstate(all="ignore"):
        return list(ReferenceEvaluator(model).run(None, feeds))


def onnx_output_shapes(op_type: str, inputs: list[np.ndarray], attributes: dict,
                       version: int, outputs: int = 1) -> list[tuple[int, ...]]:
    """The output shapes ``onnx.shape_inference.infer_shapes`` (strict) gives."""
    model = one_node_model(op_type, inputs, attributes, version, outputs)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    found = {v.name: v for v in [*inferred.graph.output, *inferred.graph.value_info]}
    return [tuple(d.dim_value for d in found[f"y{i}"].type.tensor_type.shape.dim)
            for i in range(outputs)]


def folded(op_type: str, inputs: list[np.ndarray | None], attributes: dict, version: int,
           outputs: int = 1) -> tuple[list[tuple[int, ...]], list]:
    """Our shape rule's output shapes and our fold's values, ``inputs`` constants (None: an
    absent optional input)."""
    graph = Ir().main_graph
    tensors = [None if a is None else graph.add_constant(f"c{i}", np.asarray(a))
               for i, a in enumerate(inputs)]
    op = graph.create_op(OpType("ai.onnx", op_type, version), tensors, outputs, attributes)
    opdef = REGISTRY.lookup(op)
    shapes = []
    results = opdef.infer(op)  # a rule types every output an op may have
    assert len(results) >= len(op.outputs)
    for tensor, (dtype, shape) in zip(op.outputs, results, strict=False):
        tensor.dtype, tensor.shape = dtype, tuple(shape)
        shapes.append(tuple(shape))
    with np.errstate(all="ignore"):
        values = opdef.fold(op, inputs) if opdef.fold is not None else None
    return shapes, values


def agrees_with_onnx(op_type: str, inputs: list[np.ndarray], attributes: dict, version: int,
                     rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Our shape rule and fold of a one-output op equal ONNX's reference evaluator's value
    and strict shape inference's shape, in dtype too (``rtol = atol = 0``: exactly)."""
    [want] = reference_outputs(op_type, inputs, attributes, version)
    [shape], [value] = folded(op_type, inputs, attributes, version)
    assert shape == want.shape == onnx_output_shapes(op_type, inputs, attributes, version)[0]
    assert value.dtype == want.dtype
    np.testing.assert_allclose(value, want, rtol=rtol, atol=atol)


def backend_cases(op_type: str) -> list:
    """ONNX's backend node test cases whose model is one ``op_type`` node."""
    return [case for case in onnx_node_tests()
            if [n.op_type for n in case.model.graph.node] == [op_type]]


def _numpy_native(dtype: np.dtype) -> bool:
    return dtype.type.__module__ == "numpy"


def check_backend_case(case, fold: bool = True) -> None:
    """Import the case's model; our shape rule gives the shapes of ONNX's expected outputs
    and, with ``fold``, our fold (on the case's inputs as constants) its values."""
    ir = Ir.from_onnx(case.model)
    [op] = [op for op in ir.main_graph.ops if not op.is_type("Identity")]
    node = case.model.graph.node[0]
    version = op.type.version
    attributes = {a.name: oh.get_attribute_value(a) for a in node.attribute}
    attributes = {k: v.decode() if isinstance(v, bytes) else v for k, v in attributes.items()}
    for inputs, expected in case.data_sets:
        inputs = [a if isinstance(a, np.ndarray) else numpy_helper.to_array(a) for a in inputs]
        present = dict(zip((n for n in node.input if n), inputs, strict=False))
        arrays = [present.get(n) if n else None for n in node.input]
        shapes, values = folded(node.op_type, arrays, attributes, version,
                                outputs=len(node.output))
        named = [i for i, n in enumerate(node.output) if n]  # absent outputs have no name
        shapes = [shapes[i] for i in named]
        values = None if values is None else [values[i] for i in named]
        assert shapes == [tuple(e.shape) for e in expected], case.name
        assert [t.shape for t in op.outputs] == shapes, case.name
        if fold:
            assert values is not None, case.name
            for value, want in zip(values, expected, strict=True):
                if not _numpy_native(want.dtype):
                    continue  # bfloat16, float8: numpy folds them in another type
                assert value.dtype == want.dtype, case.name
                np.testing.assert_allclose(value, want, rtol=case.rtol or 1e-5,
                                           atol=max(case.atol or 0, 1e-6), err_msg=case.name)


def check_backend_cases(op_type: str, fold: bool = True) -> None:
    """``check_backend_case`` on each of ONNX's backend node test cases for ``op_type``,
    of which there must be at least one."""
    cases = backend_cases(op_type)
    assert cases, f"ONNX has no backend node test case of one {op_type} node"
    for case in cases:
        check_backend_case(case, fold=fold)
