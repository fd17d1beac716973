"""Operation logic: the shapes each kind of operation infers, and its errors."""

from __future__ import annotations

import pytest

from popart_unwind.errors import ShapeError
from popart_unwind.shapes import (
    BatchSlice,
    Compose,
    Dim,
    Permute,
    PointwiseBin,
    PointwiseUn,
    Row,
    RowVar,
    Shape,
    ShapeInference,
    Terminal,
    Transpose,
    Update,
    einsum_shape,
)

B2_I3_O4 = Shape(batch=[2], input=[3], output=[4])

# (spec, operands, expected result) -- all in the batch|input->output notation
EINSUM_TABLE = [
    ("b|i->o => o|b->i", ["2|3->4"], "4|2->3"),
    ("b|i->o => b|i", ["2|3->4"], "2|3"),
    ("...|i->o => ...|o->i", ["5,2|3->4"], "5,2|4->3"),
    ("...|i->o => ...|o->i", ["3->4"], "4->3"),
    ("i|j->k; l|m->n => il|jm->kn", ["2|3->4", "5|6->7"], "2,5|3,6->4,7"),
    ("i->o; o->k => i->k", ["3->4", "4->7"], "3->7"),
    ("i->o; o->k => i->k", ["2|3->4", "1|4->7"], "2|3->7"),  # batch axes broadcast
    ("ij;kj=>ik", ["3,4", "5,4"], "3,5"),  # output-only operands
    ("...ij;...kj=>...ik", ["20,20,6,3", "6,1"], "20,20,6,6"),  # j broadcasts: 3 vs 1
    ("i;i=>i", ["6", "1"], "6"),
    ("ii=>i", ["5,5"], "5"),  # a diagonal
    ("i,j=>", ["3,4"], ""),  # a total sum
    ("i0=>i", ["3,4"], "3"),  # a fixed index selects
    ("i=>0,i", ["3"], "1,3"),  # a digit on the left adds a size-1 axis
    ("ij=>ji", ["2,3"], "3,2"),
    ("..r..,i->o => ..r..,o", ["7,3->4"], "7,4"),  # a named row variable moves rows
]


@pytest.mark.parametrize(("spec", "operands", "expected"), EINSUM_TABLE)
def test_einsum_table(spec, operands, expected):
    assert einsum_shape(spec, *operands) == Shape.parse(expected)


def test_einsum_on_the_issue_example_gives_exact_rows():
    assert einsum_shape("b|i->o => o|b->i", B2_I3_O4) == Shape(batch=[4], input=[2], output=[3])
    assert einsum_shape("b|i->o => b|i", B2_I3_O4) == Shape(batch=[2], output=[3])


def test_transposing_einsum_keeps_the_batch_row():
    shape = Shape(batch=[5, 2], input=[3, 8], output=[4])
    assert einsum_shape("...|...->... => ...|...->...", shape) == shape
    swapped = einsum_shape("...|i->o => ...|o->i", Shape(batch=[5, 2], input=[3], output=[4]))
    assert swapped == Shape(batch=[5, 2], input=[4], output=[3])


def test_matrix_product_as_compose_and_as_einsum_agree():
    left = Shape(batch=[2], input=[3], output=[4], name="w")
    right = Shape(batch=[1], input=[5], output=[3], name="x")
    composed = Shape.unknown("y")
    inference = ShapeInference()
    inference.add(Update(composed, Compose(left, right)))
    via_einsum = einsum_shape("...|i->o; ...|j->i => ...|j->o", left, right)
    assert inference.final(composed) == via_einsum == Shape(batch=[2], input=[5], output=[4])


def test_a_6_by_1_bias_broadcasts_against_a_20_20_6_3_activation():
    bias = Shape(output=[6, 1], name="bias")
    activation = Shape(output=[20, 20, 6, 3], name="act")
    result = Shape.unknown("sum")
    inference = ShapeInference()
    inference.add(Update(result, PointwiseBin(activation, bias)))
    assert inference.final(result) == activation


def test_an_unknown_bias_takes_the_shape_it_is_broadcast_into():
    bias, result = Shape.unknown("bias"), Shape.unknown("sum")
    inference = ShapeInference()
    inference.add(Update(result, PointwiseBin(Shape(output=[20, 20, 6, 3]), bias)))
    assert str(inference.current(result)) == "...|...->...,20,20,6,3"
    assert inference.final(bias) == Shape(output=[20, 20, 6, 3])


def test_an_unknown_weight_is_inferred_from_its_input_and_output():
    weight = Shape(input=Row((), RowVar.fresh()), output=Row((), RowVar.fresh()), name="w")
    x, y = Shape(batch=[8], output=[3], name="x"), Shape(batch=[8], output=[5], name="y")
    inference = ShapeInference()
    inference.add(Update(y, Compose(weight, x)))
    assert inference.final(weight) == Shape(input=[3], output=[5])


