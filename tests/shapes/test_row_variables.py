"""A row variable anywhere in a row (OCANNL's beginning axes, ``i...j``): notation,
unification, broadcasting, einsum specs and projections, held to NumPy where NumPy has the
rule, and the errors of contradictory problems."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.shapes import (
    BatchSlice,
    Dim,
    DimVar,
    Einsum,
    PointwiseBin,
    Row,
    RowEq,
    RowIneq,
    RowVar,
    Shape,
    ShapeInference,
    Solver,
    Update,
    derive_projections,
    einsum_shape,
)

SETTINGS = settings(max_examples=150, deadline=None)


# ----- notation -------------------------------------------------------------------------------
def test_a_row_variable_may_stand_anywhere_in_its_row():
    shape = Shape.parse("b...|i,..r..,j->...o")
    assert [str(d) for d in shape.batch.beg_dims] == ["b"] and shape.batch.dims == ()
    assert [str(d) for d in shape.input.beg_dims] == ["i"]
    assert [str(d) for d in shape.input.dims] == ["j"]
    assert shape.input.row_var is not None and shape.input.row_var.name == "r"
    assert shape.output.beg_dims == () and [str(d) for d in shape.output.dims] == ["o"]
    assert str(shape) == "b,...|i,..r..,j->...,o"
    assert str(Shape.parse(str(shape))) == str(shape)


@pytest.mark.parametrize(
    ("text", "beg", "end"),
    [("i...j", ["i"], ["j"]), ("ab...", ["a", "b"], []), ("b, ..., c", ["b"], ["c"]),
     ("2,...,3", ["2"], ["3"]), ("i ... jk", ["i"], ["j", "k"]), ("...", [], [])],
)
def test_entries_before_the_row_variable_are_the_rows_beginning(text, beg, end):
    row = Shape.parse(text).output
    assert [str(d) for d in row.beg_dims] == beg and [str(d) for d in row.dims] == end


def test_a_row_without_a_row_variable_keeps_all_its_axes_at_the_end():
    row = Row((3,), None, beg_dims=(2,))
    assert row.beg_dims == () and [d.size for d in row.dims] == [2, 3]


@pytest.mark.parametrize("text", ["...i...", "..a..,...", "i....j"])
def test_two_row_variables_in_one_row_are_refused(text):
    with pytest.raises(ShapeError):
        Shape.parse(text)


# ----- einsum specs against NumPy --------------------------------------------------------------
EINSUM_TABLE = [
    ("j...=>...j", ["2,3,4"], "3,4,2"),
    ("i...j=>...", ["2,3,4,5"], "3,4"),
    ("i...j;j...=>i...", ["2,3,4,5", "5,4"], "2,3,4"),
    ("i...j;i...j=>i...j", ["2,2,4", "2,3,1,4"], "2,3,2,4"),  # the middles broadcast
    ("i...j=>j...i", ["2,3"], "3,2"),  # an empty middle
    ("b...|i->o => ...,b|o->i", ["2,5|3->4"], "5,2|4->3"),
    ("...|...->...o => ...|o->...", ["2|3->4,5"], "2|5->4"),
    ("i..r..;..r..j=>i,..r..,j", ["2,3", "3,4"], "2,3,4"),  # a named variable in two rows
]


@pytest.mark.parametrize(("spec", "operands", "expected"), EINSUM_TABLE)
def test_einsum_table_with_row_variables_inside_rows(spec, operands, expected):
    assert einsum_shape(spec, *operands) == Shape.parse(expected)


@st.composite
def einsum_cases(draw):
    """One or two operands, each term an ellipsis with labels on either side, a result with
    its ellipsis anywhere; label sizes of 1 and ellipsis parts broadcast as NumPy allows."""
    sizes = {label: draw(st.integers(2, 3)) for label in "ijkl"}
    ellipsis = draw(st.lists(st.integers(1, 3), max_size=3))
    terms, shapes = [], []
    for _ in range(draw(st.integers(1, 2))):
        labels = draw(st.lists(st.sampled_from("ijkl"), max_size=3, unique=True))
        cut = draw(st.integers(0, len(labels)))
        kept = draw(st.integers(0, len(ellipsis)))
        middle = [1 if draw(st.integers(0, 3)) == 0 else d for d in ellipsis[len(ellipsis) - kept:]]
        axes = [1 if draw(st.integers(0, 5)) == 0 else sizes[label] for label in labels]
        terms.append("".join(labels[:cut]) + "..." + "".join(labels[cut:]))
        shapes.append((*axes[:cut], *middle, *axes[cut:]))
    used = sorted(set("".join(terms).replace(".", "")))
    out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
    at = draw(st.integers(0, len(out)))
    result = "".join(out[:at]) + "..." + "".join(out[at:])
    return terms, result, shapes


@SETTINGS
@given(einsum_cases())
def test_einsum_shapes_are_numpys(case):
    terms, result, shapes = case
    expected = np.einsum(",".join(terms) + "->" + result, *(np.zeros(s) for s in shapes)).shape
    operands = [Shape(output=s) for s in shapes]
    assert einsum_shape(";".join(terms) + "=>" + result, *operands).sizes == expected


@settings(max_examples=60, deadline=None)
@given(einsum_cases())
def test_einsum_computed_through_its_projections_is_numpys(case):
    """The loop nest the projections describe, run element by element, computes NumPy's
    einsum: every axis follows the right iterator or reads a broadcast axis at 0."""
    terms, result, shapes = case
    equation = ",".join(terms) + "->" + result
    rng = np.random.default_rng(len(equation))
    arrays = [rng.integers(-3, 4, size=s) for s in shapes]
    expected = np.einsum(equation, *arrays)
    spec = ";".join(terms) + "=>" + result
    update = Update(Shape(output=expected.shape), Einsum(spec, *(Shape(output=s) for s in shapes)))
    projections = derive_projections(update)
    found = np.zeros(expected.shape, dtype=np.int64)

    def at(point, axes):
        return tuple(point[a.iterator] if a.iterator is not None else a.fixed for a in axes)

    for point in np.ndindex(*projections.product_space):
        term = 1
        for array, axes in zip(arrays, projections.operands, strict=True):
            term *= int(array[at(point, axes)])
        found[at(point, projections.result)] += term
    np.testing.assert_array_equal(found, expected)


# ----- broadcasting and unification ------------------------------------------------------------
def pattern(value: tuple[int, ...], cut: tuple[int, int]) -> Row:
    """A row of fresh variables standing for ``value`` split as beginning, middle, end."""
    first, last = cut
    beg = tuple(DimVar.fresh() for _ in value[:first])
    end = tuple(DimVar.fresh() for _ in value[last:])
    return Row(end, RowVar.fresh(), beg_dims=beg)


@st.composite
def cuts(draw, length: int):
    first = draw(st.integers(0, length))
    return first, draw(st.integers(first, length))


@st.composite
def broadcast_problems(draw):
    """Operands NumPy broadcasts, some written as patterns tied to their values; the result
    may itself be a pattern with no more fixed axes than NumPy's result has."""
    out = tuple(draw(st.lists(st.integers(1, 4), max_size=4)))
    values = []
    for _ in range(draw(st.integers(1, 3))):
        drop = draw(st.integers(0, len(out)))
        values.append(tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in out[drop:]))
    expected = np.broadcast_shapes(*values)
    result = (pattern(expected, draw(cuts(len(expected)))) if draw(st.booleans())
              else Row((), RowVar.fresh()))
    constraints = []
    for value in values:
        if draw(st.booleans()):
            written = pattern(value, draw(cuts(len(value))))
            constraints.append(RowEq(written, Row(value), "operand's value"))
        else:
            written = Row(value)
        constraints.append(RowIneq(result, written, "broadcast"))
    order = draw(st.permutations(range(len(constraints))))
    return [constraints[i] for i in order], result, expected


