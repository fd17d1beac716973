"""Clip (ops/elementwise.py) and RandomUniformLike / RandomNormalLike (ops/stochastic.py):
shapes, types and folds with ONNX semantics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from op_building import build, shapes_of

from popart_unwind.errors import ShapeError
from popart_unwind.ops.registry import REGISTRY


def test_clip_keeps_its_input_type_and_wants_scalar_bounds():
    assert shapes_of("Clip", [(2, 3), np.array(0.0, np.float32), None]) == \
        [("float32", (2, 3))]
    assert shapes_of("Clip", [(4,)], {"min": -1.0}, version=6) == [("float32", (4,))]
    with pytest.raises(ShapeError, match="max bound must be a scalar"):
        shapes_of("Clip", [(2, 3), None, np.zeros(3, np.float32)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=8),
       st.one_of(st.none(), st.floats(-2, 2, width=32)),
       st.one_of(st.none(), st.floats(-2, 2, width=32)))
def test_clip_folds_as_onnx_defines_it(values, low, high):
    x = np.array(values, np.float32)
    specs = [x, None if low is None else np.array(low, np.float32),
             None if high is None else np.array(high, np.float32)]
    op = build("Clip", specs)
    constants = [x, specs[1], specs[2]]
    [result] = REGISTRY.lookup(op).fold(op, constants)
    expected = x
    if low is not None:
        expected = np.maximum(expected, np.float32(low))
    if high is not None:
        expected = np.minimum(expected, np.float32(high))  # ONNX: max wins over min
    assert np.array_equal(result, expected)


@pytest.mark.parametrize("name", ["RandomUniformLike", "RandomNormalLike"])
def test_random_like_ops_take_the_input_shape_and_the_dtype_attribute(name):
    assert shapes_of(name, [(2, 5)]) == [("float32", (2, 5))]
    assert shapes_of(name, [(2, 5)], {"dtype": 10}) == [("float16", (2, 5))]
    with pytest.raises(ShapeError, match="dtype"):
        shapes_of(name, [(2, 5)], {"dtype": 999})
    op = build(name, [(3,)])
    assert REGISTRY.draws_random(op) and REGISTRY.lookup(op).fold is None