def test_the_order_operations_are_added_in_does_not_matter():
    a, b, c = Shape.parse("...|i->o", "a"), Shape.unknown("b"), Shape.unknown("c")
    updates = [
        Update(b, Transpose(a)),
        Update(c, PointwiseBin(b, Shape(batch=[2], input=[4], output=[3]))),
        Update(Shape(batch=[2], input=[4], output=[3]), PointwiseUn(c)),
    ]
    results = []
    for order in (updates, updates[::-1], updates[1:] + updates[:1]):
        inference = ShapeInference()
        inference.add(*order)
        results.append([inference.final(s) for s in (a, b, c)])
    assert results[0] == results[1] == results[2]
    assert results[0][0] == Shape(batch=[2], input=[3], output=[4])


def test_transpose_swaps_input_and_output():
    result = Shape.unknown()
    inference = ShapeInference()
    inference.add(Update(result, Transpose(B2_I3_O4)))
    assert inference.final(result) == Shape(batch=[2], input=[4], output=[3])


def test_pointwise_unary_keeps_the_shape_and_permute_reorders_it():
    for logic, expected in [
        (PointwiseUn(B2_I3_O4), B2_I3_O4),
        (Permute("b|i->o => i|o->b", B2_I3_O4), Shape.parse("3|4->2")),
    ]:
        result = Shape.unknown()
        inference = ShapeInference()
        inference.add(Update(result, logic))
        assert inference.final(result) == expected


def test_batch_slice_removes_the_leftmost_batch_axis():
    result = Shape.unknown()
    inference = ShapeInference()
    inference.add(Update(result, BatchSlice(Shape.parse("7,5|3->4"))))
    assert inference.final(result) == Shape.parse("5|3->4")


def test_batch_slice_infers_the_sliced_batch_from_the_result():
    operand = Shape.parse("...|3->4", "data")
    inference = ShapeInference()
    inference.add(Update(Shape.parse("5|3->4"), BatchSlice(operand)))
    final = inference.final(operand)
    assert len(final.batch) == 2 and final.batch.dims[1] == Dim(5)


def test_a_terminal_fixes_a_shape_and_total_elems_fills_the_unknown_axis():
    result = Shape.unknown("data")
    layout = Shape(batch=[2], output=Row((Dim(4),), RowVar.fresh(), total_elems=24))
    inference = ShapeInference()
    inference.add(Update(result, Terminal(layout)))
    assert inference.final(result) == Shape(batch=[2], output=[6, 4])


def test_labels_flow_from_an_operand_to_the_result():
    result = Shape.unknown()
    inference = ShapeInference()
    inference.add(Update(result, PointwiseBin(Shape(output=[Dim(3, "rgb")]), Shape.parse("c"))))
    assert inference.final(result).output.dims == (Dim(3, "rgb"),)


# ----- errors ---------------------------------------------------------------------------------
def test_a_broadcasting_error_names_both_rows_and_the_operation():
    result = Shape.unknown("y")
    inference = ShapeInference()
    inference.add(
        Update(result, PointwiseBin(Shape(output=[2, 3], name="a"), Shape(output=[4], name="b")))
    )
    with pytest.raises(ShapeError) as error:
        inference.finalise()
    message = str(error.value)
    assert "PointwiseBin 'y'" in message
    assert "output of 'a'" in message and "output of 'b'" in message
    assert "[2,3]" in message and "[4]" in message


@pytest.mark.parametrize(
    ("spec", "operands", "complaint"),
    [
        ("ij=>i", ["2,3,4"], "fewer axes"),  # no ellipsis: the operand has too many axes
        ("i;i=>i", ["3", "4"], "does not broadcast"),
        ("i=>j", ["3"], "'j' does not occur"),
        ("i=>...,i", ["3"], "'...' in the output row"),
        ("i;j=>ij", ["3"], "2 operand"),
        ("(rgb=3)=>", ["3"], "not allowed"),
        ("i0=>i", ["3,0"], None),  # shape inference is fine; projections check the index
    ],
)
def test_einsum_errors(spec, operands, complaint):
    if complaint is None:
        einsum_shape(spec, *operands)
        return
    with pytest.raises(ShapeError, match=complaint):
        einsum_shape(spec, *operands)


def test_permute_takes_one_operand_only():
    with pytest.raises(ShapeError, match="single operand"):
        Permute("i;j=>ij", Shape.parse("3")).derive(Shape.unknown(), "permute")


def test_einsum_shape_takes_one_or_two_operands():
    with pytest.raises(ShapeError, match="one or two"):
        einsum_shape("i;i;i=>i", "3", "3", "3")
