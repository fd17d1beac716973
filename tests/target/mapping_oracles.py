"""Independent numpy oracles shared by the target tests."""

from __future__ import annotations

from itertools import pairwise

import numpy as np


def owner_of(mapping, num_elements: int) -> np.ndarray:
    """The tile of each element; fails unless every element is on exactly one tile."""
    owner = np.full(num_elements, -1, dtype=np.int64)
    count = np.zeros(num_elements, dtype=np.int64)
    for tile, intervals in enumerate(mapping):
        for begin, end in intervals:
            assert 0 <= begin <= end <= num_elements, (tile, begin, end)
            count[begin:end] += 1
            owner[begin:end] = tile
    assert np.all(count == 1), "an element is unmapped or mapped twice"
    assert np.all((owner >= 0) & (owner < len(mapping)))
    return owner


def part_of(size: int, parts: int, index: np.ndarray) -> np.ndarray:
    """Which of `parts` nearly equal parts (boundaries floor(i*size/parts)) holds `index`."""
    boundaries = (np.arange(parts + 1) * size) // parts
    return np.searchsorted(boundaries, index, side="right") - 1


def random_mapping(rng: np.random.Generator, num_elements: int, num_tiles: int,
                   max_pieces: int = 40) -> list[list[tuple[int, int]]]:
    """A random valid mapping: random cut points, random tiles, shuffled interval order."""
    mapping: list[list[tuple[int, int]]] = [[] for _ in range(num_tiles)]
    if num_elements == 0:
        return mapping
    pieces = int(rng.integers(1, max_pieces + 1))
    cuts = np.unique(rng.integers(1, num_elements, size=pieces - 1)) if num_elements > 1 else []
    bounds = [0, *map(int, cuts), num_elements]
    for begin, end in pairwise(bounds):
        mapping[int(rng.integers(num_tiles))].append((begin, end))
    for intervals in mapping:
        rng.shuffle(intervals)
    return mapping


def mapping_from_owner(owner: np.ndarray, num_tiles: int) -> list[list[tuple[int, int]]]:
    """Poplar-format mapping of a per-element tile array (runs of one tile become intervals)."""
    mapping: list[list[tuple[int, int]]] = [[] for _ in range(num_tiles)]
    if owner.size == 0:
        return mapping
    starts = np.flatnonzero(np.diff(owner)) + 1
    bounds = [0, *starts.tolist(), owner.size]
    for begin, end in pairwise(bounds):
        mapping[int(owner[begin])].append((begin, end))
    return mapping
