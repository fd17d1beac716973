"""The solver's rules one by one: equations, inequalities, LUBs, Total_elems, slices, labels."""

from __future__ import annotations

import time

import pytest

from popart_unwind.errors import ShapeError
from popart_unwind.shapes import (
    Dim,
    DimEq,
    DimIneq,
    DimVar,
    Row,
    RowEq,
    RowIneq,
    RowSlice,
    RowVar,
    Solver,
    TotalElems,
)
from popart_unwind.shapes.dims import strongly_connected


def solved(*constraints, finalise: bool = True) -> Solver:
    solver = Solver()
    solver.add(*constraints)
    solver.finalise() if finalise else solver.solve()
    return solver


def sizes(solver: Solver, row: Row) -> tuple[int, ...]:
    return tuple(d.size for d in solver.final_row(row).dims)


def var() -> DimVar:
    return DimVar.fresh()


def open_row(*dims) -> Row:
    return Row(dims, RowVar.fresh())


# ----- dimensions -----------------------------------------------------------------------------
def test_an_equation_solves_a_variable_and_chains_through_others():
    a, b = var(), var()
    solver = solved(DimEq(a, b), DimEq(b, Dim(5)), finalise=False)
    assert solver.dim(a) == Dim(5)


def test_unequal_sizes_contradict_and_the_error_names_sides_and_origin():
    a = var()
    with pytest.raises(ShapeError) as error:
        solved(DimEq(a, Dim(3), "op 'x'"), DimEq(a, Dim(4), "op 'y'"))
    message = str(error.value)
    assert "3" in message and "4" in message
    assert "op 'x'" in message or "op 'y'" in message


@pytest.mark.parametrize(("cur", "subr"), [(5, 5), (5, 1), (1, 1), (0, 1), (0, 0)])
def test_known_sizes_broadcast_when_equal_or_one(cur, subr):
    solved(DimIneq(Dim(cur), Dim(subr)))


@pytest.mark.parametrize(("cur", "subr"), [(5, 3), (1, 5), (0, 3)])
def test_known_sizes_that_do_not_broadcast_contradict(cur, subr):
    with pytest.raises(ShapeError, match=f"size {subr} does not broadcast to {cur}"):
        solved(DimIneq(Dim(cur), Dim(subr), "here"))


def test_a_variable_above_a_size_other_than_one_equals_it():
    a = var()
    assert solved(DimIneq(a, Dim(7)), finalise=False).dim(a) == Dim(7)


def test_a_variable_above_one_learns_nothing_and_defaults_to_one():
    a = var()
    solver = solved(DimIneq(a, Dim(1)), finalise=False)
    assert solver.dim(a) == a
    solver.finalise()
    assert solver.dim(a) == Dim(1)


def test_a_variable_below_a_size_keeps_it_as_least_upper_bound():
    a = var()
    solver = solved(DimIneq(Dim(6), a), finalise=False)
    assert solver.dim(a) == a  # still open: 1 or 6
    solver.finalise()
    assert solver.dim(a) == Dim(6)


def test_two_different_upper_bounds_leave_only_one():
    a = var()
    solver = solved(DimIneq(Dim(6), a), DimIneq(Dim(4), a), finalise=False)
    assert solver.dim(a) == Dim(1)


def test_least_upper_bounds_pass_down_variable_chains():
    a, b, c = var(), var(), var()
    solver = solved(DimIneq(a, b), DimIneq(b, c), DimIneq(Dim(8), a))
    assert [solver.dim(v) for v in (a, b, c)] == [Dim(8)] * 3


def test_a_solved_variable_above_solves_the_ones_below_it():
    a, b = var(), var()
    solver = solved(DimIneq(a, b), DimIneq(Dim(1), a), finalise=False)
    assert solver.dim(b) == Dim(1)


