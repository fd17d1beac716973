"""The C++ core's regions against popart_unwind.memory: same pieces, in the same order.

The solver's C++ core must plant the same paths as the Python reference, so its region
operations must not only give the same element sets but decompose them into the same
Regions in the same order. Each operation is run on random regions in both and compared
piece by piece (per-dimension on indices and the empty flag).
"""

from __future__ import annotations

import numpy as np
from core_convert import core_value, disjoint, python_value, to_core, to_core_all
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.memory.random_chains import random_region, random_reshape_target, random_shape

SETTINGS = settings(max_examples=300, deadline=None)


seeds = st.integers(0, 2**32 - 1)


@SETTINGS
@given(seeds)
def test_intersect_and_subtract(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    a, b = disjoint(rng, shape), disjoint(rng, shape)
    ca, cb = to_core_all(a), to_core_all(b)
    assert core_value(ca.intersect(cb).value()) == python_value(a.intersect(b))
    assert core_value(ca.subtract(cb).value()) == python_value(a.subtract(b))


@SETTINGS
@given(seeds)
def test_sample_and_fill(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    a, where = disjoint(rng, shape), random_region(rng, shape)
    sampled = a.sett_sample(where)
    assert core_value(to_core_all(a).sett_sample(to_core(where)).value()) == python_value(sampled)
    back = sampled.sett_fill_into(where)
    got = to_core_all(sampled).sett_fill_into(to_core(where)).value()
    assert core_value(got) == python_value(back)


@SETTINGS
@given(seeds)
def test_reshape(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = random_shape(rng, max_rank=4, max_dim=6)
    target = random_reshape_target(rng, shape, 4)
    a = disjoint(rng, shape)
    assert core_value(to_core_all(a).reshape(target).value()) == python_value(a.reshape(target))


@SETTINGS
@given(seeds)
def test_shuffle_reverse_expand_reduce(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = random_shape(rng)
    a = disjoint(rng, shape)
    ca = to_core_all(a)
    perm = [int(p) for p in rng.permutation(len(shape))]
    assert core_value(ca.dim_shuffle(perm).value()) == python_value(a.dim_shuffle(perm))
    axes = [int(x) for x in np.flatnonzero(rng.random(len(shape)) < 0.5)]
    assert core_value(ca.reverse(axes).value()) == python_value(a.reverse(axes))
    wide = tuple(int(rng.integers(1, 4)) if n == 1 else n for n in shape)
    assert core_value(ca.expand(list(wide)).value()) == python_value(a.expand(wide))
    narrow = tuple(1 if rng.random() < 0.5 else n for n in shape)
    assert core_value(ca.reduce(list(narrow)).value()) == python_value(a.reduce(narrow))
