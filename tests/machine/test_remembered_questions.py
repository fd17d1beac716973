"""Exchange questions remembered by value inside a cost walk (``CountMemo.remembered``):
a value key is equal exactly when two arrays are (the oracle: ``np.array_equal`` and the
dtype), and every remembered question — what a broadcast operand's readers receive, what a
matmul's tiles receive, where a broadcast operand goes, what a row statistic's readers
receive — answers what the plain code answers outside a walk, for repeated, copied and
changed-in-place layouts alike."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.machine import IpuModel, MatmulPartition, TileTarget, count_memo
from popart_unwind.machine.count_memo import value_key
from popart_unwind.machine.exchange import broadcast_read_need, row_read_need


@st.composite
def layouts(draw, size=None):
    """Tile ids in runs of one tile (as layouts are) or scattered, in one of two dtypes."""
    size = draw(st.integers(0, 40)) if size is None else size
    run = draw(st.integers(1, 6))
    values = draw(st.lists(st.integers(0, 5), min_size=size // run + 1,
                           max_size=size // run + 1))
    dtype = draw(st.sampled_from([np.int16, np.int64]))
    return np.repeat(np.array(values, dtype=dtype), run)[:size]


@settings(max_examples=400, deadline=None)
@given(layouts(), layouts(), st.booleans(), st.integers(1, 8), st.integers(0, 40),
       st.sampled_from([count_memo.KEY_BYTES_MAX, 0, 16, 64]))
def test_value_keys_are_equal_exactly_when_the_arrays_are(a, b, related, runs_below, at,
                                                          bytes_max):
    """Equal keys only for equal arrays; equal arrays have equal keys unless their bytes
    would be copied and are over ``KEY_BYTES_MAX`` (a key equal to no other)."""
    if related and a.size:  # mostly equal: a copy, or one element changed (in a whole
        b = a.copy()        # 8-byte word or among the bytes after the last)
        if runs_below % 2:
            b[at % b.size] = (b[at % b.size] + 1) % 6
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(count_memo, "RUNS_KEPT_BELOW", runs_below)  # runs kept, or all values
        patched.setattr(count_memo, "KEY_BYTES_MAX", bytes_max)
        a_key, b_key = value_key(a), value_key(b)
        same_shape_key = value_key(a.reshape(1, -1))
    equal = a.dtype == b.dtype and np.array_equal(a, b)
    if count_memo.unmatched(a_key):
        assert a.nbytes > bytes_max and a_key[3] is not value_key(a)[3]
        assert a_key != b_key and a_key != same_shape_key
    else:
        assert (a_key == b_key) == equal
        assert same_shape_key == a_key  # the shape is the question's
    hash(a_key)


def test_a_large_array_of_many_runs_is_keyed_without_a_copy_and_never_remembered():
    """Over ``KEY_BYTES_MAX`` an array of many runs is not copied into its key (VGG-19's
    205 MB weight layout was, at its planning's peak): the key is equal to no other and
    the memo works the question out each time."""
    import tracemalloc

    scattered = np.random.default_rng(0).integers(0, 1472, count_memo.KEY_BYTES_MAX,
                                                  dtype=np.int16)  # twice the bytes
    tracemalloc.start()
    try:
        key = value_key(scattered)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count_memo.unmatched(key) and key != value_key(scattered.copy())
    assert peak < scattered.nbytes // 4  # a mask of its 8-byte words, not a copy
    memo, asked = count_memo.CountMemo(), []
    for _ in range(2):
        memo.remembered(("question",), [scattered], lambda: asked.append(1) or 7)
    assert asked == [1, 1] and not memo._asked
    small = scattered[:1000].copy()  # keyed by its bytes: asked once
    for _ in range(2):
        memo.remembered(("question",), [small], lambda: asked.append(2) or 7)
    assert asked == [1, 1, 2]


@st.composite
def broadcast_questions(draw):
    """A broadcast shape pair on a few tiles and several layouts of the readers and the
    operand: some repeated, some equal copies, some the same array changed in place."""
    full = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    small = tuple(size if draw(st.booleans()) else 1 for size in full)
    num_tiles = draw(st.integers(1, 6))
    readers = [draw(layouts(prod(full))) % num_tiles for _ in range(2)]
    held = [draw(layouts(prod(small))) % num_tiles for _ in range(2)]
    steps = draw(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1),
                                    st.sampled_from(["ask", "copy", "change"])),
                          min_size=1, max_size=8))
    return full, small, num_tiles, readers, held, steps


@settings(max_examples=200, deadline=None)
@given(broadcast_questions())
def test_remembered_broadcast_reads_are_the_plain_answers(case):
    full, small, num_tiles, readers, held, steps = case
    target = TileTarget(IpuModel(tiles_per_ipu=num_tiles))
    with count_memo.remembered_counts():
        for r, h, what in steps:
            if what == "copy":
                readers[r] = readers[r].copy()
            elif what == "change" and readers[r].size:
                readers[r][0] = (readers[r][0] + 1) % num_tiles  # in place, after asking
            inside = broadcast_read_need(readers[r], full, small, held[h], 2, num_tiles)
            placed = target.broadcast_operand_tiles(readers[r], full, small)
            with _outside():
                outside = broadcast_read_need(readers[r], full, small, held[h], 2, num_tiles)
                plain = target.broadcast_operand_tiles(readers[r], full, small)
            np.testing.assert_array_equal(inside.received_bytes, outside.received_bytes)
            np.testing.assert_array_equal(inside.regions, outside.regions)
            np.testing.assert_array_equal(placed, plain)
            inside.received_bytes[:] = -1  # a caller changing its answer changes no other
            placed[...] = 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2), st.integers(1, 12), st.integers(1, 4), st.integers(1, 12),
       st.sampled_from(["lhs", "rhs", "output"]), st.integers(0, 2**16),
       st.lists(st.sampled_from(["ask", "copy", "change", "other plan"]), min_size=1,
                max_size=6))
def test_remembered_matmul_reads_are_the_plain_answers(g, m, k, n, operand, seed, steps):
    target = TileTarget(IpuModel(tiles_per_ipu=8, min_bytes_per_tile=4, grain_bytes=4))
    count = g * {"lhs": m * k, "rhs": k * n, "output": m * n}[operand]
    tiles = np.random.default_rng(seed).integers(0, 8, count).astype(np.int16)
    partition = None
    with count_memo.remembered_counts():
        for what in steps:
            if what == "copy":
                tiles = tiles.copy()
            elif what == "change":
                tiles[-1] = (tiles[-1] + 3) % 8
            elif what == "other plan":
                partition = MatmulPartition(1, 1, 1, 1) if partition is None else None
            inside = target.matmul_readers(g, m, k, n, "float16", operand, tiles, partition)
            with _outside():
                outside = target.matmul_readers(g, m, k, n, "float16", operand, tiles,
                                                partition)
            np.testing.assert_array_equal(inside.received_bytes, outside.received_bytes)
            np.testing.assert_array_equal(inside.regions, outside.regions)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 2**16),
       st.lists(st.sampled_from(["ask", "copy", "change rows", "change held"]), min_size=1,
                max_size=6))
def test_remembered_row_reads_are_the_plain_answers(groups, length, seed, steps):
    rng = np.random.default_rng(seed)
    rows = np.repeat(rng.integers(0, 4, (groups, length)).astype(np.int16), 2, axis=1)
    held = rng.integers(0, 4, groups).astype(np.int16)
    with count_memo.remembered_counts():
        for what in steps:
            if what == "copy":
                rows, held = rows.copy(), held.copy()
            elif what == "change rows":
                rows[-1, -1] = (rows[-1, -1] + 1) % 4
            elif what == "change held":
                held[0] = (held[0] + 1) % 4
            inside = row_read_need(rows, held, 2, 4)
            with _outside():
                outside = row_read_need(rows, held, 2, 4)
            np.testing.assert_array_equal(inside.received_bytes, outside.received_bytes)
            np.testing.assert_array_equal(inside.regions, outside.regions)


def test_an_equal_question_is_worked_out_once_and_a_changed_one_again():
    made = []

    def make(value):
        return lambda: made.append(value) or np.full(3, value)

    tiles = np.repeat(np.arange(4, dtype=np.int16), 50)
    with count_memo.remembered_counts() as memo:
        assert memo.remembered(("q",), (tiles, None), make(1)).tolist() == [1] * 3
        assert memo.remembered(("q",), (tiles.copy(), None), make(2)).tolist() == [1] * 3
        assert memo.remembered(("q",), (tiles.astype(np.int32), None), make(3))[0] == 3
        assert memo.remembered(("other",), (tiles, None), make(4))[0] == 4
        assert memo.remembered(("q",), (tiles, tiles), make(5))[0] == 5
        tiles[7] = 3  # changed in place: another question
        assert memo.remembered(("q",), (tiles, None), make(6))[0] == 6
    assert made == [1, 3, 4, 5, 6]


def test_the_least_recently_asked_are_dropped_beyond_the_room(monkeypatch):
    monkeypatch.setattr(count_memo, "KEPT_QUESTION_BYTES", 8 * 1000)
    made = []
    with count_memo.remembered_counts() as memo:
        for value in (*range(40), 39, 0):  # each answer 8 bytes a value; 8,000 bytes kept
            memo.remembered(("q", value), (), lambda v=value: made.append(v) or np.zeros(100))
    assert made == [*range(40), 0]  # the last one kept, the first dropped and made again


class _outside:
    """No walk's memo while inside (the plain code)."""

    def __enter__(self):
        self.saved = count_memo._active[:]
        count_memo._active.clear()

    def __exit__(self, *exc):
        count_memo._active[:] = self.saved


@settings(max_examples=300, deadline=None)
@given(layouts(), st.lists(st.sampled_from(["ask", "view", "freeze", "change", "copy",
                                            "replace"]), min_size=1, max_size=12),
       st.booleans())
def test_the_memo_keys_every_array_as_value_key_does(start, steps, keep_all):
    """``CountMemo.value_key`` keeps the keys of read-only memory: whatever is frozen,
    viewed, changed in place (while writeable), copied, or freed and its memory taken by
    a new array of other values in between, it gives what ``value_key`` gives of the
    array as it is now."""
    memo = count_memo.CountMemo()
    array = start.copy()
    saved = count_memo.KEY_KEPT_BELOW
    count_memo.KEY_KEPT_BELOW = 0 if keep_all else saved  # 0: every key kept
    try:
        for step in steps:
            if step == "view":
                array = array[:]
            elif step == "freeze":
                count_memo.read_only(array)
            elif step == "change" and array.size and array.flags.writeable \
                    and count_memo._owner(array).flags.writeable:
                array[0] = (array[0] + 1) % 6
            elif step == "copy":
                array = array.copy()
            elif step == "replace":  # freed; a new array, likely at the same address
                size, dtype, value = array.size, array.dtype, int(array[0]) if array.size else 0
                del array
                array = np.full(size, (value + 1) % 6, dtype)
                count_memo.read_only(array)
            assert memo.value_key(array) == value_key(array)
    finally:
        count_memo.KEY_KEPT_BELOW = saved


def test_a_read_only_layout_is_keyed_once_while_it_lives():
    memo = count_memo.CountMemo()
    layout = np.repeat(np.arange(8, dtype=np.int16), 1000)
    count_memo.read_only(layout)
    calls = []
    saved = count_memo.value_key

    def counted(array):
        calls.append(array.size)
        return saved(array)

    count_memo.value_key = counted
    try:
        first = memo.value_key(layout)
        assert memo.value_key(layout.reshape(8, 1000)) == first  # a view of the same memory
        assert calls == [8000]
        writeable = layout.copy()  # writeable memory: keyed at each question
        memo.value_key(writeable)
        memo.value_key(writeable)
        assert calls == [8000] * 3
    finally:
        count_memo.value_key = saved
    del layout  # its key goes with it
    assert not memo._keys


@settings(max_examples=300, deadline=None)
@given(layouts(), layouts(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_same_values_is_array_equal(a, b, related, keyed_a, keyed_b, shaped):
    """Compared by kept keys (both keyed inside a walk) or element by element, the answer
    is ``np.array_equal``'s, shapes and dtypes included."""
    if related:
        b = a.copy()
    if shaped and b.size:
        b = b.reshape(1, -1)
    count_memo.read_only(a)
    count_memo.read_only(b)
    saved = count_memo.KEY_KEPT_BELOW
    count_memo.KEY_KEPT_BELOW = 0  # every key kept
    try:
        with count_memo.remembered_counts() as memo:
            for array, keyed in ((a, keyed_a), (b, keyed_b)):
                if keyed:
                    memo.value_key(array)
            assert count_memo.same_values(a, b) == np.array_equal(a, b)
    finally:
        count_memo.KEY_KEPT_BELOW = saved
    assert count_memo.same_values(a, b) == np.array_equal(a, b)  # outside a walk
