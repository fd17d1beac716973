"""PopART's ai.graphcore GroupedGather (ops/graphcore_grouped_gather.py): values against
ONNX's reference evaluator per group, refusals, and the backward pass refusing it (no
gradient rule). The model planned end to end is a row of test_graphcore_compute.py's
END_TO_END."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_cases import reference_outputs
from test_graphcore_ops import fold, graphcore_op

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Builder
from popart_unwind.ir.op import GRAPHCORE_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import AutodiffError, build_backward

RNG = np.random.default_rng(31)


# -- GroupedGather ----------------------------------------------------------------------------
@pytest.mark.parametrize(("data_shape", "index_shape", "axis"), [
    ((2, 5, 3), (2, 4), 1), ((3, 4, 5), (3, 2, 2), 2), ((2, 3, 4, 2), (2,), 1),
    ((2, 5, 3), (2, 4), -2)])
def test_grouped_gather_is_a_gather_per_group(data_shape, index_shape, axis):
    """Each group gathered by ONNX's reference evaluator alone, the results stacked."""
    data = RNG.standard_normal(data_shape).astype(np.float32)
    indices = RNG.integers(0, data_shape[axis], index_shape).astype(np.int32)
    out, value = fold("GroupedGather", [data, indices], {"axis": axis,
                                                         "group_size": data_shape[0]})
    inner = axis % len(data_shape) - 1
    want = np.stack([reference_outputs("Gather", [data[g], indices[g]], {"axis": inner}, 13)[0]
                     for g in range(data_shape[0])])
    assert out.shape == want.shape
    np.testing.assert_array_equal(value, want)


def test_grouped_gather_of_one_group_is_onnx_gather():
    data = RNG.standard_normal((5, 3)).astype(np.float32)
    indices = np.array([[4, 0], [2, 2]], np.int64)
    _, value = fold("GroupedGather", [data, indices], {"axis": 0})
    [want] = reference_outputs("Gather", [data, indices], {"axis": 0}, 13)
    np.testing.assert_array_equal(value, want)


def test_grouped_gather_out_of_range_is_not_folded():
    """PopART leaves out-of-range indices undefined: no value is claimed."""
    data = np.zeros((2, 3, 2), np.float32)
    _, value = fold("GroupedGather", [data, np.array([[0], [3]], np.int32)],
                    {"axis": 1, "group_size": 2})
    assert value is None


@pytest.mark.parametrize(("data_shape", "index_shape", "attributes"), [
    ((2, 3), (2, 1), {"axis": 0, "group_size": 2}),  # the groups' own axis
    ((2, 3), (3, 1), {"axis": 1, "group_size": 2}),  # indices of another group count
    ((4, 3), (2, 1), {"axis": 1, "group_size": 2}),  # data of another group count
    ((2, 3), (2, 1), {"axis": 1, "group_size": 0})])
def test_grouped_gather_refuses_bad_groups(data_shape, index_shape, attributes):
    with pytest.raises(ShapeError):
        graphcore_op("GroupedGather", [np.zeros(data_shape, np.float32),
                                       np.zeros(index_shape, np.int32)], attributes)


def test_grouped_gather_has_no_gradient_rule_and_the_backward_pass_says_so():
    data = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    b = Builder()
    w = b.add_initialized_input_tensor(data, "w")
    i = b.add_constant(np.array([[1, 0], [3, 3]], np.int32), "i")
    out = b.op("GroupedGather", [w, i], {"axis": 1, "group_size": 2},
               domain=GRAPHCORE_DOMAIN)
    total = b.ai_onnx.reducesum([out], keepdims=0)
    b.add_output_tensor(total)
    graph = b.ir().main_graph
    assert REGISTRY.layout_rule(graph.tensor(out).producer) is BARRIER
    with pytest.raises(AutodiffError, match="GroupedGather"):
        build_backward(graph, graph.tensor(total), Rewriter(REGISTRY))
