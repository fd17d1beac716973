"""An oracle for gradient rules: the backward pass the IR builds, evaluated with every op's
numpy fold, against central differences of the forward in float64."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from popart_unwind.ir import Builder, Ir
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import build_backward

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

#: build(builder, ids) adds the forward ops reading the tensors named in ``ids`` (weight
#: and input names -> tensor ids) and returns the id of the output whose gradient is taken.
Forward = Callable[[Builder, dict[str, str]], str]


def _step(forward: Forward, weights: Mapping[str, np.ndarray],
          constants: Mapping[str, np.ndarray], seed: int) -> tuple[Ir, str, dict[str, str]]:
    b = Builder()
    ids = {name: b.add_initialized_input_tensor(value, name) for name, value in weights.items()}
    ids.update({name: b.add_constant(value, name) for name, value in constants.items()})
    out = forward(b, ids)
    shape = b.get_tensor_shape(out)
    # a random weighting of the output, so that every element's gradient matters
    mix = np.random.default_rng(seed).standard_normal(shape).astype(b.get_tensor_dtype(out))
    loss = b.ai_onnx.reducesum([b.ai_onnx.mul([out, b.add_constant(mix, "mix")])],
                               keepdims=0, name="loss")
    b.add_output_tensor(loss)
    ir = b.ir()
    ir.final_loss_id = loss
    return ir, loss, ids


def ir_gradients(forward: Forward, weights: Mapping[str, np.ndarray],
                 constants: Mapping[str, np.ndarray] | None = None,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """Each weight's gradient as the IR's backward pass computes it."""
    return loss_and_gradients(forward, weights, constants, seed)[1]


def loss_and_gradients(forward: Forward, weights: Mapping[str, np.ndarray],
                       constants: Mapping[str, np.ndarray] | None = None,
                       seed: int = 0) -> tuple[float, dict[str, np.ndarray]]:
    """The loss (the output's random weighting, summed) and each weight's gradient as the
    IR's backward pass computes them (for laws such as Euler's on homogeneous ops)."""
    ir, loss, ids = _step(forward, weights, constants or {}, seed)
    graph = ir.main_graph
    grads = build_backward(graph, graph.tensor(loss), Rewriter(REGISTRY))
    names = {tensor_id: name for name, tensor_id in ids.items()}
    order = list(grads)
    first = len(graph.outputs)
    for weight_id in order:
        graph.mark_output(grads[weight_id])
    values = fold_all(ir, {})
    return float(values[0]), {names[w]: v for w, v in zip(order, values[first:], strict=True)}


def numeric_gradients(forward: Forward, weights: Mapping[str, np.ndarray],
                      constants: Mapping[str, np.ndarray] | None = None, seed: int = 0,
                      step: float = 1e-6) -> dict[str, np.ndarray]:
    """Each weight's gradient by central differences of the forward (float64 weights)."""
    ir, _, ids = _step(forward, weights, constants or {}, seed)
    graph = ir.main_graph
    found = {}
    for name in weights:
        tensor = graph.tensor(ids[name])
        base = np.array(tensor.data, dtype=np.float64)
        grad = np.zeros_like(base)
        for index in np.ndindex(base.shape):
            values = []
            for sign in (1, -1):
                moved = base.copy()
                moved[index] += sign * step
                tensor.data = moved
                values.append(float(fold_all(ir, {})[0]))
            grad[index] = (values[0] - values[1]) / (2 * step)
        tensor.data = base
        found[name] = grad
    return found


def check_gradients(forward: Forward, weights: Mapping[str, np.ndarray],
                    constants: Mapping[str, np.ndarray] | None = None, seed: int = 0,
                    rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """The IR's gradients of every weight equal central differences (weights in float64)."""
    weights = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
    got = ir_gradients(forward, weights, constants, seed)
    want = numeric_gradients(forward, weights, constants, seed)
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol,
                                   err_msg=f"gradient of {name}")
