"""Dimensions, rows and the constraints between them: the vocabulary of shape inference.

A *row* is the list of axes of one kind (batch, input or output). Each axis is a known
:class:`Dim` or a :class:`DimVar`. An open row also has a :class:`RowVar` standing for axes
still to be discovered; it may stand anywhere in the row, so a row is its beginning axes
(``beg_dims``), the row variable, then its end axes (``dims``), as in OCANNL's rows. A row
without a row variable has no beginning axes: all of them are ``dims``. Values are
immutable; what is known about variables lives in a
:class:`~popart_unwind.shapes.solver.Solver`.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Self

from popart_unwind.errors import ShapeError

__all__ = [
    "Constraint",
    "Dim",
    "DimEq",
    "DimIneq",
    "DimLike",
    "DimVar",
    "Row",
    "RowEq",
    "RowIneq",
    "RowSlice",
    "RowVar",
    "TotalElems",
    "as_row",
    "fresh_id",
]

_ids = itertools.count(1)


def fresh_id() -> int:
    """A process-wide unique id for variables and projection ids (identity only, never order)."""
    return next(_ids)


@dataclass(frozen=True)
class Dim:
    """A known axis size with an optional label naming what the axis means.

    ``proj_id`` ties the axis to an iteration index while projections are derived; it takes no
    part in equality, so shapes compare by sizes and labels only.
    """

    size: int
    label: str | None = None
    proj_id: int | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.size, bool):
            raise ShapeError(f"axis size must be an integer, got {self.size!r}")
        try:
            size = operator.index(self.size)
        except TypeError:
            raise ShapeError(f"axis size must be an integer, got {self.size!r}") from None
        if size < 0:
            raise ShapeError(f"axis size must be non-negative, got {size}")
        object.__setattr__(self, "size", size)

    def __str__(self) -> str:
        return f"{self.label}={self.size}" if self.label else str(self.size)


@dataclass(frozen=True)
class _Variable:
    """What both kinds of variable are: a process-wide id (their identity) and a name that is
    only for printing."""

    id: int
    name: str | None = field(default=None, compare=False)

    @classmethod
    def fresh(cls, name: str | None = None) -> Self:
        return cls(fresh_id(), name)


@dataclass(frozen=True)
class DimVar(_Variable):
    """An unknown axis size. The name is only for printing (einsum labels keep theirs)."""

    def __str__(self) -> str:
        return self.name if self.name else f"${self.id}"


DimLike = Dim | DimVar


@dataclass(frozen=True)
class RowVar(_Variable):
    """Unknown axes of a row, between its beginning and end axes. Printed ``...``, or
    ``..name..`` when named."""

    def __str__(self) -> str:
        return f"..{self.name}.." if self.name else "..."


def _as_dim(entry: object) -> DimLike:
    if isinstance(entry, Dim | DimVar):
        return entry
    return Dim(entry)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Row:
    """The axes of one kind: ``beg_dims``, then what ``row_var`` (if any) stands for, then
    ``dims``.

    A row without a row variable is *broadcastable*: it has exactly these axes but may still be
    broadcast against a longer row; its axes are all in ``dims`` (``beg_dims`` given without a
    row variable are moved there). ``total_elems`` constrains the product of all its axes,
    including those the row variable will add.
    """

    dims: tuple[DimLike, ...] = ()
    row_var: RowVar | None = None
    total_elems: int | None = None
    beg_dims: tuple[DimLike, ...] = ()

    def __post_init__(self) -> None:
        dims = tuple(_as_dim(d) for d in self.dims)
        beg = tuple(_as_dim(d) for d in self.beg_dims)
        if self.row_var is None:
            dims, beg = beg + dims, ()
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "beg_dims", beg)
        if self.total_elems is not None and self.total_elems < 0:
            raise ShapeError(f"Total_elems must be non-negative, got {self.total_elems}")

    @property
    def is_open(self) -> bool:
        return self.row_var is not None

    @property
    def axes(self) -> tuple[DimLike, ...]:
        """Every axis the row states: beginning and end axes (the row variable's aside)."""
        return self.beg_dims + self.dims

    def __len__(self) -> int:
        return len(self.beg_dims) + len(self.dims)

    def __str__(self) -> str:
        entries = [str(d) for d in self.dims]
        if self.row_var is None and len(entries) == 1:
            only = entries[0]
            if len(only) > 1 and not only.isdigit():
                return f"({only})"  # one multi-character entry must not read as characters
        if self.row_var is not None:
            entries = [str(d) for d in self.beg_dims] + [str(self.row_var)] + entries
        return ",".join(entries)


def as_row(value: Row | Iterable[int | DimLike]) -> Row:
    """A row from a Row or from a sequence of sizes / dims (closed, no row variable)."""
    if isinstance(value, Row):
        return value
    if isinstance(value, str):
        raise ShapeError(f"a row is a sequence of sizes, not the string {value!r}")
    return Row(tuple(_as_dim(d) for d in value))


# ----- constraints ----------------------------------------------------------------------------
# Every constraint carries ``origin`` (the operation that stated it, for messages) and ``root``
# (the constraint a derived one was simplified from, so errors can show the original sides).


@dataclass(frozen=True)
class DimEq:
    """``left = right``: same size; labels agree, a missing one is taken from the other."""

    left: DimLike
    right: DimLike
    origin: str = field(default="", compare=False)
    root: Constraint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DimIneq:
    """``cur >= subr``: the sizes are equal, or ``subr`` is 1 and broadcasts."""

    cur: DimLike
    subr: DimLike
    origin: str = field(default="", compare=False)
    root: Constraint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RowEq:
    """``left = right``: the same axes; end axes align from the right, beginning axes from
    the left."""

    left: Row
    right: Row
    origin: str = field(default="", compare=False)
    root: Constraint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RowIneq:
    """``cur >= subr``: ``cur`` has at least ``subr``'s axes; right-aligned pairs obey ``>=``
    (NumPy broadcasting: ``subr`` may lack leading axes, wherever its row variable stands)."""

    cur: Row
    subr: Row
    origin: str = field(default="", compare=False)
    root: Constraint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TotalElems:
    """The product of all axes of ``row`` (row variable included) is ``total``."""

    row: Row
    total: int
    origin: str = field(default="", compare=False)
    root: Constraint | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class RowSlice:
    """``full`` is ``rest`` with one more axis on the left (batch slicing)."""

    full: Row
    rest: Row
    origin: str = field(default="", compare=False)
    root: Constraint | None = field(default=None, compare=False, repr=False)


Constraint = DimEq | DimIneq | RowEq | RowIneq | TotalElems | RowSlice
