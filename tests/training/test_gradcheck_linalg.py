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


@pytest.mark.parametrize("op_type", ["MatMul", "Gemm"])
def test_the_gradients_matmuls_take_the_forward_ops_memory_proportion(op_type):
    # PopART's MatMul grad ops take the forward op's availableMemoryProportion
    from gradcheck import _step

    from popart_unwind.ops import REGISTRY
    from popart_unwind.ops.linalg import MEMORY_PROPORTION_ATTRIBUTE
    from popart_unwind.rewrite import Rewriter
    from popart_unwind.training.autodiff import build_backward

    def forward(b, ids):
        return b.op(op_type, [ids["a"], ids["b"]], {MEMORY_PROPORTION_ATTRIBUTE: 0.25})

    ir, loss, _ = _step(forward, {"a": RNG.standard_normal((3, 4)),
                                  "b": RNG.standard_normal((4, 5))}, {}, 0)
    graph = ir.main_graph
    before = {op.id for op in graph.ops}
    build_backward(graph, graph.tensor(loss), Rewriter(REGISTRY))
    made = [op for op in graph.ops if op.id not in before and op.type.name == op_type]
    assert len(made) == 2
    assert all(op.attributes[MEMORY_PROPORTION_ATTRIBUTE] == 0.25 for op in made)
