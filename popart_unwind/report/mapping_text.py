"""A tile mapping's JSON text, written from its runs by numpy: the text ``json.dumps``
gives for the mapping's lists (``[[[begin,end],...],[],...]``, no spaces), without making
a Python list and two integers for every run. GPT-2 small's plan over four IPUs has
millions of runs; as lists they were seconds of the command and most of its peak memory.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.ir.tile_mapping import TileIntervals

#: Powers of ten from 10 up: a non-negative number below ``_TENS[d - 1]`` has at most d
#: digits.
_TENS = 10 ** np.arange(1, 19, dtype=np.int64)
_OPEN, _CLOSE, _COMMA, _ZERO = (ord(c) for c in "[],0")
#: Runs whose numbers are written at a time: each step's arrays stay small (a few hundred
#: KB) and are reused, where whole-mapping ones were fresh memory each step (seconds of
#: system time for GPT-2 small's plan).
RUNS_AT_A_TIME = 1 << 15


def intervals_json(mapping: TileIntervals) -> str:
    """``json.dumps(lists, separators=(",", ":"))`` of ``mapping``'s lists of
    ``[begin, end]`` runs per tile (``intervals_ascii`` as text)."""
    return intervals_ascii(mapping).tobytes().decode("ascii")


def intervals_ascii(mapping: TileIntervals) -> np.ndarray:
    """``intervals_json``'s text as ASCII bytes in a numpy array (written out as it is).
    Every character's place follows from the digits of the numbers before it: the text
    starts as commas (the separators) and the brackets and digits are written over
    them."""
    rows, owners = mapping.owners()
    num_tiles = len(mapping)
    if num_tiles == 0:
        return np.frombuffer(b"[]", np.uint8)
    digits = np.searchsorted(_TENS, rows, side="right") + 1  # (runs, 2); numbers >= 0
    length = digits.sum(axis=1) + 3  # "[b,e]"
    # each run's text and the comma (or the tile's closing bracket) after it
    before = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(length + 1, out=before[1:])
    per_tile = np.bincount(owners, minlength=num_tiles)
    first = np.zeros(num_tiles + 1, np.int64)
    np.cumsum(per_tile, out=first[1:])
    # a tile's text: "[", its runs and the commas between them, "]"
    tile_length = 2 + before[first[1:]] - before[first[:-1]] - (per_tile > 0)
    tile_start = np.ones(num_tiles, np.int64)  # after the opening "["
    np.cumsum(tile_length[:-1] + 1, out=tile_start[1:])
    tile_start[1:] += 1
    text = np.full(int(tile_length.sum()) + num_tiles + 1, _COMMA, np.uint8)
    text[0] = _OPEN
    text[tile_start] = _OPEN
    text[tile_start + tile_length - 1] = _CLOSE
    start = tile_start[owners] + 1 + before[:-1] - before[first[owners]]
    text[start] = _OPEN
    text[start + length - 1] = _CLOSE
    for low in range(0, rows.shape[0], RUNS_AT_A_TIME):
        part = slice(low, low + RUNS_AT_A_TIME)
        _write_numbers(text, rows[part, 0], start[part] + 1, digits[part, 0])
        _write_numbers(text, rows[part, 1], start[part] + 2 + digits[part, 0], digits[part, 1])
    text[-1] = _CLOSE  # after the numbers: they write their leading zeros there
    return text


def _write_numbers(text: np.ndarray, numbers: np.ndarray, at: np.ndarray,
                   digits: np.ndarray) -> None:
    """Write each non-negative number's ``digits`` decimal digits into ``text`` from
    ``at``, the last digit first; a number out of digits writes its leading zeros into
    ``text``'s last byte instead, which the caller writes afterwards."""
    narrow = np.int32 if not numbers.size or int(numbers.max()) < 2**31 else np.int64
    numbers = numbers.astype(narrow)
    last = (at + digits - 1).astype(np.int64)
    spare = text.size - 1
    for place in range(int(digits.max()) if digits.size else 0):
        where = np.where(digits > place, last - place, spare)
        text[where] = numbers % 10 + _ZERO
        numbers //= 10
