"""Tile counts remembered while a cost walk runs: one layout's elements per tile are
asked for several times (an op's work, each result's memory, the elementwise output
choice, each later reader's work), and each count is a pass over the whole layout.

Whole exchange questions are remembered by value (``CountMemo.remembered``): an op's
least-exchange bound asks again what its exchange asked (the operands it does not move),
its agreement and its bound ask where a broadcast operand's readers are, and the layers
of a model lay out their tensors alike. A question is looked up by its arrays' values
(their bytes as runs, ``value_key``), so an answer is given again only for equal arrays,
whatever memory holds them and whatever was done to it since. Making a key reads the
whole array; the key of read-only memory (the walk makes each layout it computes
read-only) is kept beside it while its owner lives (``CountMemo.value_key``), so the
questions about one layout (its op's exchange, least exchange, agreement and work, and
its readers') read it once.

Inside ``remembered_counts()``, ``hooks.tile_counts`` looks a flat id array up by the
memory it reads (address, length, dtype) while the array owning that memory is alive,
and, failing that, by its values (``remembered``: a result copied from an operand has
the operand's counts, and the next layer's equal layout its own). Layouts are values:
the walk never changes a layout array in place once made, so the same memory holds the
same ids; a count is only reused by memory while the owner of that memory is alive (a
weak reference drops the entry when it dies, before the memory can be reused). The
counts handed out are read-only.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import numpy as np

#: Bytes of keys and answers ``CountMemo.remembered`` keeps (the least recently asked
#: dropped first): room for a layer's questions to be there when the next layer asks
#: them, most answers being a number or two per tile.
KEPT_QUESTION_BYTES = 1 << 27
#: An array with more runs of equal words than this share of its words is keyed by its
#: bytes, not its runs (the runs would take more room).
RUNS_KEPT_BELOW = 4

#: Most bytes of an array a value key copies when its runs are many: a larger array's key
#: is one equal to no other (``Unmatched``), and a question about it is worked out each
#: time. A question whose key and answer take more than an eighth of the room is never
#: kept anyway, so the copy bought nothing (VGG-19's [25088, 4096] weight layout: a copy
#: of its 205 MB and an index per 8-byte word of as many bytes, at its planning's peak).
KEY_BYTES_MAX = KEPT_QUESTION_BYTES // 8

#: A read-only array's value key is kept beside it while it lives (``CountMemo.value_key``)
#: when the key takes at most this share of the array's bytes: keys made from runs (at
#: most half the bytes, ``RUNS_KEPT_BELOW``) are kept, a copy of every byte is not.
KEY_KEPT_BELOW = 2

_Key = tuple[int, int, str, int]
T = TypeVar("T")


class CountMemo:
    """Counts per (memory, length, dtype, tile count), valid while the memory's owner
    lives; answers per question and its arrays' values."""

    def __init__(self) -> None:
        self._by_memory: dict[_Key, tuple[weakref.ref, np.ndarray]] = {}
        self._keys: dict[_Key, tuple[weakref.ref, tuple]] = {}
        self._asked: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        self._kept_bytes = 0

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
        counts = self.remembered_key((("tile counts", num_tiles), self.value_key(ids)),
                                     lambda: _read_only(count(ids, num_tiles)))
        self._remember(key, ids, counts)
        return counts

    def remembered(self, question: tuple, arrays: Sequence[np.ndarray | None],
                   make: Callable[[], T]) -> T:
        """``make()``, the answer to ``question`` (hashable) about ``arrays``, or the answer
        it gave before to the same question about arrays of equal values (dtype, size and
        every element's bytes; shapes are the question's). The arrays are looked up by
        their values (``value_key``), so an equal layout elsewhere in memory is the same
        question, and an array changed in place since is not. The answer is shared:
        callers must not change it."""
        return self.remembered_key((question, *(self.value_key(array) for array in arrays)),
                                   make)

    def value_key(self, array: np.ndarray | None) -> tuple | None:
        """``value_key(array)``, made once for memory no one can change: an array whose
        memory is owned by a read-only array (the cost walk makes each layout it computes
        read-only) is looked up by that memory while its owner lives, and several
        questions about one layout read it once. Writeable memory is keyed afresh each
        time (it may have changed since). Memory made read-only is taken to stay as it
        is: nothing in the package makes an array writeable again."""
        if array is None:
            return None
        flat = np.asarray(array)
        memory = _unchanging_memory(flat)
        if memory is None:
            return value_key(flat)
        key, owner = memory
        found = self._keys.get(key)
        if found is not None and found[0]() is owner:
            return found[1]
        made = value_key(flat)
        if unmatched(made):
            return made  # equal to no other key, for this memory or any
        if _key_bytes((None, made)) * KEY_KEPT_BELOW <= flat.nbytes:  # few runs: kept
            keys = self._keys
            self._keys[key] = (weakref.ref(owner, lambda _, k=key: keys.pop(k, None)), made)
        return made

    def kept_key(self, array: np.ndarray) -> tuple | None:
        """The value key ``value_key`` keeps for ``array``, or None (none made, or not
        kept): nothing is read."""
        memory = _unchanging_memory(np.asarray(array))
        if memory is None:
            return None
        found = self._keys.get(memory[0])
        return found[1] if found is not None and found[0]() is memory[1] else None

    def remembered_key(self, key: tuple, make: Callable[[], T]) -> T:
        """``remembered`` of a question and its arrays' value keys, ``(question,
        *value_keys)``, made by the caller (who may use a key twice)."""
        if any(unmatched(value) for value in key[1:]):
            return make()  # about an array too large to key: never asked again
        found = self._asked.get(key)
        if found is not None:
            self._asked.move_to_end(key)
            return found[0]  # type: ignore[return-value]
        answer = make()
        size = _key_bytes(key) + _answer_bytes(answer)
        if size <= KEPT_QUESTION_BYTES // 8:  # one question never fills the room
            self._asked[key] = (answer, size)
            self._kept_bytes += size
            while self._kept_bytes > KEPT_QUESTION_BYTES:
                _, (_, dropped) = self._asked.popitem(last=False)
                self._kept_bytes -= dropped
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

    def _remember(self, key: _Key, ids: np.ndarray, counts: np.ndarray) -> None:
        """Keep ``counts`` for ``key`` while the array owning ``ids``' memory lives."""
        owner = _owner(ids)
        if owner is not None:
            memory = self._by_memory
            self._by_memory[key] = (weakref.ref(owner, lambda _, k=key: memory.pop(k, None)),
                                    counts)


