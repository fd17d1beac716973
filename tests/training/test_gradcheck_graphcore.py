"""The gradient rules of PopART's ai.graphcore ops that have one (Square, AddLhsInplace,
Reshape, Slice, BatchNormalization, PrintTensor, TensorRemap, AddBias, L1, Nll, the collectives
and AutoLossScaleProxy over one replica) against central differences; and Autodiff's
refusal of those without one."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

from popart_unwind.ir import Builder
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, OpType
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import AutodiffError, build_backward

RNG = np.random.default_rng(17)


def gc(b, name, inputs, **attributes):
    return b.op(name, inputs, attributes, domain=GRAPHCORE_DOMAIN)


def wavy(b, out):
    """out · sin(out): a gradient put in the wrong place shows."""
    return b.ai_onnx.mul([out, b.ai_onnx.sin([out])])


CASES = {
    "Square": (lambda b, ids: gc(b, "Square", [ids["x"]]), {"x": (3, 4)}),
    "AddLhsInplace": (lambda b, ids: wavy(b, gc(b, "AddLhsInplace", [ids["x"], ids["y"]])),
                      {"x": (3, 4), "y": (4,)}),
    "Reshape": (lambda b, ids: wavy(b, gc(b, "Reshape", [ids["x"]], shape=[4, -1])),
                {"x": (2, 3, 4)}),
    "Slice": (lambda b, ids: wavy(b, gc(b, "Slice", [ids["x"]], starts=[1], ends=[3],
                                        axes=[1])), {"x": (2, 4, 3)}),
    "PrintTensor": (lambda b, ids: wavy(b, gc(b, "PrintTensor", [ids["x"]])), {"x": (5,)}),
    "AddBias": (lambda b, ids: wavy(b, gc(b, "AddBias", [ids["x"], ids["bias"]])),
                {"x": (2, 3, 2), "bias": (3,)}),
    "L1 Sum": (lambda b, ids: gc(b, "L1", [ids["x"]], reduction="Sum", **{"lambda": 0.7}),
               {"x": (3, 4)}),
    "L1 Mean": (lambda b, ids: gc(b, "L1", [ids["x"]], reduction="Mean", **{"lambda": 0.7}),
                {"x": (3, 4)}),
    "L1 None": (lambda b, ids: gc(b, "L1", [ids["x"]], reduction="None", **{"lambda": 0.7}),
                {"x": (3, 4)}),
    "ReplicatedAllReduce": (lambda b, ids: wavy(b, gc(b, "ReplicatedAllReduce", [ids["x"]])),
                            {"x": (2, 3)}),
    "ReplicatedAllGather": (lambda b, ids: wavy(b, gc(b, "ReplicatedAllGather", [ids["x"]])),
                            {"x": (2, 3)}),
    "ReplicatedReduceScatter": (lambda b, ids: wavy(b, gc(b, "ReplicatedReduceScatter",
                                                          [ids["x"]])), {"x": (2, 3)}),
    "AutoLossScaleProxy": (lambda b, ids: wavy(b, gc(b, "AutoLossScaleProxy", [ids["x"]])),
                           {"x": (2, 3)}),
    "TensorRemap": (lambda b, ids: wavy(b, gc(b, "TensorRemap", [ids["x"]], remap_type=0)),
                    {"x": (2, 3)}),
    "BatchNormalization": (lambda b, ids: wavy(b, gc(b, "BatchNormalization", [
        ids["x"], ids["scale"], ids["bias"], b.add_constant(np.zeros(3), "mean"),
        b.add_constant(np.ones(3), "var")], epsilon=1e-5)),
        {"x": (2, 3, 2), "scale": (3,), "bias": (3,)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient(case):
    forward, shapes = CASES[case]
    weights = {name: RNG.uniform(0.2, 1.5, shape) * RNG.choice([-1, 1], shape)
               for name, shape in shapes.items()}
    check_gradients(forward, weights)


@pytest.mark.parametrize("reduction", ["Sum", "Mean", "None"])
@pytest.mark.parametrize("ignore", [None, 1])
@pytest.mark.parametrize("log_input", [0, 1])
def test_nll_gradient(reduction, ignore, log_input):
    attributes = {"reduction": reduction, "inputIsLogProbability": log_input}
    if ignore is not None:
        attributes["ignoreIndex"] = ignore
    label = np.array([[0, 1, 2], [1, 2, 2]], np.int32)

    def forward(b, ids):
        return gc(b, "Nll", [ids["p"], ids["label"]], **attributes)

    check_gradients(forward, {"p": RNG.uniform(0.2, 1.0, (2, 3, 4))}, {"label": label})


@pytest.mark.parametrize(("name", "inputs", "attributes"), [
    ("IncrementMod", [(3,)], {"increment": 1.0, "modulus": 2.0}),
    ("BinaryConstScalar", [(3,)], {"value": 2.0, "op": "Mul", "scalar_in_index": 1}),
    ("ReduceMedian", [(3, 4)], {"axes": [1]}),
    ("Sort", [(3, 4)], {"axis": 1}),
    ("ScatterReduce", [(3, 4), np.zeros((3, 4), np.int32)], {"axis": 0, "axis_size": 2}),
])
def test_ops_without_a_gradient_rule_are_refused_by_name(name, inputs, attributes):
    assert REGISTRY.gradient_rule(OpType(GRAPHCORE_DOMAIN, name, 1)) is None
    b = Builder()
    ids = [b.add_initialized_input_tensor(RNG.uniform(0.1, 1, v).astype(np.float32), f"w{i}")
           if isinstance(v, tuple) else b.add_constant(v, f"c{i}") for i, v in enumerate(inputs)]
    outputs = 2 if name in ("ReduceMedian", "Sort") else 1
    out = b.op(name, ids, attributes, domain=GRAPHCORE_DOMAIN, num_outputs=outputs)
    out = out[0] if outputs > 1 else out
    loss = b.ai_onnx.reducesum([out], keepdims=0)
    b.add_output_tensor(loss)
    graph = b.ir().main_graph
    with pytest.raises(AutodiffError, match=name):
        build_backward(graph, graph.tensor(loss), Rewriter(REGISTRY))
