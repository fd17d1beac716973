"""Einsum specs ``rhs1;rhs2=>lhs`` turned into shape constraints.

Each pseudo-label of a spec becomes one dimension variable shared by every place it occurs;
``...`` in a row becomes one row variable per row kind, ``..name..`` one per name. Operands
broadcast into the spec (``spec row >= operand row``) and the result *is* the left-hand side
(``lhs row = result row``). Labels missing from the left-hand side are summed over. A digit
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
        dims: list[DimLike] = []
        for entry in row_spec.entries:
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
        var = None
        if row_spec.row_var is not None:
            key = (kind, "") if row_spec.row_var == "" else ("", row_spec.row_var)
            if on_left and key not in self.row_vars:
                what = f"'...' in the {kind} row" if key[1] == "" else f"'..{key[1]}..'"
                raise ShapeError(
                    f"einsum spec {self.spec!r}: {what} of the result does not occur in any operand"
                )
            var = self.row_vars.setdefault(key, RowVar.fresh(row_spec.row_var or None))
        return Row(tuple(dims), var)

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
        constraints += [
            RowIneq(
                rows[kind],
                operand.row(kind),
                f"{origin}: {kind} of operand {position + 1} {operand.describe()} against the spec",
            )
            for kind in KINDS
        ]
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
