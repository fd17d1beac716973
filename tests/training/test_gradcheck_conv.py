"""Conv's and ConvTranspose's gradient rules against central differences, and the PyTorch
front end's backward pass built by the same formulas."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients, loss_and_gradients
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from popart_unwind.errors import IrError

RNG = np.random.default_rng(11)


@pytest.mark.parametrize(("field", "kernel", "strides", "pads", "dilations", "group"), [
    ((5,), (3,), (1,), (0, 0), (1,), 1),
    ((7,), (2,), (2,), (1, 0), (1,), 1),
    ((6,), (3,), (3,), (0, 1), (2,), 2),
    ((5, 4), (3, 2), (1, 1), (1, 0, 1, 1), (1, 1), 1),
    ((6, 5), (2, 2), (2, 3), (0, 1, 1, 0), (2, 1), 2),
    ((4, 3, 3), (2, 1, 2), (1, 2, 1), (0, 0, 1, 1, 0, 0), (1, 1, 1), 1),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv(field, kernel, strides, pads, dilations, group, bias):
    channels, maps = 2 * group, 2 * group
    weights = {"x": RNG.standard_normal((2, channels, *field)),
               "w": RNG.standard_normal((maps, channels // group, *kernel))}
    if bias:
        weights["b"] = RNG.standard_normal((maps,))

    def forward(b, ids):
        inputs = [ids["x"], ids["w"]] + ([ids["b"]] if bias else [])
        return b.ai_onnx.conv(inputs, strides=list(strides), pads=list(pads),
                              dilations=list(dilations), group=group)

    check_gradients(forward, weights)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(auto_pad):
    weights = {"x": RNG.standard_normal((1, 2, 6, 5)), "w": RNG.standard_normal((3, 2, 2, 3))}
    check_gradients(lambda b, ids: b.ai_onnx.conv([ids["x"], ids["w"]], strides=[2, 1],
                                                  auto_pad=auto_pad), weights)


def test_conv_weights_only_with_constant_data():
    """A constant input gets no gradient; the weights' still flows."""
    check_gradients(lambda b, ids: b.ai_onnx.conv([ids["x"], ids["w"]], pads=[1, 1]),
                    {"w": RNG.standard_normal((2, 3, 3))},
                    {"x": RNG.standard_normal((2, 3, 5))})


