"""Building one op on a fresh graph for the op families' tests: constants from arrays,
graph inputs from shapes, absent optional inputs from None."""

from __future__ import annotations

import numpy as np

from popart_unwind.ir import Ir, OpType
from popart_unwind.ops.shape_inference import infer_op


def build(op_type, specs, attributes=None, outputs=1, version=18):
    graph = Ir().main_graph
    inputs = []
    for index, spec in enumerate(specs):
        if isinstance(spec, np.ndarray):
            inputs.append(graph.add_constant(f"c{index}", spec))
        elif spec is None:
            inputs.append(None)
        else:
            inputs.append(graph.add_input(f"x{index}", "float32", spec))
    return graph.create_op(OpType("ai.onnx", op_type, version), inputs, outputs, attributes)


def shapes_of(op_type, specs, attributes=None, outputs=1, version=18):
    op = build(op_type, specs, attributes, outputs, version)
    infer_op(op)
    return [(t.dtype, t.shape) for t in op.outputs]


def name_holder(op) -> bool:
    """An Identity producing a main-graph output: what keeps an output's id when the
    output folds to a tensor with its own identity (a graph input, a weight)."""
    return op.is_type("Identity") and op.output(0).is_graph_output()


def computing_ops(graph) -> list:
    """The ops of ``graph`` other than the name holders."""
    return [op for op in graph.ops if not name_holder(op)]


def passed_on_ids(graph) -> list[str]:
    """Per graph output, the id of the tensor it passes on through a name holder."""
    ids = []
    for tensor in graph.outputs:
        producer = tensor.producer
        ids.append(producer.input(0).id if producer is not None and name_holder(producer)
                   else tensor.id)
    return ids


def folded_to(graph, ids: list[str]) -> bool:
    """Nothing left but name holders, and the outputs pass on ``ids``."""
    return not computing_ops(graph) and passed_on_ids(graph) == ids
