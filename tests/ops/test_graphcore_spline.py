"""PopART's ai.graphcore SplineBasis and SplineWeighting (ops/graphcore_spline.py): shapes as
PopART sets them up, the basis against the uniform B-spline evaluated by the Cox–de Boor
recursion (and its partition of unity), the weighting against its sum written out, and a
model holding them planned end to end."""

from __future__ import annotations

import numpy as np
import pytest
from graphcore_models import plan_end_to_end
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper as oh
from onnx import numpy_helper
from test_graphcore_ops import graphcore_op

from popart_unwind.errors import ShapeError
from popart_unwind.ops import REGISTRY

SETTINGS = settings(max_examples=25, deadline=None)


def cardinal(p: int, t: float) -> float:
    """The uniform B-spline of degree p on [0, p + 1] (Cox–de Boor)."""
    if p == 0:
        return 1.0 if 0 <= t < 1 else 0.0
    return t / p * cardinal(p - 1, t) + (p + 1 - t) / p * cardinal(p - 1, t - 1)


def basis_of(pseudo, sizes, open_, degree):
    edges, dims = pseudo.shape
    per_edge = (degree + 1) ** dims
    basis = np.ones((edges, per_edge))
    index = np.zeros((edges, per_edge), np.int64)
    for e in range(edges):
        for s in range(per_edge):
            offset, rest = 1, s
            for d in range(dims):
                k, rest = rest % (degree + 1), rest // (degree + 1)
                v = float(pseudo[e, d]) * (int(sizes[d]) - degree * int(open_[d]))
                whole = int(np.floor(v))
                index[e, s] += ((whole + k) % int(sizes[d])) * offset
                offset *= int(sizes[d])
                basis[e, s] *= cardinal(degree, v - whole + degree - k)
    return basis, index


@SETTINGS
@given(st.integers(0, 3), st.integers(1, 3), st.integers(1, 4), st.data())
def test_basis(degree, dims, edges, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 999)))
    pseudo = rng.uniform(0, 1, (edges, dims)).astype(np.float32)
    sizes = rng.integers(degree + 1, degree + 4, dims).astype(np.int32)
    open_ = rng.integers(0, 2, dims).astype(np.uint8)
    op = graphcore_op("SplineBasis", [pseudo, sizes, open_], {"degree": degree}, outputs=2)
    basis, index = REGISTRY.lookup(op).fold(op, [pseudo, sizes, open_])
    want_basis, want_index = basis_of(pseudo, sizes, open_, degree)
    assert [(t.dtype, t.shape) for t in op.outputs] == [
        ("float32", want_basis.shape), ("int32", want_basis.shape)]
    np.testing.assert_allclose(basis, want_basis, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(index, want_index)
    np.testing.assert_allclose(basis.sum(axis=1), 1, rtol=1e-5)  # a partition of unity


def test_weighting():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    weight = rng.standard_normal((7, 3, 2)).astype(np.float32)
    basis = rng.uniform(0, 1, (5, 4)).astype(np.float32)
    index = rng.integers(0, 7, (5, 4)).astype(np.int32)
    op = graphcore_op("SplineWeighting", [x, weight, basis, index])
    [value] = REGISTRY.lookup(op).fold(op, [x, weight, basis, index])
    want = np.zeros((5, 2))
    for e in range(5):
        for s in range(4):
            want[e] += basis[e, s] * (x[e] @ weight[index[e, s]])
    assert op.output(0).shape == (5, 2)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError):
        graphcore_op("SplineWeighting", [x, weight, basis, index.astype(np.int64)])
    with pytest.raises(ShapeError):
        graphcore_op("SplineBasis", [basis, np.zeros(4, np.int32), np.zeros(4, np.uint8)],
                     {"degree": 4}, outputs=2)


def test_a_spline_convolution_plans_end_to_end():
    """SplineBasis feeding SplineWeighting, as a spline convolution chains them."""
    rng = np.random.default_rng(5)
    nodes = [oh.make_node("SplineBasis", ["pseudo", "sizes", "open"], ["basis", "index"],
                          domain="ai.graphcore", degree=1),
             oh.make_node("SplineWeighting", ["x", "w", "basis", "index"], ["y"],
                          domain="ai.graphcore"),
             oh.make_node("Relu", ["y"], ["z"])]
    weights = {"sizes": np.array([3, 3], np.int32), "open": np.array([1, 1], np.uint8),
               "w": rng.standard_normal((9, 4, 8)).astype(np.float32)}
    graph = oh.make_graph(
        nodes, "g",
        [oh.make_tensor_value_info("pseudo", 1, (16, 2)),
         oh.make_tensor_value_info("x", 1, (16, 4))],
        [oh.make_tensor_value_info("z", 1, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in weights.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11),
                                                oh.make_opsetid("ai.graphcore", 1)])
    run = plan_end_to_end(model)
    assert run.costs["ours"].cycles > 0 and run.costs["popart"].cycles > 0
    assert {"ai.graphcore::SplineBasis", "ai.graphcore::SplineWeighting"} <= set(
        run.ops_without_rule)