@pytest.mark.parametrize(("field", "kernel", "strides", "pads", "dilations", "group", "extra"), [
    ((4,), (3,), (1,), (0, 0), (1,), 1, (0,)),
    ((3,), (2,), (2,), (1, 0), (1,), 1, (1,)),
    ((4,), (3,), (3,), (0, 1), (2,), 2, (2,)),  # output_padding past the upper pad
    ((3,), (2,), (2,), (0, 0), (1,), 1, (1,)),
    ((3, 2), (3, 2), (1, 2), (1, 0, 1, 1), (1, 1), 1, (0, 1)),
    ((3, 3), (2, 2), (2, 3), (0, 1, 1, 0), (2, 1), 2, (1, 2)),
    ((2, 2, 3), (2, 1, 2), (1, 2, 1), (0, 0, 1, 1, 0, 0), (1, 1, 1), 1, (0, 1, 0)),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(field, kernel, strides, pads, dilations, group, extra, bias):
    channels, maps = 2 * group, 3 * group
    weights = {"x": RNG.standard_normal((2, channels, *field)),
               "w": RNG.standard_normal((channels, maps // group, *kernel))}
    if bias:
        weights["b"] = RNG.standard_normal((maps,))

    def forward(b, ids):
        inputs = [ids["x"], ids["w"]] + ([ids["b"]] if bias else [])
        return b.ai_onnx.convtranspose(inputs, strides=list(strides), pads=list(pads),
                                       dilations=list(dilations), group=group,
                                       output_padding=list(extra))

    check_gradients(forward, weights)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_conv_transpose_gradients_keep_bilinearity(data):
    """Without a bias Y is linear in X and in W, so Σ X·dX and Σ W·dW both equal the loss
    Σ mix·Y (Euler's law for degree 1), over random windows."""
    n = data.draw(st.integers(1, 2))
    group = data.draw(st.integers(1, 2))

    def draw(low, high):
        return [data.draw(st.integers(low, high)) for _ in range(n)]

    kernel, strides, dilations, field = draw(1, 3), draw(1, 3), draw(1, 2), draw(1, 4)
    pads = draw(0, 2) + draw(0, 2)
    extra = [data.draw(st.integers(0, s - 1)) for s in strides]
    # an output some window of X reaches (one only output_padding reaches is refused)
    assume(all(s * (f - 1) + e + (k - 1) * d + 1 - pads[a] - pads[a + n] >= 1
               and s * (f - 1) + (k - 1) * d + 1 - pads[a] >= 1
               for a, (s, f, e, k, d) in enumerate(zip(strides, field, extra, kernel,
                                                       dilations, strict=True))))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    weights = {"x": rng.standard_normal((2, 2 * group, *field)),
               "w": rng.standard_normal((2 * group, data.draw(st.integers(1, 2)), *kernel))}
    loss, grads = loss_and_gradients(lambda b, ids: b.ai_onnx.convtranspose(
        [ids["x"], ids["w"]], strides=strides, pads=pads, dilations=dilations, group=group,
        output_padding=extra), weights, seed=3)
    for name in ("x", "w"):
        np.testing.assert_allclose(np.sum(weights[name] * grads[name]), loss, rtol=1e-9,
                                   atol=1e-9, err_msg=name)


def test_conv_transpose_weights_only_with_constant_data():
    check_gradients(lambda b, ids: b.ai_onnx.convtranspose([ids["x"], ids["w"]], strides=[2]),
                    {"w": RNG.standard_normal((3, 2, 3))},
                    {"x": RNG.standard_normal((2, 3, 4))})


@pytest.mark.parametrize("attributes", [
    {"auto_pad": "SAME_UPPER", "strides": [2]},
    {"output_shape": [9], "strides": [2]},
    # the lower pad crops every position an input reaches: only output_padding is left
    {"strides": [2], "pads": [9, 0], "output_padding": [1]}])
def test_conv_transpose_forms_without_a_rule_are_refused_naming_the_op(attributes):
    with pytest.raises(IrError, match=r"\(ConvTranspose\): no gradient rule"):
        check_gradients(lambda b, ids: b.ai_onnx.convtranspose(
            [ids["x"], ids["w"]], **attributes, name="up"),
            {"x": RNG.standard_normal((1, 2, 4)), "w": RNG.standard_normal((2, 1, 3))})


@pytest.mark.parametrize("op_type", ["Conv", "ConvTranspose"])
def test_the_gradients_convolutions_take_the_forward_ops_memory_proportion(op_type):
    # PopART's Conv grad ops take the forward op's availableMemoryProportion
    from gradcheck import _step

    from popart_unwind.ops import REGISTRY
    from popart_unwind.ops.linalg import MEMORY_PROPORTION_ATTRIBUTE
    from popart_unwind.rewrite import Rewriter
    from popart_unwind.training.autodiff import build_backward

    def forward(b, ids):
        return b.op(op_type, [ids["x"], ids["w"]], {MEMORY_PROPORTION_ATTRIBUTE: 0.25})

    rng = np.random.default_rng(3)
    ir, loss, _ = _step(forward, {"x": rng.standard_normal((1, 2, 5, 5)),
                                  "w": rng.standard_normal((2, 2, 3, 3))}, {}, 0)
    graph = ir.main_graph
    before = {op.id for op in graph.ops}
    build_backward(graph, graph.tensor(loss), Rewriter(REGISTRY))
    made = [op for op in graph.ops
            if op.id not in before and op.type.name in ("Conv", "ConvTranspose")]
    assert len(made) == 2
    assert all(op.attributes[MEMORY_PROPORTION_ATTRIBUTE] == 0.25 for op in made)
