"""PopART's ai.graphcore MultiConv (ops/multiconv.py): shapes against ONNX's Conv shape
inference for each convolution, the split into Convs against ONNX's reference evaluator,
the gradient against separate Convs' (whose rule is gradchecked), and a model planned end
to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from graphcore_models import graphcore_model, plan_end_to_end
from onnx_cases import onnx_output_shapes, reference_outputs
from popart_unwind.transforms import registry

from popart_unwind.errors import ShapeError
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.ir import Builder
from popart_unwind.ir.op import GRAPHCORE_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import build_backward

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

RNG = np.random.default_rng(23)

#: Two convolutions: a strided, padded 2-D one with a bias, and a grouped, dilated 1-D one.
CONVS = [
    {"x": (2, 4, 7, 6), "w": (6, 4, 3, 3), "b": True, "strides": [2, 1],
     "pads": [1, 0, 1, 2], "dilations": [1, 1]},
    {"x": (2, 6, 9), "w": (4, 3, 2), "b": False, "strides": [1], "pads": [0, 1],
     "dilations": [2]},
]


def _arrays():
    arrays = {}
    for i, conv in enumerate(CONVS):
        arrays[f"x{i}"] = RNG.standard_normal(conv["x"]).astype(np.float32)
        arrays[f"w{i}"] = RNG.standard_normal(conv["w"]).astype(np.float32)
        if conv["b"]:
            arrays[f"b{i}"] = RNG.standard_normal(conv["w"][0]).astype(np.float32)
    return arrays


def _attributes():
    return {name: [v for conv in CONVS for v in conv[name]] for name in
            ("strides", "pads", "dilations")}


def _model(arrays):
    """The MultiConv node, its inputs in threes (an empty name for the absent bias)."""
    model = graphcore_model("MultiConv", arrays, _attributes(), outputs=len(CONVS), then=None)
    node = model.graph.node[0]
    del node.input[:]
    for i, conv in enumerate(CONVS):
        node.input.extend([f"x{i}", f"w{i}", f"b{i}" if conv["b"] else ""])
    return model


def _onnx_conv(i, arrays, want):
    conv = CONVS[i]
    inputs = [arrays[f"x{i}"], arrays[f"w{i}"]] + ([arrays[f"b{i}"]] if conv["b"] else [])
    group = conv["x"][1] // conv["w"][1]
    attributes = {k: conv[k] for k in ("strides", "pads", "dilations")} | {"group": group}
    return want("Conv", inputs, attributes, 11)


def test_shapes_are_each_convolutions():
    arrays = _arrays()
    ir = import_onnx(_model(arrays))
    [op] = ir.main_graph.ops
    assert [t.shape for t in op.outputs] == [
        _onnx_conv(i, arrays, onnx_output_shapes)[0] for i in range(len(CONVS))]


def test_the_split_computes_each_convolution():
    arrays = _arrays()
    ir = import_onnx(_model(arrays))
    registry.run_pipeline(ir, ["InferShapes", "Canonicalize"])
    assert [op.type.name for op in ir.main_graph.ops] == ["Conv"] * len(CONVS)
    got = fold_all(ir, arrays)
    for i, value in enumerate(got):
        [want] = _onnx_conv(i, arrays, reference_outputs)
        np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attributes", [{"strides": [1, 1]}, {"inDilations": [2, 1, 1, 1]},
                                        {"pads": [0, 0, 0]}])
def test_bad_attributes_are_refused(attributes):
    b = Builder()
    x = b.add_input_tensor("float32", (1, 2, 5, 5), "x")
    w = b.add_initialized_input_tensor(np.zeros((3, 2, 3, 3), np.float32), "w")
    with pytest.raises(ShapeError):  # two convolutions: strides for one, or trivial none
        b.op("MultiConv", [x, w, None, x, w, None], attributes, domain=GRAPHCORE_DOMAIN,
             num_outputs=2)


def _gradients(build, arrays):
    """The weights' and data's gradients of sum(out_i · mix_i), by the backward pass the IR
    builds, evaluated with the folds after Canonicalize."""
    b = Builder()
    ids = {name: b.add_initialized_input_tensor(value.astype(np.float64), name)
           for name, value in arrays.items()}
    outs = build(b, ids)
    total = None
    for i, out in enumerate(outs):
        mix = np.random.default_rng(i).standard_normal(b.get_tensor_shape(out))
        term = b.ai_onnx.reducesum([b.ai_onnx.mul([out, b.add_constant(mix, f"m{i}")])],
                                   keepdims=0)
        total = term if total is None else b.ai_onnx.add([total, term])
    b.add_output_tensor(total)
    ir = b.ir()
    graph = ir.main_graph
    grads = build_backward(graph, graph.tensor(total), Rewriter(REGISTRY))
    order = sorted(grads)
    for tensor_id in order:
        graph.mark_output(grads[tensor_id])
    registry.run_pipeline(ir, ["Canonicalize"])
    values = fold_all(ir, {})
    return dict(zip(order, values[1:], strict=True))


def test_gradient_is_each_convolutions():
    def multiconv(b, ids):
        inputs = []
        for i, conv in enumerate(CONVS):
            inputs += [ids[f"x{i}"], ids[f"w{i}"], ids[f"b{i}"] if conv["b"] else None]
        return b.op("MultiConv", inputs, _attributes(), domain=GRAPHCORE_DOMAIN,
                    num_outputs=len(CONVS))

    def convs(b, ids):
        outs = []
        for i, conv in enumerate(CONVS):
            inputs = [ids[f"x{i}"], ids[f"w{i}"]] + ([ids[f"b{i}"]] if conv["b"] else [])
            outs.append(b.ai_onnx.conv(inputs, strides=conv["strides"], pads=conv["pads"],
                                       dilations=conv["dilations"],
                                       group=conv["x"][1] // conv["w"][1]))
        return outs

    arrays = _arrays()
    got, want = _gradients(multiconv, arrays), _gradients(convs, arrays)
    assert sorted(got) == sorted(want) and len(got) == 5
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12)


def test_a_model_holding_it_plans_end_to_end():
    model = _model(_arrays())
    run = plan_end_to_end(model)
    assert run.costs["ours"].cycles > 0 and run.costs["popart"].cycles > 0
    assert not any("MultiConv" in label for label in run.ops_without_rule)
