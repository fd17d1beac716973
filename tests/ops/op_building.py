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