def test_cycles_of_bounds_are_found_and_merged():
    graph = {1: [2], 2: [3], 3: [1, 4], 4: [], 5: [5]}
    assert sorted(map(sorted, strongly_connected(graph))) == [[1, 2, 3]]
    a, b, c = var(), var(), var()
    solver = solved(DimIneq(a, b), DimIneq(b, c), DimIneq(c, a), DimIneq(Dim(4), c))
    assert [solver.dim(v) for v in (a, b, c)] == [Dim(4)] * 3
    top, bottom = open_row(), open_row()
    solver = solved(RowIneq(top, bottom), RowIneq(bottom, top), RowIneq(Row((2, 3)), top))
    assert sizes(solver, top) == sizes(solver, bottom) == (2, 3)


# ----- labels ---------------------------------------------------------------------------------
def test_a_missing_label_is_inferred_from_the_other_side():
    a, b = var(), var()
    for order in (
        [DimEq(a, Dim(3)), DimEq(a, b), DimEq(b, Dim(3, "rgb"))],
        [DimEq(b, Dim(3, "rgb")), DimEq(a, b), DimEq(a, Dim(3))],
    ):
        solver = solved(*order)
        assert solver.dim(a) == Dim(3, "rgb")


def test_labels_that_differ_contradict():
    with pytest.raises(ShapeError, match="labels differ"):
        solved(DimEq(Dim(3, "rgb"), Dim(3, "xyz")))
    with pytest.raises(ShapeError, match="labels differ"):
        solved(DimIneq(Dim(3, "rgb"), Dim(3, "xyz")))


def test_a_label_found_late_reaches_bounds_derived_earlier():
    """a = 3 reaches w's bound before a is known to be 3rgb; w <= 3xyz must then force w = 1."""
    a, w = var(), var()
    constraints = [
        DimEq(a, Dim(3)),
        DimIneq(a, w),
        DimIneq(Dim(3, "xyz"), w),
        DimEq(a, Dim(3, "rgb")),
    ]
    for order in (constraints, constraints[::-1]):
        assert solved(*order).dim(w) == Dim(1)


# ----- rows -----------------------------------------------------------------------------------
def test_row_equations_align_from_the_right_and_extend_open_rows():
    a = var()
    row = open_row(a)
    solver = solved(RowEq(row, Row((2, 3, 4))), finalise=False)
    assert solver.row(row) == Row((2, 3, 4))


def test_closed_rows_of_different_lengths_are_not_equal():
    with pytest.raises(ShapeError, match="differ in their axes"):
        solved(RowEq(Row((3,)), Row((2, 3))))


def test_equal_row_variables_are_linked():
    left, right = open_row(), open_row(5)
    solver = solved(RowEq(left, right), RowEq(right, Row((1, 5))), finalise=False)
    assert solver.row(left) == Row((1, 5))


def test_an_open_row_above_a_longer_row_gains_the_missing_axes():
    row = open_row()
    solver = solved(RowIneq(row, Row((20, 20, 6, 3))), finalise=False)
    now = solver.row(row)
    assert now.is_open and now.dims == tuple(map(Dim, (20, 20, 6, 3)))
    assert sizes(solver, row) == (20, 20, 6, 3)


def test_a_closed_row_cannot_be_above_a_longer_one():
    with pytest.raises(ShapeError, match="fewer axes"):
        solved(RowIneq(Row((6, 3)), Row((2, 6, 3)), "add 'y'"))


def test_an_open_row_below_a_closed_one_takes_its_lub_at_finalisation():
    row = open_row()
    solver = solved(RowIneq(Row((4, 5)), row), RowIneq(Row((1, 5)), row))
    assert sizes(solver, row) == (1, 5)  # per-axis meets: 4 meet 1 = 1


def test_an_open_row_below_nothing_closes_empty():
    row = open_row(var())
    assert sizes(solved(RowIneq(open_row(), row)), row) == (1,)


