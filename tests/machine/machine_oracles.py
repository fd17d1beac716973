"""Independent numpy oracles and machines shared by the tile-machine tests."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import strategies as st

from popart_unwind.ir.tile_mapping import tile_dtype
from popart_unwind.machine import IpuModel, MatmulPartition


def byte_model(num_tiles: int, grain: int = 1, minimum: int = 0) -> IpuModel:
    """A machine whose one-byte dtype ("int8") has exactly this linear-mapping grain and
    minimum per tile: grain_size("int8") == grain_bytes, min_elements_per_tile("int8") ==
    min_bytes_per_tile."""
    model = IpuModel(tiles_per_ipu=num_tiles, grain_bytes=grain, min_bytes_per_tile=minimum)
    assert (model.grain_size("int8"), model.min_elements_per_tile("int8")) == (grain, minimum)
    return model


def checked_layout(tiles: np.ndarray, num_elements: int, num_tiles: int) -> np.ndarray:
    """A hook's answer as int64 ids, after checking it is a flat array of the machine's tile
    dtype with one id in [0, num_tiles) per element."""
    assert tiles.shape == (num_elements,)
    assert tiles.dtype == tile_dtype(num_tiles)
    ids = tiles.astype(np.int64)
    assert ids.size == 0 or (ids.min() >= 0 and ids.max() < num_tiles)
    return ids


def part_of(size: int, parts: int, index: np.ndarray) -> np.ndarray:
    """Which of `parts` nearly equal parts (boundaries floor(i*size/parts)) holds `index`."""
    boundaries = (np.arange(parts + 1) * size) // parts
    return np.searchsorted(boundaries, index, side="right") - 1


def random_tiles(rng: np.random.Generator, num_elements: int, num_tiles: int,
                 max_pieces: int = 40) -> np.ndarray:
    """A random layout: random cut points, a random tile for each piece (int16 ids)."""
    if num_elements == 0:
        return np.zeros(0, np.int16)
    pieces = int(rng.integers(1, max_pieces + 1))
    cuts = np.unique(rng.integers(1, num_elements, size=pieces - 1)) if num_elements > 1 else []
    bounds = np.array([0, *map(int, cuts), num_elements])
    owners = rng.integers(0, num_tiles, size=bounds.size - 1)
    return np.repeat(owners, np.diff(bounds)).astype(np.int16)


def tile_of_each_element(num_elements, num_tiles, grain_size, min_elements_per_tile):
    """Which tile each element lands on, derived element by element with numpy."""
    if num_elements == 0:
        return np.zeros(0, dtype=np.int64)
    num_grains = -(-num_elements // grain_size)
    grains_per_tile = -(-num_grains // num_tiles)
    if min_elements_per_tile:
        min_grains = -(-min_elements_per_tile // grain_size)
        grains_per_tile = max(grains_per_tile, -(-num_grains // max(1, num_grains // min_grains)))
    partitions = -(-num_grains // grains_per_tile)
    first_grain_of_tile = (np.arange(partitions + 1) * num_grains) // partitions
    grain_of_element = np.arange(num_elements) // grain_size
    return np.searchsorted(first_grain_of_tile, grain_of_element, side="right") - 1


# -- the matmul partition's cost (docs/ipu-model.md, re-derived) ------------------------------
@st.composite
def cost_models(draw, tiles):
    """A machine with random matmul cost figures; its dtype "t" has element size b. Compute
    at the peak rate alone (``vertex_costs=False``), which ``cost_oracle`` re-derives; the
    vertex estimates have tests of their own (test_vertex_costs.py)."""
    macs = draw(st.integers(1, 128))
    return IpuModel(tiles_per_ipu=tiles, dtype_sizes={"t": draw(st.integers(1, 8))},
                    vertex_costs=False,
                    partial_bytes_per_element=draw(st.integers(1, 8)),
                    exchange_bytes_per_cycle=draw(st.integers(1, 8)),
                    macs_per_cycle_half=macs, macs_per_cycle_float=macs,
                    sync_cycles=draw(st.integers(0, 200)))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def step_oracle(G, M, K, N, p: MatmulPartition, model: IpuModel, shared: str
                ) -> tuple[int, int, int, int]:
    """(compute, exchange, reduction, temporary bytes) of one step of the documented cost."""
    b, x, s = model.dtype_size("t"), model.exchange_bytes_per_cycle, model.sync_cycles
    partial = model.partial_bytes_per_element
    gb, mb = ceil_div(G, p.groups), ceil_div(M, p.rows)
    kb, nb = ceil_div(K, p.inner), ceil_div(N, p.cols)
    lhs, rhs = gb * mb * kb, gb * kb * nb
    lhs_received, rhs_received = lhs - lhs // p.cols, rhs - rhs // p.rows
    pair = model.tiles_per_exchange_bus
    if shared == "rhs" and p.rows % pair == 0:  # the RHS arrives at `pair` times the rate
        exchange = ceil_div(lhs_received * b * pair + rhs_received * b, x * pair) + s
    elif shared == "lhs" and p.cols % pair == 0:  # the LHS does
        exchange = ceil_div(lhs_received * b + rhs_received * b * pair, x * pair) + s
    else:
        exchange = ceil_div((lhs_received + rhs_received) * b, x) + s
    compute = ceil_div(gb * mb * kb * nb, model.macs_per_cycle("t"))
    partials = gb * mb * nb * partial
    reduction, reducing = 0, 0
    if p.inner > 1:
        share = ceil_div(gb * mb * nb, p.inner)
        reduction = ceil_div(share * (p.inner - 1) * partial, x) + s
        reducing = partials + share * (p.inner - 1) * partial
    return compute, exchange, reduction, max((lhs + rhs) * b + partials, reducing)


def cost_oracle(G, M, K, N, p: MatmulPartition, model: IpuModel, shared: str = "rhs"
                ) -> tuple[int, int, int, int, int]:
    """(compute, exchange, reduction, temporary bytes, serial steps) of the documented cost:
    the fewest serial steps over the rows (at most 16, each keeping every row part) whose
    temporary bytes fit the bound, else those of least temporary bytes."""
    limit = int(model.available_memory_proportion * model.bytes_per_tile)
    best = None
    for steps in range(1, 17):
        rows = ceil_div(M, steps)
        if rows < p.rows:
            break
        cost = step_oracle(G, rows, K, N, p, model, shared)
        if best is None or cost[3] < best[0][3]:
            best = (cost, steps)
        if cost[3] <= limit:
            break
    (compute, exchange, reduction, temp), steps = best
    return (compute * steps, exchange * steps,
            reduction * steps + (steps - 1) * model.sync_cycles, temp, steps)


def cycles_oracle(G, M, K, N, p: MatmulPartition, model: IpuModel, shared: str = "rhs") -> int:
    compute, exchange, reduction, _, _ = cost_oracle(G, M, K, N, p, model, shared)
    return compute + exchange + reduction


def all_partitions(G, M, K, N, tiles):
    for splits in itertools.product(range(1, G + 1), range(1, M + 1), range(1, K + 1),
                                    range(1, N + 1)):
        if np.prod(splits) <= tiles:
            yield MatmulPartition(*splits)