@SETTINGS
@given(broadcast_problems())
def test_broadcasting_rows_with_inner_variables_is_numpys_in_any_order(problem):
    constraints, result, expected = problem
    solver = Solver()
    solver.add(*constraints)
    solver.finalise()
    assert tuple(d.size for d in solver.final_row(result).dims) == expected
    for c in constraints:
        if isinstance(c, RowEq):  # each pattern took its operand's value, axis for axis
            assert solver.final_row(c.left) == c.right


@st.composite
def unification_problems(draw):
    value = tuple(draw(st.lists(st.integers(1, 5), max_size=5)))
    first = pattern(value, draw(cuts(len(value))))
    second = pattern(value, draw(cuts(len(value))))
    constraints = [RowEq(first, second, "patterns"), RowEq(second, Row(value), "value")]
    if draw(st.booleans()):
        constraints.reverse()
    return constraints, first, second, value


@SETTINGS
@given(unification_problems())
def test_two_patterns_of_one_row_unify_in_any_order(problem):
    constraints, first, second, value = problem
    solver = Solver()
    solver.add(*constraints)
    solver.finalise()
    assert solver.final_row(first) == Row(value) == solver.final_row(second)


def test_beginning_axes_unify_from_the_left_and_end_axes_from_the_right():
    solver = Solver()
    a, b = Shape.parse("x,...,y").output, Shape.parse("2,3,...").output
    solver.add(RowEq(a, b, "eq"), RowEq(b, Row((2, 3, 4, 5)), "value"))
    solver.finalise()
    assert solver.final_row(a) == Row((2, 3, 4, 5))
    assert [solver.dim(d).size for d in (*a.beg_dims, *a.dims)] == [2, 5]


