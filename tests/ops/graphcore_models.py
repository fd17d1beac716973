"""One-node ONNX models of PopART's ai.graphcore ops, and planning them end to end (import,
the session's transforms, our plan, PopART's baseline and the cost of both)."""

from __future__ import annotations

import io

import numpy as np
import onnx
from onnx import helper as oh
from onnx import numpy_helper

from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.machine import IpuModel
from popart_unwind.report.progress import StageProgress
from popart_unwind.report.session import PlanRun, plan_session, transform


def graphcore_model(op_type: str, inputs: dict[str, np.ndarray], attributes: dict,
                    weights: dict[str, np.ndarray] | None = None, outputs: int = 1,
                    then: str | None = "Relu") -> onnx.ModelProto:
    """A model of one ai.graphcore ``op_type`` node reading graph inputs ``inputs`` and
    initialisers ``weights`` (in that order); ``then`` (an ai.onnx op) reads its first
    output, so that something lies past it."""
    weights = weights or {}
    names = [*inputs, *weights]
    outs = [f"y{i}" for i in range(outputs)]
    nodes = [oh.make_node(op_type, names, outs, domain="ai.graphcore", **attributes)]
    results = outs
    if then is not None:
        nodes.append(oh.make_node(then, [outs[0]], ["z"]))
        results = ["z", *outs[1:]]
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in results],
        initializer=[numpy_helper.from_array(a, n) for n, a in weights.items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11),
                                               oh.make_opsetid("ai.graphcore", 1)])


def plan_end_to_end(model: onnx.ModelProto, tiles: int = 16) -> PlanRun:
    """The model planned as the command plans it: ours, PopART's baseline, both costed."""
    ir = import_onnx(model)
    transform(ir)
    with StageProgress(io.StringIO(), enabled=False) as progress:
        return plan_session(ir, IpuModel(tiles_per_ipu=tiles), None, "popart", progress)
