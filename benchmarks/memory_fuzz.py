"""Fuzz the memory layer against brute force, and measure canonicalization throughput.

Runs N random chains (all seven op types, rank <= 4, up to 8 ops) checking that the canonical
form has the chain's meaning (applied to arrays of distinct values) and is a fixpoint, and N
random region operations (every operation of Region / DisjointRegions, rank <= 3) checking
each result against numpy bitmaps. Then times canonicalization of chains of 4, 8 and 16 ops.

    python benchmarks/memory_fuzz.py                 # 100,000 of each (several minutes)
    python benchmarks/memory_fuzz.py --cases 2000    # a quick look

Cases are seeded (seed = case number), so a failure printed here is reproducible with
``random_chain(np.random.default_rng(seed), length)``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from popart_unwind.memory import DisjointRegions, Region
from popart_unwind.memory.canonical import canonicalize
from popart_unwind.memory.random_chains import (
    random_chain,
    random_region,
    random_reshape_target,
    random_scaffold,
    random_shape,
)

REGION_OPS = (
    "intersect",
    "subtract",
    "complement",
    "contains",
    "equivalent",
    "sett_sample",
    "sett_fill_into",
    "reshape",
    "dim_shuffle",
    "reverse",
    "expand",
    "reduce",
)


def check_chain(seed: int) -> str | None:
    rng = np.random.default_rng(seed)
    chain = random_chain(rng, int(rng.integers(1, 9)))
    try:
        canonical = chain.canonicalized()
        if canonical.out_shape != chain.out_shape or not canonical.truly_equivalent(chain):
            return f"chain seed {seed}: {chain} => {canonical} changes the meaning"
        if canonical.canonicalized() != canonical:
            return f"chain seed {seed}: {canonical} is not a fixpoint"
    except Exception as error:
        return f"chain seed {seed}: {chain} raised {type(error).__name__}: {error}"
    return None


def _operand(rng: np.random.Generator, shape: tuple[int, ...]) -> Region | DisjointRegions:
    """A Region, or now and then a union of a few disjoint ones."""
    if rng.random() < 0.7:
        return random_region(rng, shape)
    union = DisjointRegions(shape, [])
    for _ in range(int(rng.integers(1, 4))):
        union = DisjointRegions(
            shape, [*union.regions, *random_region(rng, shape).subtract(union).regions]
        )
    return union


def _shape_with_ones(rng: np.random.Generator) -> tuple[int, ...]:
    return tuple(1 if rng.random() < 0.4 else d for d in random_shape(rng, 3, 6))


def check_region_op(seed: int) -> str | None:
    rng = np.random.default_rng(seed)
    name = REGION_OPS[seed % len(REGION_OPS)]
    shape = _shape_with_ones(rng) if name == "expand" else random_shape(rng, 3, 6)
    a = _operand(rng, shape)
    bits = a.mask()
    try:
        got, expected = _apply_both(rng, name, a, bits)
    except Exception as error:
        return f"region seed {seed}: {name} on {a} raised {type(error).__name__}: {error}"
    if isinstance(got, bool):
        ok = got == expected
    else:
        ok = got.shape == expected.shape and np.array_equal(got.mask(), expected)
    return None if ok else f"region seed {seed}: {name} on {a} differs from brute force"


def _apply_both(rng, name, a, bits):
    """The operation on ``a`` and the same operation on its bitmap ``bits``."""
    shape = a.shape
    if name in ("intersect", "subtract", "contains", "equivalent"):
        b = _operand(rng, shape) if rng.random() < 0.8 else a
        other = b.mask()
        brute = {
            "intersect": bits & other,
            "subtract": bits & ~other,
            "contains": not np.any(other & ~bits),
            "equivalent": np.array_equal(bits, other),
        }[name]
        return getattr(a, name)(b), brute
    if name == "complement":
        return a.complement(), ~bits
    if name == "sett_sample":
        where = random_region(rng, shape)
        return a.sett_sample(where), bits[np.ix_(*where.get_ons())]
    if name == "sett_fill_into":
        scaffold = random_scaffold(rng, shape)
        filled = np.zeros(scaffold.shape, dtype=bool)
        filled[np.ix_(*scaffold.get_ons())] = bits
        return a.sett_fill_into(scaffold), filled
    if name == "reshape":
        target = random_reshape_target(rng, shape, 3)
        return a.reshape(target), bits.reshape(target)
    if name == "dim_shuffle":
        perm = tuple(int(p) for p in rng.permutation(len(shape)))
        return a.dim_shuffle(perm), bits.transpose(perm)
    if name == "reverse":
        dims = tuple(d for d in range(len(shape)) if rng.random() < 0.5)
        return a.reverse(dims), np.flip(bits, axis=dims) if dims else bits
    if name == "expand":
        target = tuple(int(rng.integers(2, 5)) if d == 1 else d for d in shape)
        return a.expand(target), np.broadcast_to(bits, target)
    target = tuple(1 if rng.random() < 0.5 else d for d in shape)
    axes = tuple(i for i, (d, t) in enumerate(zip(shape, target, strict=True)) if d != t)
    return a.reduce(target), bits.any(axis=axes, keepdims=True) if axes else bits


def run_cases(check, count: int, workers: int) -> tuple[int, list[str], float]:
    start = time.perf_counter()
    failures: list[str] = []
    done = 0
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for result in pool.map(check, range(count), chunksize=500):
            done += 1
            if result is not None:
                failures.append(result)
            if done % 10_000 == 0:
                print(f"  {check.__name__}: {done:,}/{count:,}", file=sys.stderr, flush=True)
    return count, failures, time.perf_counter() - start


def throughput(length: int, count: int) -> float:
    """Chains of exactly ``length`` ops canonicalized per second (one process), through the
    uncached driver so that the memo of ``Chain.canonicalized`` does not flatter it."""
    chains = [random_chain(np.random.default_rng(10**6 + s), length) for s in range(count)]
    start = time.perf_counter()
    for chain in chains:
        canonicalize(chain.in_shape, chain.ops)
    return count / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases of each kind")
    parser.add_argument("--timing-chains", type=int, default=300, help="chains per length")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    rows = []
    for label, check in (("random chains", check_chain), ("region operations", check_region_op)):
        count, failures, seconds = run_cases(check, args.cases, args.workers)
        rows.append((label, count, len(failures), seconds))
        for failure in failures[:10]:
            print("FAIL", failure)
    print()
    print(f"{'kind':<20}{'cases':>10}{'failures':>10}{'seconds':>10}")
    for label, count, failed, seconds in rows:
        print(f"{label:<20}{count:>10,}{failed:>10}{seconds:>10.1f}")
    print()
    print(f"{'chain length':<20}{'chains/s':>10}")
    for length in (4, 8, 16):
        print(f"{length:<20}{throughput(length, args.timing_chains):>10.0f}")
    return 1 if any(failed for _, _, failed, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
