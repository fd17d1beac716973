"""A numpy oracle for imported graphs: each op's own fold, applied in schedule order (a
Call runs its callee the same way on the values it is given)."""

from __future__ import annotations

import numpy as np

from popart_unwind.ir import Graph, Ir, Tensor
from popart_unwind.ops.registry import REGISTRY


def fold_all(ir: Ir, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The main graph's outputs computed with each op's numpy fold (a test oracle)."""
    return _run(ir.main_graph, dict(inputs))


def _run(graph: Graph, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    for tensor in graph.producerless_tensors():
        if tensor.data is not None:
            values[tensor.id] = np.asarray(tensor.data)
    for op in graph.schedule():
        constants = [values.get(t.id) if t is not None else None
                     for t in [op.input(i) if op.has_input(i) else None
                               for i in range(max(op.input_map(), default=-1) + 1)]]
        if op.type.name == "Call":
            callee = op.called_graphs()[0]
            result = _run(callee, {t.id: constants[i] for i, t in enumerate(callee.inputs)})
        else:
            result = REGISTRY.lookup(op).fold(op, constants)
        assert result is not None, op.debug_name()
        for tensor, value in zip(op.outputs, result, strict=True):
            values[tensor.id] = values[value.id] if isinstance(value, Tensor) else value
    return [values[t.id] for t in graph.outputs]
