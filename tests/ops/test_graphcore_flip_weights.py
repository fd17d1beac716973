"""PopART's ai.graphcore ConvFlipWeights (ops/graphcore_flip_weights.py): values against
ONNX's reference evaluator and numpy written out, the gradient against the permutation the
op is, refusals. The model planned end to end is a row of test_graphcore_compute.py's
END_TO_END."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx_cases import reference_outputs
from popart_unwind.transforms import registry
from test_graphcore_ops import fold, graphcore_op

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Builder
from popart_unwind.ir.op import GRAPHCORE_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import build_backward

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

SETTINGS = settings(max_examples=20, deadline=None)
RNG = np.random.default_rng(31)


# -- ConvFlipWeights --------------------------------------------------------------------------
@SETTINGS
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([(3,), (2, 3), (3, 2)]))
def test_flipped_weights_turn_a_transposed_convolution_into_a_convolution(group, a, b, kernel):
    """ConvTranspose(x, W) equals Conv(x padded by k - 1, ConvFlipWeights(W)) for unit
    strides: the identity PopART's ConvTranspose pattern rests on. ONNX's reference evaluator
    computes both convolutions (the transposed one group by group, its grouped form failing
    to reshape the weights)."""
    weights = RNG.standard_normal((group * a, b, *kernel)).astype(np.float32)
    x = RNG.standard_normal((2, group * a, *(n + 2 for n in kernel))).astype(np.float32)
    out, flipped = fold("ConvFlipWeights", [weights], {"group": group, "groupReshape": 1})
    assert out.shape == (group * b, a, *kernel)
    want = np.concatenate([reference_outputs(
        "ConvTranspose", [x[:, g * a:(g + 1) * a], weights[g * a:(g + 1) * a]], {}, 11)[0]
        for g in range(group)], axis=1)
    pads = [n - 1 for n in kernel] * 2
    [got] = reference_outputs("Conv", [x, flipped], {"group": group, "pads": pads}, 11)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_flipped_weights_element_by_element():
    """out[g*B + j, i, k] = W[g*A + i, j, K - 1 - k], written out; without groupReshape the
    same [G, B, A, k] elements lie row-major in [B, G*A, k] (PopART's setup shape)."""
    group, a, b, kernel = 2, 3, 2, 4
    weights = RNG.standard_normal((group * a, b, kernel)).astype(np.float32)
    _, value = fold("ConvFlipWeights", [weights], {"group": group, "groupReshape": 1})
    want = np.zeros((group, b, a, kernel), np.float32)
    for g, i, j, k in np.ndindex(group, a, b, kernel):
        want[g, j, i, k] = weights[g * a + i, j, kernel - 1 - k]
    np.testing.assert_array_equal(value, want.reshape(group * b, a, kernel))
    out, value = fold("ConvFlipWeights", [weights], {"group": group})
    assert out.shape == (b, group * a, kernel)
    np.testing.assert_array_equal(value, want.reshape(b, group * a, kernel))


def test_flip_weights_without_attributes_is_one_group():
    """PopART's creator reads no attributes: one group, channels swapped, kernel reversed."""
    weights = RNG.standard_normal((5, 3, 2, 3)).astype(np.float32)
    _, value = fold("ConvFlipWeights", [weights])
    np.testing.assert_array_equal(value, weights.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])


@pytest.mark.parametrize(("shape", "attributes"), [((4, 3), {}), ((5, 2, 3), {"group": 2}),
                                                   ((4, 2, 3), {"groupReshape": 2})])
def test_flip_weights_refuses_bad_shapes(shape, attributes):
    with pytest.raises(ShapeError):
        graphcore_op("ConvFlipWeights", [np.zeros(shape, np.float32)], attributes)


def _weight_gradient(build, weights: np.ndarray, mix: np.ndarray) -> np.ndarray:
    """d/dW of sum(build(W) · mix), by the backward pass the IR builds, evaluated with the
    folds after Canonicalize."""
    b = Builder()
    w = b.add_initialized_input_tensor(weights, "w")
    out = build(b, w)
    total = b.ai_onnx.reducesum([b.ai_onnx.mul([out, b.add_constant(mix, "m")])], keepdims=0)
    b.add_output_tensor(total)
    ir = b.ir()
    graph = ir.main_graph
    grads = build_backward(graph, graph.tensor(total), Rewriter(REGISTRY))
    graph.mark_output(grads["w"])
    registry.run_pipeline(ir, ["Canonicalize"])
    return fold_all(ir, {})[1]


@pytest.mark.parametrize(("shape", "attributes"), [
    ((4, 3, 3, 2), {}), ((6, 2, 3), {"group": 3, "groupReshape": 1}),
    ((6, 2, 3), {"group": 2})])
def test_flip_weights_gradient_is_the_inverse_permutation(shape, attributes):
    """The op moves each element somewhere, so dW at an element is dY where it went: the
    fold applied to the element numbers says where each went."""
    weights = RNG.standard_normal(shape).astype(np.float32)
    _, where = fold("ConvFlipWeights", [np.arange(weights.size, dtype=np.float32)
                                        .reshape(shape)], attributes)
    mix = RNG.standard_normal(where.shape).astype(np.float32)
    want = np.zeros(weights.size, np.float32)
    want[where.reshape(-1).astype(np.int64)] = mix.reshape(-1)
    got = _weight_gradient(lambda b, w: b.op("ConvFlipWeights", [w], attributes,
                                             domain=GRAPHCORE_DOMAIN), weights, mix)
    np.testing.assert_array_equal(got, want.reshape(shape))


def test_flip_weights_is_a_barrier():
    op = graphcore_op("ConvFlipWeights", [np.zeros((2, 3, 3), np.float32)])
    assert REGISTRY.layout_rule(op) is BARRIER
