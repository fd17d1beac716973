"""The pools' gradient rules against central differences (inputs a permutation of spread
values, so that no window's maximum is tied)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

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
