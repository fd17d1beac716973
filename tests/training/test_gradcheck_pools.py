"""The pools' gradient rules against central differences (inputs a permutation of spread
values, so that no window's maximum is tied)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients, loss_and_gradients
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import IrError

RNG = np.random.default_rng(5)


def untied(shape):
    """Distinct values at least 0.1 apart, far above the differences' step."""
    return RNG.permutation(np.arange(int(np.prod(shape)))).reshape(shape) * 0.1 - 1.0


WINDOWS = [
    dict(kernel_shape=[3], strides=[1]),
    dict(kernel_shape=[2], strides=[2], pads=[1, 0]),
    dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 1, 0, 1]),
    dict(kernel_shape=[2, 2], strides=[1, 2], dilations=[2, 1]),
    dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[2, 1, 2], strides=[1, 1, 2], pads=[0, 0, 1, 1, 0, 0]),
]


def _field(window):
    return (2, 3, *[6, 5, 3][:len(window["kernel_shape"])])


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("indices", [False, True])
def test_max_pool(window, indices):
    def forward(b, ids):
        outputs = b.ai_onnx.maxpool([ids["x"]], num_outputs=2 if indices else 1, **window)
        return outputs[0] if indices else outputs

    check_gradients(forward, {"x": untied(_field(window))})


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(window, count_include_pad):
    check_gradients(lambda b, ids: b.ai_onnx.averagepool(
        [ids["x"]], count_include_pad=count_include_pad, **window),
        {"x": RNG.standard_normal(_field(window))})


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 2, 3, 4), (2, 1, 2, 2, 3)])
@pytest.mark.parametrize("op", ["globalaveragepool", "globalmaxpool"])
def test_global_pools(shape, op):
    check_gradients(lambda b, ids: getattr(b.ai_onnx, op)([ids["x"]]), {"x": untied(shape)})


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(window, p):
    check_gradients(lambda b, ids: b.ai_onnx.lppool([ids["x"]], p=p, **window),
                    {"x": RNG.standard_normal(_field(window))})


def test_lp_pool_before_opset_18():
    """Opset 11's LpPool: no dilations nor ceil_mode, p 2 by default."""
    check_gradients(lambda b, ids: b.op("LpPool", [ids["x"]], {
        "kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 0, 0, 1]}, version=11),
        {"x": RNG.standard_normal((2, 2, 4, 5))})


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(WINDOWS), st.integers(1, 4), st.integers(0, 2**16))
def test_lp_pool_gradient_keeps_eulers_law(window, p, seed):
    """A p-norm is homogeneous of degree 1, so Σ X·dX equals the loss Σ mix·Y."""
    x = np.random.default_rng(seed).standard_normal(_field(window))
    loss, grads = loss_and_gradients(
        lambda b, ids: b.ai_onnx.lppool([ids["x"]], p=p, **window), {"x": x}, seed=seed)
    np.testing.assert_allclose(np.sum(x * grads["x"]), loss, rtol=1e-9, atol=1e-9)


def test_lp_pool_with_auto_pad_is_refused_naming_the_op():
    with pytest.raises(IrError, match=r"\(LpPool\): no gradient for auto_pad"):
        check_gradients(lambda b, ids: b.ai_onnx.lppool(
            [ids["x"]], kernel_shape=[2], auto_pad="SAME_UPPER"),
            {"x": RNG.standard_normal((1, 2, 5))})
