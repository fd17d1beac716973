"""DepthToSpace and SpaceToDepth: shapes as ONNX's shape inference gives them, folds equal to
ONNX's reference evaluator, backend node tests imported; the layout rule is the view chain
reshape, transpose, reshape, whose element map is the fold's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx_cases import (
    check_backend_cases,
    folded,
    onnx_output_shapes,
    reference_outputs,
)
from op_building import build

from popart_unwind.errors import ShapeError
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=30, deadline=None)


@st.composite
def block_case(draw):
    name = draw(st.sampled_from(["DepthToSpace", "SpaceToDepth"]))
    size = draw(st.integers(1, 3))
    n, c, h, w = (draw(st.integers(1, 3)) for _ in range(4))
    depth = name == "DepthToSpace"
    shape = (n, c * size * size, h, w) if depth else (n, c, h * size, w * size)
    attributes = {"blocksize": size}
    version = 13
    if draw(st.booleans()):
        mode = draw(st.sampled_from(["DCR", "CRD"]))
        attributes["mode"] = mode
        if name == "SpaceToDepth":
            version = 28  # SpaceToDepth has a mode from opset 28
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    return name, x, attributes, version


@SETTINGS
@given(block_case())
def test_folds_equal_the_reference_evaluator(case):
    name, x, attributes, version = case
    [want] = reference_outputs(name, [x], attributes, version)
    [shape], [value] = folded(name, [x], attributes, version)
    assert shape == want.shape == onnx_output_shapes(name, [x], attributes, version)[0]
    np.testing.assert_array_equal(value, want)


@SETTINGS
@given(block_case())
def test_the_view_chain_moves_elements_as_the_fold_does(case):
    name, x, attributes, version = case
    op = build(name, [x.shape], attributes, version=version)
    infer_op(op)
    chain = REGISTRY.layout_rule(op).view_chain(op, 0, 0)
    [_], [value] = folded(name, [x], attributes, version)
    np.testing.assert_array_equal(chain.apply(x), value)
    assert REGISTRY.layout_rule(op).popart_view(op, 0, 0) is not None


@pytest.mark.parametrize(("name", "shape", "size"), [
    ("DepthToSpace", (1, 6, 2, 2), 2), ("SpaceToDepth", (1, 1, 3, 4), 2),
    ("DepthToSpace", (1, 4, 2), 2), ("SpaceToDepth", (1, 1, 4, 4), 0)])
def test_shapes_that_do_not_split_into_blocks_are_refused(name, shape, size):
    op = build(name, [shape], {"blocksize": size})
    with pytest.raises(ShapeError):
        infer_op(op)


@pytest.mark.parametrize("name", ["DepthToSpace", "SpaceToDepth"])
def test_backend_node_tests_import_with_onnx_shapes_and_values(name):
    check_backend_cases(name)
