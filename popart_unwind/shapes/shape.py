"""The three-row tensor shape: batch, input and output axes.

In memory a tensor's axes are ordered batch, output, input (inputs last, so a matrix with
input row ``i`` and output row ``o`` is stored ``o x i``). Text form: ``batch|input->output``,
omitting an empty batch or input row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from popart_unwind.errors import ShapeError
from popart_unwind.shapes.notation import Labelled, RowSpec, parse_shape_spec
from popart_unwind.shapes.row import Dim, DimLike, DimVar, Row, RowVar, as_row

__all__ = ["KINDS", "Shape"]

KINDS = ("batch", "input", "output")
"""The row kinds, in the order the text notation writes them."""

RowLike = Row | Iterable[int | DimLike]


@dataclass(frozen=True, init=False)
class Shape:
    """A tensor shape as three rows; ``==`` compares the rows (the name is for messages).

    ``Shape(batch=[2], input=[3], output=[4])`` is fully known; rows may also hold
    variables (see :meth:`parse` and :meth:`unknown`) while shapes are being inferred.
    """

    batch: Row
    input: Row
    output: Row
    name: str = field(default="", compare=False)

    def __init__(
        self, batch: RowLike = (), input: RowLike = (), output: RowLike = (), name: str = ""
    ) -> None:
        object.__setattr__(self, "batch", as_row(batch))
        object.__setattr__(self, "input", as_row(input))
        object.__setattr__(self, "output", as_row(output))
        object.__setattr__(self, "name", name)

    @classmethod
    def parse(cls, text: str, name: str = "") -> Shape:
        """A shape from ``batch|input->output`` text; names become variables (shared by name),
        ``...`` an anonymous row variable of its row, ``..r..`` a row variable named r, each
        anywhere in its row (``a...b``)."""
        spec = parse_shape_spec(text)
        dim_vars: dict[str, DimVar] = {}
        row_vars: dict[str, RowVar] = {}

        def row(row_spec: RowSpec | None) -> Row:
            if row_spec is None:
                return Row()
            def dims(entries: tuple) -> tuple[DimLike, ...]:
                found: list[DimLike] = []
                for entry in entries:
                    if isinstance(entry, int):
                        found.append(Dim(entry))
                    elif isinstance(entry, Labelled):
                        found.append(Dim(entry.size, entry.label))
                    else:
                        found.append(dim_vars.setdefault(entry, DimVar.fresh(entry)))
                return tuple(found)

            var = None
            if row_spec.row_var == "":
                var = RowVar.fresh()
            elif row_spec.row_var is not None:
                var = row_vars.setdefault(row_spec.row_var, RowVar.fresh(row_spec.row_var))
            return Row(dims(row_spec.entries), var, beg_dims=dims(row_spec.beg))

        return cls(row(spec.batch), row(spec.input), row(spec.output), name)

    @classmethod
    def unknown(cls, name: str = "") -> Shape:
        """A shape about which nothing is known yet: three rows of row variables only."""
        batch, input_, output = (Row((), RowVar.fresh()) for _ in KINDS)
        return cls(batch, input_, output, name)

    def row(self, kind: str) -> Row:
        if kind not in KINDS:
            raise ShapeError(f"row kind must be one of {KINDS}, got {kind!r}")
        return getattr(self, kind)

    @property
    def memory_dims(self) -> tuple[DimLike, ...]:
        """All axes in memory order: batch, output, input."""
        return self.batch.axes + self.output.axes + self.input.axes

    @property
    def is_known(self) -> bool:
        """No variable left: every row closed, every size known."""
        return all(not self.row(k).is_open for k in KINDS) and all(
            isinstance(d, Dim) for d in self.memory_dims
        )

    @property
    def sizes(self) -> tuple[int, ...]:
        """Axis sizes in memory order; only for a known shape."""
        if not self.is_known:
            raise ShapeError(f"shape {self} of {self.name or 'a tensor'} is not fully known")
        return tuple(d.size for d in self.memory_dims)  # type: ignore[union-attr]

    def describe(self) -> str:
        """How messages refer to the tensor: its name, else its shape."""
        return f"'{self.name}'" if self.name else f"'{self}'"

    def __str__(self) -> str:
        text = str(self.output)
        if len(self.input) or self.input.is_open:
            text = f"{self.input}->{text}"
        if len(self.batch) or self.batch.is_open:
            text = f"{self.batch}|{text}"
        return text

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        return f"Shape.parse({str(self)!r}{name})"
