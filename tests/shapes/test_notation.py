"""Reading and writing shapes in the ``batch|input->output`` notation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.shapes import Dim, DimVar, Row, RowVar, Shape
from popart_unwind.shapes.notation import parse_einsum_spec, parse_row_spec


def test_three_rows_parse_in_batch_input_output_order():
    assert Shape.parse("2|3->4") == Shape(batch=[2], input=[3], output=[4])
    assert Shape.parse("3->4") == Shape(input=[3], output=[4])
    assert Shape.parse("4") == Shape(output=[4])


def test_memory_order_is_batch_output_input():
    shape = Shape(batch=[2], input=[3, 5], output=[4])
    assert shape.sizes == (2, 4, 3, 5)


@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        ("20,20,6,3", (20, 20, 6, 3)),
        ("20 20 6 3", (20, 20, 6, 3)),
        ("(20)(20)(6)(3)", (20, 20, 6, 3)),
        ("12", (12,)),  # digits only: one size, not two characters
        ("", ()),
    ],
)
def test_entries_split_on_whitespace_commas_and_parentheses(text, sizes):
    assert Shape.parse(text).output == Row(tuple(map(Dim, sizes)))


def test_without_separators_every_character_is_an_entry():
    row = parse_row_spec("ij0")
    assert row.entries == ("i", "j", 0)
    assert parse_row_spec("i, j0").entries == ("i", "j0")


def test_names_become_variables_shared_within_one_shape():
    shape = Shape.parse("b|i->i")
    (i_in,) = shape.input.dims
    (i_out,) = shape.output.dims
    assert isinstance(i_in, DimVar) and i_in == i_out
    assert shape.batch.dims[0] != i_in


def test_ellipses_are_row_variables_named_ones_shared():
    shape = Shape.parse("...|..r..,i->..r..,o")
    assert shape.batch.row_var is not None and not shape.batch.dims
    assert shape.input.row_var == shape.output.row_var
    assert shape.input.row_var != shape.batch.row_var
    assert parse_row_spec("...ij").entries == ("i", "j")


def test_labelled_sizes_print_and_parse():
    shape = Shape(output=[Dim(3, "rgb"), 5])
    assert str(shape) == "rgb=3,5"
    assert Shape.parse(str(shape)) == shape
    assert Shape.parse("(rgb=3)").output.dims == (Dim(3, "rgb"),)


def test_printing_omits_empty_batch_and_input_rows():
    assert str(Shape(batch=[2], output=[4])) == "2|4"
    assert str(Shape(input=[3])) == "3->"
    assert str(Shape()) == ""
    assert str(Shape(output=Row((Dim(4),), RowVar.fresh()))) == "...,4"
    assert str(Shape(batch=Row((), RowVar.fresh()), output=[4])) == "...|4"


def test_a_single_multi_character_name_prints_in_parentheses():
    row = Row((DimVar.fresh("ab"),))
    assert str(row) == "(ab)"
    assert parse_row_spec(str(row)).entries == ("ab",)


@pytest.mark.parametrize(
    "text", ["1|2|3", "2->3->4", "3->4|2", "...i...", "..a..,...", "a..b", "a-b", "2|3->@"]
)
def test_malformed_shapes_are_rejected(text):
    with pytest.raises(ShapeError):
        Shape.parse(text)


def test_einsum_specs_split_operands_and_result():
    operands, result = parse_einsum_spec("i->o; o->k => i->k")
    assert len(operands) == 2
    assert operands[1].input.entries == ("o",)
    assert result.output.entries == ("k",)
    assert operands[0].batch is None  # no '|': batch left to broadcast
    with pytest.raises(ShapeError, match="=>"):
        parse_einsum_spec("i->o")


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_sizes_must_be_non_negative_integers(bad):
    with pytest.raises(ShapeError):
        Dim(bad)


def test_rows_are_sequences_not_strings():
    with pytest.raises(ShapeError):
        Shape(output="23")


labels = st.sampled_from([None, "x", "rgb"])
known_rows = st.lists(st.builds(Dim, st.integers(0, 30), labels), max_size=3).map(tuple)


@settings(max_examples=100, deadline=None)
@given(known_rows, known_rows, known_rows)
def test_known_shapes_round_trip_through_text(batch, input_, output):
    shape = Shape(batch=batch, input=input_, output=output)
    assert Shape.parse(str(shape)) == shape