def test_a_row_waiting_below_another_gets_its_axes_once_that_one_closes():
    """..b.. <= ..y.., 20, 20, 6, 3: b takes the bias broadcast of an activation."""
    bias, result = open_row(), open_row()
    solver = solved(RowIneq(result, Row((20, 20, 6, 3))), RowIneq(result, bias))
    assert sizes(solver, bias) == (20, 20, 6, 3)
    assert sizes(solver, result) == (20, 20, 6, 3)


def test_a_row_cannot_be_longer_than_itself():
    row = open_row()
    with pytest.raises(ShapeError):
        solved(RowIneq(row, Row((*row.dims, Dim(2)), row.row_var)))
    with pytest.raises(ShapeError):
        solved(RowEq(row, Row((Dim(2),), row.row_var)))


def test_a_cycle_that_keeps_adding_axes_fails_instead_of_hanging():
    a, b = open_row(), open_row()
    start = time.perf_counter()
    with pytest.raises(ShapeError):
        solved(RowIneq(a, Row((var(),), b.row_var)), RowIneq(b, Row((var(),), a.row_var)))
    assert time.perf_counter() - start < 5


# ----- Total_elems ----------------------------------------------------------------------------
def test_total_elems_solves_the_one_unknown_of_a_closed_row():
    a = var()
    assert solved(TotalElems(Row((a, 4)), 24), finalise=False).dim(a) == Dim(6)


def test_total_elems_is_checked_on_known_rows():
    solved(TotalElems(Row((2, 3)), 6))
    with pytest.raises(ShapeError, match="7 elements"):
        solved(TotalElems(Row((2, 3)), 7))
    with pytest.raises(ShapeError, match="do not fit"):
        solved(TotalElems(open_row(5), 12))


def test_total_elems_waits_for_an_open_row_then_gives_it_one_axis():
    row = open_row()
    solver = solved(TotalElems(row, 24), finalise=False)
    assert solver.row(row) == row
    solver.finalise()
    assert sizes(solver, row) == (24,)


def test_total_elems_with_two_unknowns_lets_the_rightmost_take_the_rest():
    a, b = var(), var()
    solver = solved(TotalElems(Row((a, b)), 10))
    assert (solver.dim(a), solver.dim(b)) == (Dim(1), Dim(10))


def test_a_row_field_total_elems_becomes_a_constraint():
    a = var()
    solver = solved(RowEq(Row((a, 2), total_elems=10), Row((var(), var()))), finalise=False)
    assert solver.dim(a) == Dim(5)


def test_a_counted_row_below_a_closed_one_takes_the_shortest_fitting_part_of_its_lub():
    row = open_row()
    solver = solved(RowIneq(Row((1, 2, 2)), row), TotalElems(row, 2))
    assert sizes(solver, row) == (2,)


# ----- batch slices ---------------------------------------------------------------------------
def test_slicing_a_known_row_removes_its_leftmost_axis():
    rest = open_row()
    assert sizes(solved(RowSlice(Row((7, 5, 3)), rest)), rest) == (5, 3)


def test_a_known_rest_makes_the_sliced_row_one_axis_longer():
    full = open_row()
    solver = solved(RowSlice(full, Row((5, 3))))
    assert len(solver.final_row(full).dims) == 3
    assert sizes(solver, full)[1:] == (5, 3)


def test_two_open_rows_in_a_slice_close_with_the_fewest_axes():
    full, rest = open_row(), open_row()
    solver = solved(RowSlice(full, rest))
    assert (sizes(solver, full), sizes(solver, rest)) == ((1,), ())


def test_slicing_is_a_function_of_the_sliced_row():
    full, one, other = open_row(), open_row(), open_row()
    solver = solved(RowSlice(full, one), RowSlice(full, other), RowEq(one, Row((4,))))
    assert sizes(solver, other) == (4,)


def test_a_row_without_axes_cannot_be_sliced():
    with pytest.raises(ShapeError, match="no axis left"):
        solved(RowSlice(Row(()), open_row(), "slice 'x'"))
