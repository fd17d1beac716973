"""RoiAlign, GridSample, MaxUnpool, ReverseSequence and Det: shapes as ONNX's shape inference
gives them, folds equal to ONNX's reference evaluator (RoiAlign and GridSample are not
folded), and ONNX's backend node tests, which import."""

from __future__ import annotations

import numpy as np
import onnx_cases
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from onnx_cases import (
    check_backend_cases,
    folded,
    onnx_output_shapes,
    reference_outputs,
)
from op_building import build

from popart_unwind.errors import ShapeError
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.layout_rule import BARRIER
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=25, deadline=None)
floats = st.floats(-4, 4, width=32)


def agrees_with_onnx(name, inputs, attributes, version, rtol=1e-5):
    onnx_cases.agrees_with_onnx(name, inputs, attributes, version, rtol=rtol, atol=1e-5)


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.booleans(), st.data())
def test_reverse_sequence(steps, batch, width, time_first, data):
    shape = (steps, batch, width) if time_first else (batch, steps, width)
    x = data.draw(arrays(np.float32, shape, elements=floats))
    lengths = np.array(data.draw(st.lists(st.integers(1, steps), min_size=batch,
                                          max_size=batch)), np.int64)
    attributes = {"time_axis": 0 if time_first else 1, "batch_axis": 1 if time_first else 0}
    agrees_with_onnx("ReverseSequence", [x, lengths], attributes, 10)


@SETTINGS
@given(st.lists(st.integers(1, 3), max_size=2), st.integers(1, 4), st.data())
def test_det(batch, side, data):
    x = data.draw(arrays(np.float32, (*batch, side, side), elements=st.floats(-2, 2,
                                                                               width=32)))
    agrees_with_onnx("Det", [x], {}, 11, rtol=1e-3)


@SETTINGS
@given(st.integers(1, 2), st.integers(1, 2), st.integers(1, 3), st.integers(1, 2),
       st.integers(1, 2), st.integers(0, 99))
def test_max_unpool_puts_each_value_where_its_index_says(n, c, side, kernel, stride, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, c, side, side)).astype(np.float32)
    out = (side - 1) * stride + kernel
    indices = rng.choice(n * c * out * out, size=x.size, replace=False)
    indices = indices.reshape(x.shape).astype(np.int64)
    attributes = {"kernel_shape": [kernel, kernel], "strides": [stride, stride]}
    agrees_with_onnx("MaxUnpool", [x, indices], attributes, 11)


def test_max_unpool_to_a_larger_output_shape():
    """The indices address the unpooled shape the attributes give, at output_shape's
    origin, as ONNX's reference evaluator reads them."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)
    indices = rng.choice(2 * 16, size=8, replace=False).reshape(x.shape).astype(np.int64)
    output_shape = np.array([1, 2, 5, 6], np.int64)
    attributes = {"kernel_shape": [2, 2], "strides": [2, 2]}
    [want] = reference_outputs("MaxUnpool", [x, indices, output_shape], attributes, 11)
    [shape], [value] = folded("MaxUnpool", [x, indices, output_shape], attributes, 11)
    assert shape == want.shape == (1, 2, 5, 6)
    np.testing.assert_array_equal(value, want)


@pytest.mark.parametrize(("height", "width", "rois"), [(1, 1, 3), (2, 5, 4)])
def test_roi_align_shape(height, width, rois):
    inputs = [np.zeros((2, 3, 8, 8), np.float32), np.zeros((rois, 4), np.float32),
              np.zeros(rois, np.int64)]
    attributes = {"output_height": height, "output_width": width}
    [shape], values = folded("RoiAlign", inputs, attributes, 16)
    assert values is None
    assert shape == (rois, 3, height, width) == onnx_output_shapes(
        "RoiAlign", inputs, attributes, 16)[0]


@pytest.mark.parametrize(("x", "grid", "version"), [
    ((2, 3, 5, 6), (2, 4, 7, 2), 16), ((1, 2, 3, 4, 5), (1, 6, 7, 8, 3), 20),
    ((2, 3, 5, 6), (2, 4, 7, 2), 22)])
def test_grid_sample_shape(x, grid, version):
    inputs = [np.zeros(x, np.float32), np.zeros(grid, np.float32)]
    [shape], values = folded("GridSample", inputs, {}, version)
    assert values is None
    assert shape == onnx_output_shapes("GridSample", inputs, {}, version)[0]


@pytest.mark.parametrize(("name", "specs", "attributes", "version"), [
    ("Det", [(2, 3)], {}, 11),
    ("GridSample", [(1, 2, 3, 4, 5), (1, 6, 7, 8, 3)], {}, 16),  # 3-D from opset 20 on
    ("GridSample", [(2, 3, 5, 6), (1, 4, 7, 2)], {}, 16),
    ("RoiAlign", [(2, 3, 8, 8), (4, 5), (4,)], {}, 16),
    ("MaxUnpool", [(1, 1, 2, 2), (1, 1, 2, 2)], {"kernel_shape": [2]}, 11),
    ("ReverseSequence", [(3, 2, 4), (2,)], {"time_axis": 2}, 10),
])
def test_bad_operands_are_refused(name, specs, attributes, version):
    op = build(name, specs, attributes, version=version)
    with pytest.raises(ShapeError):
        infer_op(op)


@pytest.mark.parametrize(("name", "fold"), [
    ("ReverseSequence", True), ("Det", True), ("MaxUnpool", True), ("RoiAlign", False),
    ("GridSample", False)])
def test_backend_node_tests_import_with_onnx_shapes_and_values(name, fold):
    check_backend_cases(name, fold=fold)


def test_layouts_are_barriers():
    for name, specs in (("ReverseSequence", [(3, 2), (2,)]), ("Det", [(2, 2)]),
                        ("RoiAlign", [(1, 1, 2, 2), (1, 4), (1,)]),
                        ("GridSample", [(1, 1, 2, 2), (1, 2, 2, 2)]),
                        ("MaxUnpool", [(1, 1, 2, 2), (1, 1, 2, 2)])):
        assert REGISTRY.layout_rule(build(name, specs)) is BARRIER