def test_patterns_left_open_on_opposite_ends_are_settled_at_finalisation():
    """``x,..v..`` = ``..w..,y,z``: either variable may be the longer; finalisation closes
    the side with more fixed axes, and the other takes the difference."""
    solver = Solver()
    a, b = Shape.parse("x,...").output, Shape.parse("...,y,z").output
    solver.add(RowEq(a, b, "eq"))
    assert solver.row(a).row_var is not None  # nothing guessed while solving
    solver.finalise()
    assert len(solver.final_row(a)) == len(solver.final_row(b)) == 2


def test_an_unknown_operand_written_with_an_inner_variable_broadcasts():
    x, y = Shape.parse("a...b", "x"), Shape.unknown("y")
    inference = ShapeInference()
    inference.add(Update(y, PointwiseBin(x, Shape(output=[5, 3, 4], name="w"))))
    assert inference.final(y) == Shape(output=[5, 3, 4])
    assert inference.final(x) == Shape(output=[3, 4])


def test_a_batch_slice_of_a_row_with_beginning_axes_drops_the_first():
    y = Shape.unknown("y")
    inference = ShapeInference()
    inference.add(Update(y, BatchSlice(Shape.parse("2,...,5|3->4", "x"))))
    assert inference.final(y) == Shape.parse("5|3->4")


# ----- contradictions -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "operands", "complaint"),
    [
        ("i...j=>...", ["2"], r"\[2\] has 1 axis, \[i,\.\.\.,j\] needs at least 2"),
        ("ij...k=>...", ["2,3"], r"needs at least 3"),
        ("i...;...i=>...", ["3,5", "5,4"], r"size (3|4) does not broadcast to (4|3)"),
        ("i...j;j...=>...", ["2,3,4", "5,4"], r"does not broadcast"),
        ("i...j...=>i", ["2,3"], r"at most one row variable"),
        ("i...j=>k...", ["2,3"], r"'k' does not occur"),
        ("i...=>i,..r..", ["2,3"], r"'\.\.r\.\.' of the result does not occur"),
    ],
)
def test_contradictory_specs_are_shape_errors_saying_what_was_expected(spec, operands, complaint):
    with pytest.raises(ShapeError, match=complaint) as error:
        einsum_shape(spec, *operands)
    if "needs at least" in complaint or "broadcast" in complaint:
        assert f"Einsum '{spec}'" in str(error.value) and "operand" in str(error.value)


def test_an_inner_variable_that_would_hold_its_own_row_is_refused():
    v = RowVar.fresh()
    solver = Solver()
    solver.add(RowEq(Row((), v, beg_dims=(DimVar.fresh(),)), Row((), v), "self"))
    with pytest.raises(ShapeError, match="cannot equal itself with more axes"):
        solver.solve()


def test_beginning_axes_of_different_sizes_contradict():
    solver = Solver()
    solver.add(RowEq(Shape.parse("2,...").output, Shape.parse("3,...,4").output, "eq"))
    with pytest.raises(ShapeError, match="sizes differ: 2 vs 3"):
        solver.solve()


def test_a_closed_row_shorter_than_a_patterns_fixed_axes_cannot_be_above_it():
    solver = Solver()
    solver.add(RowIneq(Row((3,)), Shape.parse("a,...,b").output, "broadcast"))
    with pytest.raises(ShapeError, match="fewer axes"):
        solver.solve()


def test_a_row_above_itself_with_more_axes_is_checked_once_its_variable_is_known():
    """``x,..v..,3 >= ..v..``: v's axes align with the right end of the longer row, so the
    constraint waits for v, then its last axis meets the 3."""
    v = RowVar.fresh()
    solver = Solver()
    above = Row((Dim(3),), v, beg_dims=(DimVar.fresh(),))
    solver.add(RowIneq(above, Row((), v), "itself"), RowEq(Row((), v), Row((5,)), "value"))
    with pytest.raises(ShapeError, match="does not broadcast"):
        solver.solve()
    solver = Solver()
    solver.add(RowIneq(above, Row((), v), "itself"), RowEq(Row((), v), Row((3,)), "value"))
    solver.finalise()
    assert [d.size for d in solver.final_row(above).dims] == [1, 3, 3]
