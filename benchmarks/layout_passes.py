"""A pass a cost walk makes many times over large layouts, timed against the plain numpy
code it replaces, on GPT-2 small's sizes (38.6 M ids: the [50257, 768] embedding table, as
the [768, 50257] RHS of the LM head's matmul): a matmul operand's layout moved between its
plan's cube and the op's orientation (``_cube_oriented``: ``swapped_last_axes``, the C++
banded copy) in int16 and int32, both ways, and a plan's transposed operand asked for
again while a reader holds it.

Each figure is the best of five; every result is checked byte for byte against the plain
code first. About ten seconds and 1 GB:

    python benchmarks/layout_passes.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from popart_unwind.machine import TileTarget
from popart_unwind.machine.interface import (
    MatmulPartition,
    MatmulPlan,
    _cube_oriented,
    plan_operand_tiles,
)

ROWS, COLS = 768, 50257


def best_ms(work: Callable[[], object], repeats: int = 5) -> float:
    """The quickest of ``repeats`` runs of ``work``, in milliseconds."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return min(times) * 1e3


def numpy_swapped(tiles: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The plain numpy code ``_cube_oriented`` used."""
    return np.ascontiguousarray(tiles.reshape(1, rows, cols).transpose(0, 2, 1)).reshape(-1)


def transposes(target: TileTarget, plan: MatmulPlan, cube_rhs: np.ndarray) -> None:
    name, transposed = plan.cube_tensor("rhs")
    for dtype in (np.int16, np.int32):
        cube = cube_rhs.astype(dtype)
        own = numpy_swapped(cube, ROWS, COLS)
        for label, source, rows, cols, to_cube in (
                (f"[{ROWS}, {COLS}] to [{COLS}, {ROWS}]", cube, ROWS, COLS, False),
                (f"[{COLS}, {ROWS}] to [{ROWS}, {COLS}]", own, COLS, ROWS, True)):
            def fast(source: np.ndarray = source, to_cube: bool = to_cube) -> np.ndarray:
                return _cube_oriented(source, plan, name, transposed, to_cube)

            def plain(source: np.ndarray = source, rows: int = rows,
                      cols: int = cols) -> np.ndarray:
                return numpy_swapped(source, rows, cols)

            assert fast().tobytes() == plain().tobytes()
            print(f"_cube_oriented {np.dtype(dtype).name} {label}: numpy {best_ms(plain):.1f} "
                  f"ms, now {best_ms(fast):.1f} ms")
    began = time.perf_counter()
    held = plan_operand_tiles(target, plan, "rhs", "float16")
    first = time.perf_counter() - began
    began = time.perf_counter()
    again = plan_operand_tiles(target, plan, "rhs", "float16")
    later = time.perf_counter() - began
    print(f"plan_operand_tiles (transposed RHS): first {first * 1e3:.1f} ms, again while "
          f"held {later * 1e3:.3f} ms (the same array: {again is held})")


def main() -> None:
    target = TileTarget()
    partition = MatmulPartition(1, 4, 1, 367)
    plan = MatmulPlan((1, 1024, ROWS, COLS), partition, axes="mnk")  # the RHS transposed
    cube_rhs = np.asarray(target.matmul_tiles(1, 1024, ROWS, COLS, "float16", "rhs",
                                              partition))
    transposes(target, plan, cube_rhs)


if __name__ == "__main__":
    main()
