"""Declarative solving: permuting the constraints of a satisfiable problem changes nothing.

Problems are built from a hidden ground truth (rows of known sizes) so that they are
satisfiable; the rows the solver sees replace some sizes by variables and some leading axes
by row variables. Every order must finalise to the same rows (or fail alike, where the
finalisation policy cannot split a Total_elems count), and what it finds must be a solution:
rows are checked by hand, operations by solving each one again on its final shapes.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.shapes import (
    BatchSlice,
    Compose,
    Dim,
    DimVar,
    Einsum,
    PointwiseBin,
    PointwiseUn,
    Row,
    RowEq,
    RowIneq,
    RowSlice,
    RowVar,
    Shape,
    ShapeInference,
    Solver,
    TotalElems,
    Transpose,
    Update,
)

SETTINGS = settings(max_examples=150, deadline=None)


# ----- a hand-written checker of ground constraints -------------------------------------------
def row_ge(cur: tuple[int, ...], subr: tuple[int, ...]) -> bool:
    """cur >= subr for known rows: at least as many axes; right-aligned sizes equal or 1."""
    pairs = zip(reversed(cur), reversed(subr), strict=False)
    return len(cur) >= len(subr) and all(c == s or s == 1 for c, s in pairs)


def holds(kind: str, left: tuple[int, ...], right: tuple[int, ...], total: int) -> bool:
    if kind == "ineq":
        return row_ge(left, right)
    if kind == "eq":
        return left == right
    if kind == "total":
        return math.prod(left) == total
    return len(left) >= 1 and left[1:] == right  # slice


# ----- random satisfiable problems over rows --------------------------------------------------
@st.composite
def hidden_row(draw, truth: tuple[Dim, ...], pool: dict[Dim, list[DimVar]]) -> Row:
    """A row the truth satisfies: a suffix of it (known sizes or variables) after a row var.

    Known sizes may drop their label (it must then be inferred); variables may be shared
    between places of equal truth, which states an equation.
    """
    mode = draw(st.sampled_from(["known", "vars", "open", "unknown"]))
    if mode == "unknown":
        return Row((), RowVar.fresh())
    keep = len(truth) if mode in ("known", "vars") else draw(st.integers(0, len(truth)))
    dims = []
    for dim in truth[len(truth) - keep :]:
        if mode == "known" or draw(st.booleans()):
            dims.append(dim if draw(st.booleans()) else Dim(dim.size))
        elif pool.get(dim) and draw(st.booleans()):
            dims.append(draw(st.sampled_from(pool[dim])))
        else:
            var = DimVar.fresh()
            pool.setdefault(dim, []).append(var)
            dims.append(var)
    return Row(tuple(dims), RowVar.fresh() if mode == "open" else None)


@st.composite
def row_problems(draw):
    dims = st.builds(Dim, st.integers(1, 4), st.sampled_from([None, None, "x", "y"]))
    truths = [tuple(draw(st.lists(dims, max_size=3))) for _ in range(draw(st.integers(1, 3)))]
    relations = []  # (kind, index of left truth, index of right truth)
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["ineq", "ineq", "eq", "total", "slice"]))
        i = draw(st.integers(0, len(truths) - 1))
        base = truths[i]
        if kind == "ineq":  # the right side broadcasts into the left
            drop = draw(st.integers(0, len(base)))
            derived = tuple(Dim(1) if draw(st.booleans()) else d for d in base[drop:])
        elif kind == "slice":
            if not base:
                continue
            derived = base[1:]
        else:
            derived = base
        truths.append(derived)
        relations.append((kind, i, len(truths) - 1))
    pool: dict[Dim, list[DimVar]] = {}
    rows = [draw(hidden_row(t, pool)) for t in truths]
    constraints = []
    for kind, i, j in relations:
        if kind == "ineq":
            constraints.append(RowIneq(rows[i], rows[j], f"ineq {i} {j}"))
        elif kind == "eq":
            constraints.append(RowEq(rows[i], rows[j], f"eq {i} {j}"))
        elif kind == "slice":
            constraints.append(RowSlice(rows[i], rows[j], f"slice {i} {j}"))
        else:
            constraints.append(TotalElems(rows[i], _elements(truths[i]), f"total {i}"))
    return truths, rows, relations, constraints


def _elements(row: tuple[Dim, ...]) -> int:
    return math.prod(d.size for d in row)


def finalised_rows(constraints, rows) -> list[Row] | str:
    """The final ``rows``, or the message of the ShapeError finalisation raised."""
    solver = Solver()
    solver.add(*constraints)
    try:
        solver.finalise()
    except ShapeError as error:
        return str(error).split(";")[0]
    return [solver.final_row(r) for r in rows]


@SETTINGS
@given(row_problems(), st.randoms(use_true_random=False))
def test_row_constraints_finalise_the_same_in_any_order(problem, rnd):
    truths, rows, relations, constraints = problem
    reference = finalised_rows(constraints, rows)
    for _ in range(3):
        shuffled = list(constraints)
        rnd.shuffle(shuffled)
        outcome = finalised_rows(shuffled, rows)
        assert isinstance(outcome, str) == isinstance(reference, str)
        if not isinstance(reference, str):
            assert outcome == reference
    if isinstance(reference, str):
        # finalisation guesses; it may only miss a solution when a Total_elems count has to be
        # split over axes it cannot tell apart
        assert any(kind == "total" for kind, _, _ in relations), reference
        return
    sizes = [tuple(d.size for d in row.dims) for row in reference]
    for kind, i, j in relations:
        assert holds(kind, sizes[i], sizes[j], _elements(truths[i])), (kind, i, j)
    for truth, row, final in zip(truths, rows, reference, strict=True):
        for stated, found in zip(reversed(row.dims), reversed(final.dims), strict=False):
            if isinstance(stated, Dim) and stated.label:
                assert found.label == stated.label  # labels are kept
        if not row.is_open and all(isinstance(d, Dim) for d in row.dims):
            assert final.dims == tuple(
                Dim(d.size, found.label) for d, found in zip(truth, final.dims, strict=True)
            )


# ----- random satisfiable problems over operations --------------------------------------------
def _hide_shape(draw, truth: dict[str, tuple[int, ...]], pool, name: str) -> Shape:
    rows = {kind: draw(hidden_row(tuple(map(Dim, sizes)), pool)) for kind, sizes in truth.items()}
    return Shape(name=name, **rows)


def _down(draw, row: tuple[int, ...]) -> tuple[int, ...]:
    """A row that broadcasts into ``row``."""
    drop = draw(st.integers(0, len(row)))
    return tuple(1 if draw(st.booleans()) else d for d in row[drop:])


@st.composite
def op_problems(draw):
    """Known tensors and operations valid on them; then the shapes are partly hidden."""
    rows = st.lists(st.integers(1, 4), max_size=2).map(tuple)
    tensors = [{k: draw(rows) for k in ("batch", "input", "output")}]
    ops = []  # (logic name, operand indices, result index)
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["bin", "un", "compose", "transpose", "slice", "matmul"]))
        i = draw(st.integers(0, len(tensors) - 1))
        t = tensors[i]
        if kind in ("bin", "un"):
            other = {k: _down(draw, t[k]) for k in t}
            tensors.append(other)
            ops.append((kind, (i, len(tensors) - 1) if kind == "bin" else (len(tensors) - 1,), i))
        elif kind == "transpose":
            swapped = {"batch": t["batch"], "input": t["output"], "output": t["input"]}
            tensors.append(swapped)
            ops.append((kind, (i,), len(tensors) - 1))
        elif kind == "slice":
            grown = dict(t, batch=(draw(st.integers(1, 4)), *t["batch"]))
            tensors.append(grown)
            ops.append((kind, (len(tensors) - 1,), i))
        else:  # compose / einsum matmul: left: k -> out, right: in -> k
            k = draw(rows)
            left = {"batch": _down(draw, t["batch"]), "input": k, "output": t["output"]}
            right = {
                "batch": _down(draw, t["batch"]),
                "input": t["input"],
                "output": k if kind == "matmul" else _down(draw, k),
            }
            tensors += [left, right]
            ops.append((kind, (len(tensors) - 2, len(tensors) - 1), i))
            if kind == "matmul":  # as an einsum, labels spelling out every axis
                letters = iter("abcdefgh")
                ins, outs, ks = (
                    "".join(next(letters) for _ in r) for r in (t["input"], t["output"], k)
                )
                ops[-1] = (f"...|{ks}->{outs}; ...|{ins}->{ks} => ...|{ins}->{outs}", *ops[-1][1:])
    pool: dict[Dim, list[DimVar]] = {}
    shapes = [_hide_shape(draw, t, pool, f"t{n}") for n, t in enumerate(tensors)]
    return shapes, ops


_LOGIC = {
    "bin": PointwiseBin,
    "un": PointwiseUn,
    "compose": Compose,
    "transpose": Transpose,
    "slice": BatchSlice,
}


def _logic(kind: str, *operands: Shape):
    return _LOGIC[kind](*operands) if kind in _LOGIC else Einsum(kind, *operands)


def final_shapes(updates, shapes) -> list[Shape]:
    inference = ShapeInference()
    inference.add(*updates)
    return [inference.final(s) for s in shapes]


@SETTINGS
@given(op_problems(), st.randoms(use_true_random=False))
def test_operations_infer_the_same_shapes_in_any_order(problem, rnd):
    shapes, ops = problem
    updates = [
        Update(shapes[result], _logic(kind, *(shapes[i] for i in operands)), name=f"op{n}")
        for n, (kind, operands, result) in enumerate(ops)
    ]
    reference = final_shapes(updates, shapes)
    for _ in range(2):
        shuffled = list(updates)
        rnd.shuffle(shuffled)
        assert final_shapes(shuffled, shapes) == reference
    # the result is a solution: re-checking every operation on the final shapes succeeds
    known = {id(s): f for s, f in zip(shapes, reference, strict=True)}
    for update in updates:
        operands = [known[id(s)] for s in update.logic.operands]
        check = ShapeInference()
        check.add(Update(known[id(update.result)], update.logic.with_operands(*operands)))
        check.finalise()
