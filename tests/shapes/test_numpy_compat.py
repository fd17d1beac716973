"""NumPy broadcasting and matmul shapes through the solver, with NumPy as the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.shapes import broadcast_shapes, matmul_shape

SETTINGS = settings(max_examples=200, deadline=None)
numpy_shapes = st.lists(st.integers(0, 4), max_size=4).map(tuple)


@st.composite
def related_shapes(draw, count: int):
    """Shapes that often broadcast: each derived from one base by dropping axes and 1s."""
    base = draw(numpy_shapes)
    shapes = []
    for _ in range(count):
        if draw(st.integers(0, 4)) == 0:
            shapes.append(draw(numpy_shapes))  # unrelated: usually incompatible
            continue
        drop = draw(st.integers(0, len(base)))
        shapes.append(tuple(1 if draw(st.booleans()) else d for d in base[drop:]))
    return shapes


def numpy_or_error(function, *args):
    try:
        return function(*args)
    except ValueError:
        return ShapeError


def ours_or_error(function, *args):
    try:
        return function(*args)
    except ShapeError:
        return ShapeError


@SETTINGS
@given(st.integers(0, 4).flatmap(related_shapes))
def test_broadcast_shapes_agree_with_numpy(shapes):
    expected = numpy_or_error(np.broadcast_shapes, *shapes)
    assert ours_or_error(broadcast_shapes, *shapes) == expected


@st.composite
def matmul_operands(draw):
    n, k, m = (draw(st.integers(1, 4)) for _ in range(3))
    k2 = k if draw(st.integers(0, 5)) else draw(st.integers(1, 4))  # sometimes mismatched
    (batch_a, batch_b) = draw(related_shapes(2))
    a = (*batch_a, n, k) if draw(st.integers(0, 3)) else (k,)
    b = (*batch_b, k2, m) if draw(st.integers(0, 3)) else (k2,)
    return a, b


@SETTINGS
@given(matmul_operands())
def test_matmul_shape_agrees_with_numpy(operands):
    a, b = operands
    expected = numpy_or_error(lambda x, y: np.matmul(np.zeros(x), np.zeros(y)).shape, a, b)
    assert ours_or_error(matmul_shape, a, b) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((2, 3), (3, 4), (2, 4)),
        ((3,), (3, 4), (4,)),
        ((2, 3), (3,), (2,)),
        ((3,), (3,), ()),
        ((5, 1, 2, 3), (4, 3, 6), (5, 4, 2, 6)),
    ],
)
def test_matmul_shape_examples(a, b, expected):
    assert matmul_shape(a, b) == expected == np.matmul(np.empty(a), np.empty(b)).shape


def test_matmul_contracts_equal_sizes_only():
    with pytest.raises(ShapeError, match="NumPy contracts equal sizes"):
        matmul_shape((2, 3), (1, 4))  # Compose alone would broadcast the 1
    with pytest.raises(ShapeError, match="scalar"):
        matmul_shape((), (3,))


def test_broadcast_shapes_examples_and_error():
    assert broadcast_shapes((20, 20, 6, 3), (6, 1)) == (20, 20, 6, 3)
    assert broadcast_shapes(3, (2, 1)) == (2, 3)
    assert broadcast_shapes() == ()
    with pytest.raises(ShapeError, match="operand"):
        broadcast_shapes((2, 3), (4,))
