"""The text notation of shapes and einsum specs: ``batch|input->output``.

A row's entries are separated by whitespace, commas or parentheses; without any separator
each character is an entry, unless the text is all digits (one size). Digits are sizes (or
fixed indices in einsum specs), other entries are names, ``label=size`` is a labelled size.
A row may hold one row variable, ``...`` or ``..name..`` (named), anywhere: its entries
before it are the row's beginning, those after it the end (``i...j``, ``b, ..., c``).
Whitespace around a row, or next to its row variable, does not count as a separator; the
separator rule is decided for the row as a whole, the all-digits rule for each side.
This module only reads and writes text; :mod:`shape` and :mod:`einsum` give it meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from popart_unwind.errors import ShapeError

__all__ = ["Labelled", "RowSpec", "ShapeSpec", "parse_einsum_spec", "parse_shape_spec"]

_SEPARATOR = re.compile(r"[\s,()]+")
_ROW_VAR = re.compile(r"\s*(?:\.\.\.|\.\.([A-Za-z_][\w]*)\.\.)\s*")
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
    """One row as written: ``row_var`` is None (closed), ``""`` for ``...``, or a name;
    ``beg`` holds the entries before the row variable, ``entries`` those after it (all of
    them when there is none)."""

    entries: tuple[Entry, ...] = ()
    row_var: str | None = None
    beg: tuple[Entry, ...] = ()


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
    raise ShapeError(f"cannot read axis entry '{token}' in {text!r}")


def _tokens(part: str, separated: bool) -> list[str]:
    if separated:
        return [t for t in _SEPARATOR.split(part) if t]
    if part.isdigit():
        return [part]
    return list(part)


def parse_row_spec(text: str) -> RowSpec:
    """Read one row: entries before the row variable (if any), the row variable, entries
    after it; entries are separated, or single characters where the row has no separator."""
    found = list(_ROW_VAR.finditer(text))
    if len(found) > 1:
        raise ShapeError(f"{text!r}: a row holds at most one row variable")
    if found:
        match = found[0]
        row_var: str | None = match[1] or ""
        before, after = text[: match.start()].strip(), text[match.end() :].strip()
    else:
        row_var, before, after = None, "", text.strip()
    separated = bool(_SEPARATOR.search(before) or _SEPARATOR.search(after))
    beg = tuple(_entry(t, text) for t in _tokens(before, separated))
    entries = tuple(_entry(t, text) for t in _tokens(after, separated))
    for entry in (*beg, *entries):
        if isinstance(entry, str) and entry.startswith("."):
            raise ShapeError(f"cannot read axis entry '{entry}' in {text!r}")
    return RowSpec(entries, row_var, beg)


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
