"""Einsum specs ``rhs1;rhs2=>lhs`` turned into shape constraints.

Each pseudo-label of a spec becomes one dimension variable shared by every place it occurs;
``...`` in a row becomes one row variable per row kind, ``..name..`` one per name, and it may
stand anywhere in its row (``i...j``). Operands broadcast into the spec (``spec row >=
operand row``) and the result *is* the left-hand side (``lhs row = result row``). Where a
spec row has labels before its row variable, the operand row is read as NumPy's einsum
reads it: its first axes are those labels, its last axes the labels after the variable,
and only the middle broadcasts into the variable (so the operand needs all those axes).
Labels missing from the left-hand side are summed over. A digit
on the right selects a fixed index of that operand axis; on the left it adds a size-1 axis.
An operand spec without ``|`` leaves the batch axes to broadcast pointwise (as ``...|``); a
result spec without ``|`` then keeps them, and otherwise has no batch axes.
"""

from __future__ import annotations

from popart_unwind.errors import ShapeError
from popart_unwind.shapes.notation import Labelled, RowSpec, ShapeSpec, parse_einsum_spec
from popart_unwind.shapes.row import (
    Constraint,
    Dim,
    DimIneq,
    DimLike,
    DimVar,
    Row,
    RowEq,
    RowIneq,
    RowVar,
    fresh_id,
)
from popart_unwind.shapes.shape import KINDS, Shape

__all__ = ["einsum_constraints"]

_IMPLICIT_BATCH = RowSpec((), "")


class _Builder:
    """Turns the rows of one spec into rows of variables shared across the spec."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.labels: dict[str, DimVar] = {}
        self.row_vars: dict[tuple[str, str], RowVar] = {}
        self.fixed: list[tuple[DimLike, int]] = []

    def row(self, row_spec: RowSpec, kind: str, on_left: bool) -> Row:
        beg = self.dims(row_spec.beg, on_left)
        dims = self.dims(row_spec.entries, on_left)
        var = None
        if row_spec.row_var is not None:
            key = (kind, "") if row_spec.row_var == "" else ("", row_spec.row_var)
            if on_left and key not in self.row_vars:
                what = f"'...' in the {kind} row" if key[1] == "" else f"'..{key[1]}..'"
                raise ShapeError(
                    f"einsum spec {self.spec!r}: {what} of the result does not occur in any operand"
                )
            var = self.row_vars.setdefault(key, RowVar.fresh(row_spec.row_var or None))
        return Row(dims, var, beg_dims=beg)

    def dims(self, entries: tuple, on_left: bool) -> tuple[DimLike, ...]:
        dims: list[DimLike] = []
        for entry in entries:
            if isinstance(entry, Labelled):
                raise ShapeError(
                    f"einsum spec {self.spec!r}: '{entry.label}={entry.size}' is "
                    f"not allowed, use a pseudo-label or a digit"
                )
            if isinstance(entry, int) and on_left:
                axis = Dim(1, proj_id=fresh_id())  # a new axis: always read at index 0
                self.fixed.append((axis, 0))
                dims.append(axis)
            elif isinstance(entry, int):
                fixed = DimVar.fresh()
                self.fixed.append((fixed, entry))
                dims.append(fixed)
            else:
                if on_left and entry not in self.labels:
                    raise ShapeError(
                        f"einsum spec {self.spec!r}: result label '{entry}' does "
                        f"not occur in any operand"
                    )
                dims.append(self.labels.setdefault(entry, DimVar.fresh(entry)))
        return tuple(dims)

    def rows(self, spec: ShapeSpec, on_left: bool) -> dict[str, Row]:
        batch = spec.batch
        if batch is None:  # on the left, only if the operands broadcast their batch axes
            implicit = not on_left or ("batch", "") in self.row_vars
            batch = _IMPLICIT_BATCH if implicit else RowSpec()
        return {
            "batch": self.row(batch, "batch", on_left),
            "input": self.row(spec.input, "input", on_left),
            "output": self.row(spec.output, "output", on_left),
        }


def _operand_into_spec(spec: Row, operand: Row, origin: str) -> list[Constraint]:
    """``spec >= operand``. A spec row with labels before its row variable reads the operand
    as NumPy's einsum does: the operand *is* first axes, a middle and last axes, as many as
    the spec row's labels on each side (an equation, so the operand must have them); each
    label is ``>=`` its axis and the row variable ``>=`` the middle."""
    if not spec.beg_dims:
        return [RowIneq(spec, operand, origin)]
    assert spec.row_var is not None
    first = tuple(DimVar.fresh(getattr(d, "name", None)) for d in spec.beg_dims)
    last = tuple(DimVar.fresh(getattr(d, "name", None)) for d in spec.dims)
    middle = RowVar.fresh()
    return [
        RowEq(operand, Row(last, middle, beg_dims=first), origin),
        *(DimIneq(label, axis, origin) for label, axis in zip(spec.beg_dims, first, strict=True)),
        *(DimIneq(label, axis, origin) for label, axis in zip(spec.dims, last, strict=True)),
        RowIneq(Row((), spec.row_var), Row((), middle), origin),
    ]


def einsum_constraints(
    spec: str, result: Shape, operands: tuple[Shape, ...], origin: str
) -> tuple[tuple[Constraint, ...], tuple[tuple[DimLike, int], ...]]:
    """Constraints tying ``operands`` to ``result`` as ``spec`` says, with fresh variables,
    and the spec axes read at a fixed index (with that index)."""
    operand_specs, result_spec = parse_einsum_spec(spec)
    if len(operand_specs) != len(operands):
        raise ShapeError(
            f"einsum spec {spec!r} has {len(operand_specs)} operand(s), "
            f"{len(operands)} given ({origin})"
        )
    builder = _Builder(spec)
    constraints: list[Constraint] = []
    for position, (operand_spec, operand) in enumerate(zip(operand_specs, operands, strict=True)):
        rows = builder.rows(operand_spec, on_left=False)
        for kind in KINDS:
            where = (
                f"{origin}: {kind} of operand {position + 1} {operand.describe()} against the spec"
            )
            constraints += _operand_into_spec(rows[kind], operand.row(kind), where)
    result_rows = builder.rows(result_spec, on_left=True)
    constraints += [
        RowEq(
            result_rows[kind],
            result.row(kind),
            f"{origin}: {kind} of the result {result.describe()}",
        )
        for kind in KINDS
    ]
    return tuple(constraints), tuple(builder.fixed)
