"""Gather's and GatherElements' gradient rules against central differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

from popart_unwind.ir import Builder
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import build_backward

RNG = np.random.default_rng(17)


@pytest.mark.parametrize(("shape", "indices", "axis"), [
    ((5, 3), [1, 3, 1], 0),                    # an embedding, a repeated row
    ((5, 3), [[0, 4], [-1, 2]], 0),            # negative indices count from the end
    ((4,), [3, 3, 0], 0),
    ((2, 5, 3), [[4, -5, 4]], 1),
    ((2, 3, 4), [0, 3], -1),
    ((2, 3, 4), 2, 1),                         # a 0-d index drops the axis
])
def test_gather(shape, indices, axis):
    check_gradients(lambda b, ids: b.ai_onnx.gather([ids["x"], ids["i"]], axis=axis),
                    {"x": RNG.standard_normal(shape)},
                    {"i": np.array(indices, dtype=np.int64)})


def test_gather_on_axis_0_is_the_embedding_backward_form():
    """ScatterND "add" into zeros of the table, indices unsqueezed: what the PyTorch front
    end imports ``index_put`` (an embedding's backward) as."""
    b = Builder()
    table = b.add_initialized_input_tensor(RNG.standard_normal((6, 4)), "table")
    ids = b.add_constant(np.array([[1, 2], [5, 1]], dtype=np.int64), "ids")
    loss = b.ai_onnx.reducesum([b.ai_onnx.gather([table, ids])], keepdims=0)
    ir = b.ir()
    graph = ir.main_graph
    grads = build_backward(graph, graph.tensor(loss), Rewriter(REGISTRY))
    scatter = grads[table].producer
    assert scatter.type.name == "ScatterND"
    assert scatter.attributes["reduction"] == "add"
    assert scatter.input(1).producer.type.name == "Unsqueeze"
    assert scatter.input(1).shape == (2, 2, 1)
    assert not scatter.input(0).data.any()


@pytest.mark.parametrize(("shape", "indices", "axis"), [
    ((3, 4), [[0, 2, 2, 1], [2, 0, 0, 0]], 0),
    ((3, 4), [[3, 3], [0, -1], [1, 2]], 1),
    ((2, 3, 2), [[[1, 0], [1, 1]], [[0, 0], [2, 1]]], 1),
])
def test_gather_elements(shape, indices, axis):
    check_gradients(lambda b, ids: b.ai_onnx.gatherelements([ids["x"], ids["i"]], axis=axis),
                    {"x": RNG.standard_normal(shape)},
                    {"i": np.array(indices, dtype=np.int64)})
