"""Text from a model is escaped before it reaches a terminal."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from popart_unwind.report.terminal_text import printable

BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def _is_control(char: str) -> bool:
    return unicodedata.category(char) == "Cc" or char in BIDI


@given(st.text())
def test_no_control_character_survives(text):
    assert not any(_is_control(c) for c in printable(text))
    assert not any(_is_control(c) for c in printable(text, lines=True) if c != "\n")


@given(st.text().filter(lambda t: not any(_is_control(c) for c in t)))
def test_text_without_controls_is_unchanged(text):
    assert printable(text) == text


@given(st.text())
def test_each_control_becomes_its_python_escape(text):
    """The escape is the one Python's repr writes, so the user can type it back."""
    expected = "".join(repr(c)[1:-1] if _is_control(c) and c not in "\t\n\r" else c
                       for c in text)
    expected = expected.replace("\t", "\\x09").replace("\n", "\\x0a").replace("\r", "\\x0d")
    assert printable(text) == expected


def test_an_ansi_escape_is_shown_not_obeyed():
    assert printable("Re\x1b[31mlu\x9b") == "Re\\x1b[31mlu\\x9b"
    assert printable("a\nb\tc", lines=True) == "a\nb\\x09c"
