"""A layout needs every shape: the error names the op whose output has none and why."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import PlanError
from popart_unwind.ir import Ir, OpType
from popart_unwind.ops.layout_rule import known_shape, planned_shape


def test_a_data_dependent_shape_names_its_producer():
    graph = Ir().main_graph
    x = graph.add_input("x", "float32", (4,))
    nonzero = graph.create_op(OpType("ai.onnx", "NonZero", 13), [x], 1, {})
    out = nonzero.output(0)
    assert out.shape is None
    with pytest.raises(PlanError, match=r"op NonZero#\d+ produces it; its shape depends on values"):
        planned_shape(out)
    reader = graph.create_op(OpType("ai.onnx", "Relu", 14), [out], 1, {})
    with pytest.raises(PlanError, match=r"op Relu#\d+: .* no known shape \(op NonZero#"):
        known_shape(reader, out)


def test_a_graph_input_without_a_shape_asks_for_a_static_one():
    graph = Ir().main_graph
    x = graph.add_input("x", "float32", None)
    with pytest.raises(PlanError, match="give the input a static shape"):
        planned_shape(x)
    assert planned_shape(graph.add_constant("c", np.zeros((2, 3), np.float32))) == (2, 3)