class Unmatched:
    """What a value key holds in place of the bytes of an array too large to copy
    (``KEY_BYTES_MAX``): equal to nothing but itself, so two such keys never match and
    a question about such an array is never answered from a memo."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Unmatched()"


def unmatched(key: object) -> bool:
    """Whether ``key`` is a value key equal to no other (``Unmatched``)."""
    return isinstance(key, tuple) and len(key) > 3 and isinstance(key[3], Unmatched)


def value_key(array: np.ndarray | None) -> tuple | None:
    """A hashable key equal for two arrays only when they hold the same bytes in the same
    dtype (shape aside; for integers, the same values): the dtype, the size, and the runs
    of equal 8-byte words of the array's bytes (where each starts, and its value) with the
    bytes after the last whole word, or all its bytes when runs are many
    (``RUNS_KEPT_BELOW``). The bytes say the values, and a layout's runs of one tile make
    runs of equal words (four 16-bit ids a word: a quarter of the elements to compare),
    so the key is small and quick to make and compare. Equal arrays have equal keys
    unless their runs are many and their bytes over ``KEY_BYTES_MAX``: such a key holds
    an ``Unmatched`` instead of a copy, equal to no other key."""
    if array is None:
        return None
    flat = np.ascontiguousarray(np.asarray(array).reshape(-1))
    raw = flat.view(np.uint8)
    whole = raw.size // 8 * 8
    words, tail = raw[:whole].view(np.int64), raw[whole:].tobytes()
    if words.size < 2:
        return _bytes_key(flat, raw)
    changes = words[1:] != words[:-1]
    if (int(np.count_nonzero(changes)) + 1) * RUNS_KEPT_BELOW > words.size:
        return _bytes_key(flat, raw)  # counted first: no index per word made for this
    starts = np.flatnonzero(changes)
    del changes  # not held beside what follows
    starts += 1
    values = np.concatenate((words[:1], words[starts]))
    return (flat.dtype.str, flat.size, starts.tobytes(), values.tobytes(), tail)


def _bytes_key(flat: np.ndarray, raw: np.ndarray) -> tuple:
    """``value_key`` of an array keyed by all its bytes, or by an ``Unmatched`` when they
    are over ``KEY_BYTES_MAX``."""
    if raw.size > KEY_BYTES_MAX:
        return (flat.dtype.str, flat.size, None, Unmatched(), b"")
    return (flat.dtype.str, flat.size, None, raw.tobytes(), b"")


def _key_bytes(key: tuple) -> int:
    """Bytes a ``remembered`` key holds in values' keys."""
    return sum(len(part) for value in key[1:] if value is not None
               for part in value[2:] if part is not None)


