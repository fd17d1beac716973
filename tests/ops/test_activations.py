"""Elementwise activations: shapes as ONNX's shape inference gives them, folds equal to
ONNX's reference evaluator, ONNX's backend node tests imported; the layout rule is the
elementwise one, PopART's creator search passing through."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays
from onnx_cases import (
    check_backend_cases,
    folded,
    onnx_output_shapes,
    reference_outputs,
)
from op_building import build

from popart_unwind.errors import ShapeError
from popart_unwind.memory import Chain
from popart_unwind.ops import REGISTRY

#: op type -> (opset, attribute choices besides the defaults)
ACTIVATIONS: dict[str, tuple[int, list[dict]]] = {
    "Elu": (6, [{"alpha": 0.5}]),
    "Selu": (6, [{"alpha": 2.0, "gamma": 3.0}]),
    "LeakyRelu": (16, [{"alpha": 0.3}]),
    "HardSigmoid": (6, [{"alpha": 0.3, "beta": 0.4}]),
    "HardSwish": (14, []),
    "ThresholdedRelu": (10, [{"alpha": 0.25}]),
    "Softsign": (1, []),
    "Softplus": (1, []),
    "Shrink": (9, [{"bias": 1.5, "lambd": 1.0}]),
    "Celu": (12, [{"alpha": 2.0}]),
    "Mish": (18, []),
    "Swish": (24, [{"alpha": 0.5}]),
}
floats = st.floats(-30, 30, width=32)
SETTINGS = settings(max_examples=25, deadline=None)


@SETTINGS
@given(arrays(np.float32, array_shapes(max_dims=3, max_side=4), elements=floats),
       st.sampled_from(sorted(ACTIVATIONS)), st.booleans())
def test_activation_folds_equal_the_reference_evaluator(x, name, with_attributes):
    version, choices = ACTIVATIONS[name]
    attributes = choices[0] if with_attributes and choices else {}
    [want] = reference_outputs(name, [x], attributes, version)
    [shape], [value] = folded(name, [x], attributes, version)
    assert shape == x.shape == tuple(onnx_output_shapes(name, [x], attributes, version)[0])
    assert value.dtype == want.dtype
    np.testing.assert_allclose(value, want, rtol=2e-6, atol=1e-7)


@SETTINGS
@given(st.data())
def test_prelu_slope_broadcasts_to_x(data):
    x = data.draw(arrays(np.float32, array_shapes(min_dims=1, max_dims=4, max_side=4),
                         elements=floats))
    dims = data.draw(st.integers(0, x.ndim))
    slope_shape = tuple(data.draw(st.sampled_from([1, side])) for side in x.shape[x.ndim - dims:])
    slope = data.draw(arrays(np.float32, slope_shape, elements=st.floats(-2, 2, width=32)))
    [want] = reference_outputs("PRelu", [x, slope], {}, 16)
    [shape], [value] = folded("PRelu", [x, slope], {}, 16)
    assert shape == x.shape == onnx_output_shapes("PRelu", [x, slope], {}, 16)[0]
    np.testing.assert_array_equal(value, want)


def test_a_prelu_slope_wider_than_x_is_refused():
    op = build("PRelu", [(3,), (2, 3)])
    with pytest.raises(ShapeError, match="does not broadcast to X"):
        REGISTRY.lookup(op).infer(op)


@pytest.mark.parametrize("name", [*ACTIVATIONS, "PRelu"])
def test_backend_node_tests_import_with_onnx_shapes_and_values(name):
    check_backend_cases(name)


@pytest.mark.parametrize("name", [*ACTIVATIONS, "PRelu"])
def test_activations_are_elementwise_and_let_popart_layouts_through(name):
    op = build(name, [(2, 3), (3,)] if name == "PRelu" else [(2, 3)])
    REGISTRY.lookup(op).infer(op)
    for tensor, (dtype, shape) in zip(op.outputs, REGISTRY.lookup(op).infer(op), strict=True):
        tensor.dtype, tensor.shape = dtype, shape
    rule = REGISTRY.layout_rule(op)
    assert rule.kind == "elementwise"
    assert rule.popart_view(op, 0, 0) == Chain((2, 3))
    assert rule.popart_view(op, 1, 0) is None  # a broadcast slope is not the result
