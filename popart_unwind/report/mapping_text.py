"""A tile mapping's JSON text, written from its runs by numpy: the text ``json.dumps``
gives for the mapping's lists (``[[[begin,end],...],[],...]``, no spaces), without making
a Python list and two integers for every run. GPT-2 small's plan over four IPUs has
millions of runs; as lists they were seconds of the command and most of its peak memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from popart_unwind.ir.tile_mapping import TileIntervals

#: Powers of ten from 10 up: a non-negative number below ``_TENS[d - 1]`` has at most d
#: digits.
_TENS = 10 ** np.arange(1, 19, dtype=np.int64)
_OPEN, _CLOSE, _COMMA, _ZERO = (ord(c) for c in "[],0")
#: Runs whose text is made at a time: each step's arrays stay small (a few hundred KB to a
#: few MB) and their memory is reused, where whole-mapping ones were fresh memory each
#: step (seconds of system time for GPT-2 small's plan).
RUNS_AT_A_TIME = 1 << 15


def intervals_json(mapping: TileIntervals) -> str:
    """``json.dumps(lists, separators=(",", ":"))`` of ``mapping``'s lists of
    ``[begin, end]`` runs per tile (``intervals_ascii`` as text)."""
    return intervals_ascii(mapping).tobytes().decode("ascii")


def intervals_ascii(mapping: TileIntervals) -> np.ndarray:
    """``intervals_json``'s text as ASCII bytes in one numpy array (``intervals_pieces``
    joined)."""
    return np.concatenate(list(intervals_pieces(mapping)))


def intervals_pieces(mapping: TileIntervals) -> Iterator[np.ndarray]:
    """``intervals_json``'s text as ASCII bytes in pieces that follow one another, each
    the text of a few consecutive tiles (about ``RUNS_AT_A_TIME`` runs, or one tile of
    more): a writer takes each as it comes, and no array of the whole text (200 MB for
    GPT-2 small's plan, fresh pages each) or of all the runs' numbers is ever made."""
    num_tiles = len(mapping)
    if num_tiles == 0:
        yield np.frombuffer(b"[]", np.uint8)
        return
    bounds, begins, ends = mapping.run_arrays()
    low = 0
    while low < num_tiles:
        # the last tile whose runs end within RUNS_AT_A_TIME of the part's first run
        high = int(np.searchsorted(bounds, bounds[low] + RUNS_AT_A_TIME, side="right")) - 1
        high = min(max(high, low + 1), num_tiles)
        first, last = int(bounds[low]), int(bounds[high])
        text = _tiles_ascii(begins[first:last], ends[first:last], bounds[low:high + 1] - first)
        if low:  # a part after the first continues the list: its "[" becomes a comma
            text[0] = _COMMA
        yield text if high == num_tiles else text[:-1]  # the list's "]" ends the last
        low = high


def _tiles_ascii(begins: np.ndarray, ends: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The JSON text of a list of tiles' runs, tile t's being ``begins[bounds[t]:bounds[t +
    1]]`` and the same of ``ends``. Every character's place follows from the digits of the
    numbers before it: the text starts as commas (the separators) and the brackets and
    digits are written over them."""
    num_tiles = bounds.size - 1
    per_tile = np.diff(bounds)
    owners = np.repeat(np.arange(num_tiles), per_tile)
    begin_digits = np.searchsorted(_TENS, begins, side="right") + 1  # numbers >= 0
    end_digits = np.searchsorted(_TENS, ends, side="right") + 1
    length = begin_digits + end_digits + 3  # "[b,e]"
    # each run's text and the comma (or the tile's closing bracket) after it
    before = np.zeros(begins.size + 1, np.int64)
    np.cumsum(length + 1, out=before[1:])
    # a tile's text: "[", its runs and the commas between them, "]"
    tile_length = 2 + before[bounds[1:]] - before[bounds[:-1]] - (per_tile > 0)
    tile_start = np.ones(num_tiles, np.int64)  # after the opening "["
    np.cumsum(tile_length[:-1] + 1, out=tile_start[1:])
    tile_start[1:] += 1
    text = np.full(int(tile_length.sum()) + num_tiles + 1, _COMMA, np.uint8)
    text[0] = _OPEN
    text[tile_start] = _OPEN
    text[tile_start + tile_length - 1] = _CLOSE
    start = tile_start[owners] + 1 + before[:-1] - before[bounds[:-1][owners]]
    text[start] = _OPEN
    text[start + length - 1] = _CLOSE
    for low in range(0, begins.size, RUNS_AT_A_TIME):
        part = slice(low, low + RUNS_AT_A_TIME)
        _write_numbers(text, begins[part], start[part] + 1, begin_digits[part])
        _write_numbers(text, ends[part], start[part] + 2 + begin_digits[part],
                       end_digits[part])
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