def _answer_bytes(answer: object) -> int:
    """Bytes of the arrays an answer holds (an array, or an object with ``arrays()``)."""
    if isinstance(answer, np.ndarray):
        return answer.nbytes
    arrays = getattr(answer, "arrays", None)
    return sum(a.nbytes for a in arrays()) if callable(arrays) else 0


def _read_only(counts: np.ndarray) -> np.ndarray:
    """``counts`` as an array no caller can change (they are shared)."""
    counts = np.asarray(counts)
    counts.flags.writeable = False
    return counts


def _unchanging_memory(flat: np.ndarray) -> tuple[_Key, np.ndarray] | None:
    """(address, size, dtype, 0) of ``flat``'s memory and the read-only array owning it,
    or None unless both are read-only (and ``flat`` contiguous and not empty)."""
    owner = _owner(flat)
    if owner is None or owner.flags.writeable or flat.flags.writeable \
            or not flat.flags.c_contiguous or flat.size == 0:
        return None
    return (flat.__array_interface__["data"][0], flat.size, flat.dtype.str, 0), owner


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """``np.array_equal(a, b)``; inside a cost walk, when the memo has kept both arrays'
    value keys and they are integers of one dtype and shape (the keys are then equal
    exactly when the values are), by comparing the keys instead of every element."""
    a, b = np.asarray(a), np.asarray(b)
    memo = active()
    if memo is not None and a.shape == b.shape and a.dtype == b.dtype \
            and a.dtype.kind in "iu":
        a_key, b_key = memo.kept_key(a), memo.kept_key(b)
        if a_key is not None and b_key is not None:
            return a_key == b_key
    return bool(np.array_equal(a, b))


def read_only(array: np.ndarray) -> None:
    """Make ``array`` and the array owning its memory read-only: a value no one changes
    from now on (``CountMemo.value_key`` then keys it once)."""
    array.flags.writeable = False
    owner = _owner(array)
    if owner is not None:
        owner.flags.writeable = False


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
    """Within, ``hooks.tile_counts`` remembers its counts and exchange questions their
    answers (see the module docstring). Inside another ``remembered_counts()`` the outer
    memo is kept: a session costing three plans of one model shares it, and the same
    tensor laid out alike in two plans is counted once (every answer depends on its
    question and its arrays' values alone)."""
    memo = _active[-1] if _active else CountMemo()
    _active.append(memo)
    try:
        yield memo
    finally:
        _active.pop()
