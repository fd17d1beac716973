"""A tile mapping's JSON text written by numpy (``intervals_json``, the plan file's
``MappingText``, in pieces or whole) against ``json.dumps`` of the mapping's lists (the
oracle): empty tiles, tiles of many runs and numbers of every width."""

from __future__ import annotations

import io
import json
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.ir.tile_mapping import TileIntervals
from popart_unwind.report import mapping_text
from popart_unwind.report.mapping_text import intervals_json
from popart_unwind.report.plan_file import MappingText, compact_plan, dumps_plan, write_plan


def _text(mapping: MappingText) -> str:
    """The text the plan file holds for ``mapping``."""
    return bytes(mapping.data()).decode("ascii")


def _lists(mapping: TileIntervals) -> list:
    return [[[int(b), int(e)] for b, e in mapping[t]] for t in range(len(mapping))]


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 9), st.lists(st.tuples(st.integers(0, 8), st.integers(1, 12)),
                                   max_size=14), st.integers(0, 3))
def test_the_text_is_what_json_writes_of_the_lists(num_tiles, runs, widen):
    lengths = [length * 10 ** (widen * (n % 3)) for n, (_, length) in enumerate(runs)]
    tiles = np.repeat(np.array([t % num_tiles for t, _ in runs], np.int16), lengths)
    mapping = TileIntervals.from_tiles(tiles, num_tiles)
    lists = _lists(mapping)
    expected = json.dumps(lists, separators=(",", ":"))
    assert intervals_json(mapping) == expected
    assert _text(MappingText(mapping)) == expected
    assert _text(MappingText(lists)) == expected  # a mapping given as lists
    assert MappingText(mapping).lists() == lists


@pytest.mark.parametrize("at_a_time", [1, 3, mapping_text.RUNS_AT_A_TIME])
def test_numbers_at_each_power_of_ten(monkeypatch, at_a_time):
    monkeypatch.setattr(mapping_text, "RUNS_AT_A_TIME", at_a_time)  # runs a few at a time
    ends = [1, 9, 10, 11, 99, 100, 999, 1000, 10**6, 10**6 + 1]
    tiles = np.concatenate([np.full(b - a, n % 3, np.int16)
                            for n, (a, b) in enumerate(zip([0, *ends[:-1]], ends, strict=True))])
    mapping = TileIntervals.from_tiles(tiles, 4)
    assert intervals_json(mapping) == json.dumps(_lists(mapping), separators=(",", ":"))


def test_the_compact_plan_writes_the_lists():
    mapping = TileIntervals.from_tiles(np.array([1, 1, 0], np.int16), 2)
    text = compact_plan({"tensors": {"t": {"tile_mapping": MappingText(mapping)}}})
    assert text == '{"tensors":{"t":{"tile_mapping":[[[2,3]],[[0,2]]]}}}'


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 9), st.lists(st.tuples(st.integers(0, 8), st.integers(1, 30)),
                                   max_size=14), st.sampled_from([1, 2, 3, 5, 1 << 15]))
def test_the_pieces_follow_one_another(num_tiles, runs, at_a_time):
    """The text written a few tiles at a time (a tile of more runs alone) is the text
    json writes of the whole, however the tiles fall into pieces."""
    tiles = np.repeat(np.array([t % num_tiles for t, _ in runs], np.int16),
                      [length for _, length in runs])
    mapping = TileIntervals.from_tiles(tiles, num_tiles)
    expected = json.dumps(_lists(mapping), separators=(",", ":"))
    with patch.object(mapping_text, "RUNS_AT_A_TIME", at_a_time):
        pieces = list(mapping_text.intervals_pieces(mapping))
        assert b"".join(bytes(piece) for piece in pieces).decode("ascii") == expected
        assert b"".join(bytes(p) for p in MappingText(mapping).pieces()).decode() == expected
    if at_a_time == 1 and mapping.num_runs > 1:
        assert len(pieces) > 1  # the split was exercised


def test_the_plan_written_to_a_stream_is_the_plan_as_bytes(monkeypatch):
    monkeypatch.setattr(mapping_text, "RUNS_AT_A_TIME", 2)
    mapping = TileIntervals.from_tiles(np.array([1, 1, 0, 2, 1, 0, 0, 2], np.int16), 3)
    document = {"b": {"t": {"tile_mapping": MappingText(mapping), "shape": [8]}}, "a": 1}
    stream = io.BytesIO()
    write_plan(document, stream)
    assert stream.getvalue() == dumps_plan(document)
    assert json.loads(stream.getvalue())["b"]["t"]["tile_mapping"] == _lists(mapping)
