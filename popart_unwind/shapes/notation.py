"""The text notation of shapes and einsum specs: ``batch|input->output``.

A row's entries are separated by whitespace, commas or parentheses; without any separator
each character is an entry, unless the text is all digits (one size). Digits are sizes (or
fixed indices in einsum specs), other entries are names, ``label=size`` is a labelled size.
A row may start with ``...`` (its row variable) or ``..name..`` (a named row variable).
Whitespace around a row, or right after its row variable, does not count as a separator.
This module only reads and writes text; :mod:`shape` and :mod:`einsum` give it meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from popart_unwind.errors import ShapeError

__all__ = ["Labelled", "RowSpec", "ShapeSpec", "parse_einsum_spec", "parse_shape_spec"]

_SEPARATOR = re.compile(r"[\s,()]+")
_ROW_VAR = re.compile(r"\s*(?:\.\.\.|\.\.([A-Za-z_][\w]*)\.\.)")
_NAME = re.compile(r"[A-Za-z_$][\w$]*")
_LABELLED = re.compile(r"([A-Za-z_][\w]*)=(\d+)")


@dataclass(frozen=True)
class Labelled:
    """A ``label=size`` entry: a known size carrying a label."""

    label: str
    size: int


Entry = int | str | Labelled


@dataclass(frozen=True)
class RowSpec:
    """One row as written: ``row_var`` is None (closed), ``""`` for ``...``, or a name."""

    entries: tuple[Entry, ...] = ()
    row_var: str | None = None


@dataclass(frozen=True)
class ShapeSpec:
    """A shape as written; ``batch`` is None when the text has no ``|``."""

    batch: RowSpec | None
    input: RowSpec
    output: RowSpec


def _entry(token: str, text: str) -> Entry:
    if token.isdigit():
        return int(token)
    labelled = _LABELLED.fullmatch(token)
    if labelled:
        return Labelled(labelled[1], int(labelled[2]))
    if _NAME.fullmatch(token):
        return token
    if token.startswith(".."):
        raise ShapeError(f"'{token}' in {text!r}: a row variable must come first in its row")
    raise ShapeError(f"cannot read axis entry '{token}' in {text!r}")


def parse_row_spec(text: str) -> RowSpec:
    """Read one row: leading row variable, then separated entries or single characters."""
    row_var = None
    rest = text.strip()
    match = _ROW_VAR.match(rest)
    if match:
        row_var = match[1] or ""
        rest = rest[match.end() :].strip()
    if _SEPARATOR.search(rest):
        tokens = [t for t in _SEPARATOR.split(rest) if t]
    elif rest.isdigit():
        tokens = [rest]
    else:
        tokens = list(rest)
    return RowSpec(tuple(_entry(t, text) for t in tokens), row_var)


def parse_shape_spec(text: str) -> ShapeSpec:
    """Read ``batch|input->output``, ``input->output`` or ``output``."""
    if text.count("|") > 1 or text.count("->") > 1:
        raise ShapeError(f"{text!r}: at most one '|' and one '->' in a shape")
    if "|" in text and "->" in text and text.index("->") < text.index("|"):
        raise ShapeError(f"{text!r}: the batch row ('|') comes before input->output")
    batch_text, bar, rest = text.partition("|")
    if not bar:
        batch_text, rest = "", text
    input_text, arrow, output_text = rest.partition("->")
    if not arrow:
        input_text, output_text = "", rest
    return ShapeSpec(
        parse_row_spec(batch_text) if bar else None,
        parse_row_spec(input_text),
        parse_row_spec(output_text),
    )


def parse_einsum_spec(spec: str) -> tuple[tuple[ShapeSpec, ...], ShapeSpec]:
    """Read ``rhs1;rhs2=>lhs`` (the operands come first, the result after ``=>``)."""
    if spec.count("=>") != 1:
        raise ShapeError(f"einsum spec {spec!r} needs exactly one '=>' (operands => result)")
    rhs, lhs = spec.split("=>")
    operands = tuple(parse_shape_spec(part) for part in rhs.split(";"))
    return operands, parse_shape_spec(lhs)
