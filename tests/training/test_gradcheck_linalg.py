"""MatMul's and Gemm's gradient rules against central differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

RNG = np.random.default_rng(7)


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((3, 4), (2, 4, 5)),
    ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (3, 4, 2)),
])
def test_matmul(a_shape, b_shape):
    check_gradients(lambda b, ids: b.ai_onnx.matmul([ids["a"], ids["b"]]),
                    {"a": RNG.standard_normal(a_shape), "b": RNG.standard_normal(b_shape)})


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [(5,), (3, 5), (1, 1), None])
def test_gemm(trans_a, trans_b, c_shape):
    weights = {"a": RNG.standard_normal((4, 3) if trans_a else (3, 4)),
               "b": RNG.standard_normal((5, 4) if trans_b else (4, 5))}
    if c_shape is not None:
        weights["c"] = RNG.standard_normal(c_shape)

    def forward(b, ids):
        inputs = [ids["a"], ids["b"]] + ([ids["c"]] if "c" in ids else [])
        return b.ai_onnx.gemm(inputs, alpha=0.7, beta=1.3, transA=trans_a, transB=trans_b)

    check_gradients(forward, weights)
