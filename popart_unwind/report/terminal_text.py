"""Text from a model made safe for a terminal before it is printed.

Op types, tensor names and file names are the model's (or its author's) words: a raw ANSI
escape among them could recolour, hide or rewrite what the user reads, and a bidirectional
override could reorder it. Every line the command prints (errors, warnings, the summary
table and the lines under it) goes through :func:`printable`, which writes each control
character as a Python-style escape (``\\x1b``, ``\\u202e``) and leaves all other text as it
is.
"""

from __future__ import annotations

#: Unicode's bidirectional embeddings, overrides and isolates (they reorder what follows).
_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))


def _escaped(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: C0 controls, DEL and C1 controls, and the bidirectional controls, each to its escape.
_TABLE = {code: _escaped(code) for code in (*range(0x20), *range(0x7F, 0xA0), *_BIDI)}
#: The same, keeping newlines (for text printed as several lines, such as a table).
_LINES_TABLE = {code: text for code, text in _TABLE.items() if code != ord("\n")}


def printable(text: str, lines: bool = False) -> str:
    """``text`` with every control character escaped (``lines``: newlines kept)."""
    return text.translate(_LINES_TABLE if lines else _TABLE)
