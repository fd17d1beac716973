"""Projections: which iteration index every axis of an operation follows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.shapes import (
    AxisIndex,
    BatchSlice,
    Compose,
    Einsum,
    PointwiseBin,
    PointwiseUn,
    Shape,
    ShapeInference,
    Transpose,
    Update,
    broadcast_projections,
    derive_projections,
)


def it(i: int) -> AxisIndex:
    return AxisIndex(i)


FIXED0 = AxisIndex(None, 0)


def test_a_6_by_1_bias_follows_output_axis_2_and_broadcasts_its_last_axis():
    assert broadcast_projections((20, 20, 6, 3), (6, 1)) == [(2, None)]


def test_broadcast_projections_cover_several_inputs_and_scalars():
    found = broadcast_projections((4, 1, 3), (3,), (1, 1, 3), (4, 1, 1), ())
    assert found == [(2,), (None, 1, 2), (0, 1, None), ()]


def test_pointwise_projections_iterate_over_the_result():
    result = Shape(output=[20, 20, 6, 3])
    projections = derive_projections(Update(result, PointwiseBin(result, Shape(output=[6, 1]))))
    assert projections.product_space == (20, 20, 6, 3)
    assert projections.result == (it(0), it(1), it(2), it(3))
    assert projections.operands == ((it(0), it(1), it(2), it(3)), (it(2), FIXED0))
    assert projections.reduced == ()


def test_matmul_contracts_a_reduced_iterator_and_broadcasts_a_size_1_batch():
    left = Shape(batch=[2], input=[3], output=[4])
    right = Shape(batch=[1], input=[5], output=[3])
    result = Shape(batch=[2], input=[5], output=[4])
    projections = derive_projections(Update(result, Compose(left, right)))
    # memory order batch, output, input: result (b, o, j), left (b, o, i), right (b, i, j)
    assert projections.product_space == (2, 4, 5, 3)
    assert projections.result == (it(0), it(1), it(2))
    assert projections.operands == ((it(0), it(1), it(3)), (FIXED0, it(3), it(2)))
    assert projections.reduced == (3,)


def test_einsum_sums_the_labels_missing_on_the_left():
    projections = derive_projections(
        Update(Shape.parse("3,5"), Einsum("ij;kj=>ik", Shape.parse("3,4"), Shape.parse("5,4")))
    )
    assert projections.product_space == (3, 5, 4)
    assert projections.operands == ((it(0), it(2)), (it(1), it(2)))
    assert projections.reduced == (2,)


def test_an_outer_product_has_one_iterator_per_axis_and_no_reduction():
    left, right = Shape.parse("2|3->4"), Shape.parse("5|6->7")
    result = Shape.parse("2,5|3,6->4,7")
    projections = derive_projections(
        Update(result, Einsum("i|j->k; l|m->n => il|jm->kn", left, right))
    )
    assert projections.reduced == ()
    assert projections.operands == ((it(0), it(2), it(4)), (it(1), it(3), it(5)))


def test_einsum_digits_fix_an_index_on_the_right_and_add_an_axis_on_the_left():
    selected = derive_projections(Update(Shape.parse("3"), Einsum("i2=>i", Shape.parse("3,4"))))
    assert selected.operands == ((it(0), AxisIndex(None, 2)),)
    added = derive_projections(Update(Shape.parse("1,3"), Einsum("i=>0,i", Shape.parse("3"))))
    assert added.result == (FIXED0, it(0))
    with pytest.raises(ShapeError, match="out of range"):
        derive_projections(Update(Shape.parse("3"), Einsum("i7=>i", Shape.parse("3,4"))))


def test_a_diagonal_reads_both_axes_with_one_iterator():
    projections = derive_projections(Update(Shape.parse("5"), Einsum("ii=>i", Shape.parse("5,5"))))
    assert projections.operands == ((it(0), it(0)),)


def test_transpose_and_batch_slice_projections():
    operand = Shape.parse("2|3->4")
    transposed = derive_projections(Update(Shape.parse("2|4->3"), Transpose(operand)))
    assert transposed.result == (it(0), it(1), it(2))
    assert transposed.operands == ((it(0), it(2), it(1)),)
    sliced = derive_projections(Update(Shape.parse("3|4"), BatchSlice(Shape.parse("5,3|4"), 2)))
    assert sliced.operands == ((AxisIndex(None, 2), it(0), it(1)),)


def test_axes_equal_in_size_elsewhere_do_not_share_an_iterator_here():
    """Contamination: ``ii=>`` proves x's two axes equal; adding x to w must still iterate
    them independently."""
    x = Shape.parse("a,b", "x")
    trace, total = Shape.unknown("trace"), Shape.unknown("sum")
    diagonal = Update(trace, Einsum("ii=>", x))
    addition = Update(total, PointwiseBin(x, Shape(output=[5, 1], name="w")))
    inference = ShapeInference()
    inference.add(diagonal, addition)
    assert inference.final(x) == Shape.parse("5,5")
    assert derive_projections(diagonal, inference).operands == ((it(0), it(0)),)
    added = derive_projections(addition, inference)
    assert added.operands == ((it(0), it(1)), (it(0), FIXED0))


def test_projections_need_known_shapes():
    with pytest.raises(ShapeError, match="known shapes"):
        derive_projections(Update(Shape.unknown("y"), PointwiseUn(Shape.parse("3"))))


@st.composite
def broadcast_cases(draw):
    out = tuple(draw(st.lists(st.integers(1, 4), max_size=4)))
    drop = draw(st.integers(0, len(out)))
    operand = tuple(1 if draw(st.booleans()) else d for d in out[drop:])
    return out, operand


@settings(max_examples=100, deadline=None)
@given(broadcast_cases())
def test_gathering_through_projections_is_numpy_broadcasting(case):
    out, operand_shape = case
    operand = np.arange(int(np.prod(operand_shape)), dtype=np.int64).reshape(operand_shape)
    (follows,) = broadcast_projections(out, operand_shape)
    index = np.indices(out, dtype=np.int64)
    gathered = operand[tuple(index[a] if a is not None else 0 for a in follows)]
    np.testing.assert_array_equal(gathered, np.broadcast_to(operand, out))
