"""Tile counts remembered while a cost walk runs: one layout's elements per tile are
asked for several times (an op's work, each result's memory, the elementwise output
choice, each later reader's work), and each count is a pass over the whole layout. A
few other answers about a layout are kept the same way (``CountMemo.answer``).

Inside ``remembered_counts()``, ``hooks.tile_counts`` looks a flat id array up by the
memory it reads (address, length, dtype) while the array owning that memory is alive,
and, failing that, compares it with the few arrays counted last (a result copied from
an operand has the operand's counts). Layouts are values: the walk never changes a
layout array in place once made, so the same memory holds the same ids; a count is
only reused while the owner of that memory is alive (a weak reference drops the entry
when it dies, before the memory can be reused). The counts handed out are read-only.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

#: Most recently counted arrays kept (strongly) to compare a new array's contents with.
RECENT_KEPT = 4
#: Arrays of at least this many ids are neither kept nor compared: large layouts are held
#: as intervals and expanded only while read, and keeping them would undo that.
KEPT_IDS_MAX = 1 << 24
#: Leading ids compared before a whole array is (most different layouts differ early).
PROBE = 256
#: Other answers about a layout kept (``CountMemo.answer``).
ANSWERS_KEPT = 4

_Key = tuple[int, int, str, int]


class CountMemo:
    """Counts per (memory, length, dtype, tile count), valid while the memory's owner
    lives."""

    def __init__(self) -> None:
        self._by_memory: dict[_Key, tuple[weakref.ref, np.ndarray]] = {}
        self._recent: deque[tuple[np.ndarray, int, np.ndarray]] = deque(maxlen=RECENT_KEPT)
        self._answers: deque[tuple[tuple, weakref.ref, np.ndarray]] = deque(
            maxlen=ANSWERS_KEPT)

    def counts(self, ids: np.ndarray, num_tiles: int,
               count: Callable[[np.ndarray, int], np.ndarray]) -> np.ndarray:
        """``count(ids, num_tiles)``, or what it gave for the same ids before. ``ids`` is
        flat and contiguous (others are counted, not remembered)."""
        if ids.ndim != 1 or not ids.flags.c_contiguous:
            return count(ids, num_tiles)
        key = (ids.__array_interface__["data"][0], ids.size, ids.dtype.str, num_tiles)
        found = self._by_memory.get(key)
        if found is not None and found[0]() is not None:
            return found[1]
        counts = self._recent_counts(ids, num_tiles)
        if counts is None:
            counts = np.asarray(count(ids, num_tiles))
            counts.flags.writeable = False
            if ids.size < KEPT_IDS_MAX:  # a copy of a kept array is not kept beside it
                self._recent.append((ids, num_tiles, counts))
        self._remember(key, ids, counts)
        return counts

    def answer(self, ids: np.ndarray, question: tuple,
               make: Callable[[], np.ndarray]) -> np.ndarray:
        """``make()``, an answer about the layout ``ids`` (flat, contiguous) and
        ``question`` (hashable), or what it gave before while ``ids``' memory lives: the
        last ``ANSWERS_KEPT`` answers are kept, read-only (an op's exchange and its least
        exchange read one result's layout with the same broadcast operand)."""
        if ids.ndim != 1 or not ids.flags.c_contiguous:
            return make()  # the memory alone does not say which elements it holds
        key = (ids.__array_interface__["data"][0], ids.size, ids.dtype.str, question)
        for kept_key, owner, answer in self._answers:
            if kept_key == key and owner() is not None:
                return answer
        answer = make()
        answer.flags.writeable = False
        owner = _owner(ids)
        if owner is not None:
            self._answers.append((key, weakref.ref(owner), answer))
        return answer

    def know(self, ids: np.ndarray, num_tiles: int, counts: np.ndarray) -> None:
        """Take ``counts`` as the tile counts of ``ids`` (found another way: a layout's
        runs, when it is expanded from them)."""
        flat = np.asarray(ids).reshape(-1)
        if not flat.flags.c_contiguous:
            return
        counts = np.array(counts, dtype=np.int64)
        counts.flags.writeable = False
        self._remember((flat.__array_interface__["data"][0], flat.size, flat.dtype.str,
                        num_tiles), flat, counts)

    def _recent_counts(self, ids: np.ndarray, num_tiles: int) -> np.ndarray | None:
        """The counts of a recently counted array holding the same ids, if any."""
        if ids.size >= KEPT_IDS_MAX:
            return None
        for kept, tiles, counts in self._recent:
            if tiles == num_tiles and kept.size == ids.size and kept.dtype == ids.dtype \
                    and np.array_equal(kept[:PROBE], ids[:PROBE]) \
                    and np.array_equal(kept, ids):
                return counts
        return None

    def _remember(self, key: _Key, ids: np.ndarray, counts: np.ndarray) -> None:
        """Keep ``counts`` for ``key`` while the array owning ``ids``' memory lives."""
        owner = _owner(ids)
        if owner is not None:
            memory = self._by_memory
            self._by_memory[key] = (weakref.ref(owner, lambda _, k=key: memory.pop(k, None)),
                                    counts)


def _owner(array: np.ndarray) -> np.ndarray | None:
    """The array owning ``array``'s memory, or None when that is not an array."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array if array.base is None else None


_active: list[CountMemo] = []


def active() -> CountMemo | None:
    """The memo of the innermost ``remembered_counts()``, or None outside one."""
    return _active[-1] if _active else None


@contextmanager
def remembered_counts() -> Iterator[CountMemo]:
    """Within, ``hooks.tile_counts`` remembers its counts (see the module docstring)."""
    memo = CountMemo()
    _active.append(memo)
    try:
        yield memo
    finally:
        _active.pop()
