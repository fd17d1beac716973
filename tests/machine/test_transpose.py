"""``swapped_last_axes`` (the C++ banded copy at real sizes, numpy's below) against numpy's
strided copy, and the matmul plans' operand layouts built on it."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind import _hooks
from popart_unwind.errors import TargetError
from popart_unwind.machine import TileTarget, transpose
from popart_unwind.machine.interface import (
    MatmulPartition,
    MatmulPlan,
    plan_operand_readers,
    plan_operand_tiles,
)
from popart_unwind.machine.transpose import swapped_last_axes


def numpy_swapped(tiles: np.ndarray, groups: int, rows: int, cols: int) -> np.ndarray:
    """The plain numpy code the fast copy replaces."""
    return np.ascontiguousarray(
        np.asarray(tiles).reshape(groups, rows, cols).transpose(0, 2, 1)).reshape(-1)


# Shapes crossing the C++ copy's 8-row steps and 512-column bands, empty ones and one
# element among them.
shapes = st.tuples(st.integers(0, 3), st.integers(0, 19), st.sampled_from(
    [0, 1, 2, 7, 8, 9, 511, 512, 513, 1030]))
dtypes = st.sampled_from([np.int16, np.int32, np.int64, np.uint8])


@settings(max_examples=120, deadline=None)
@given(shapes, dtypes, st.booleans(), st.integers(0, 2**31 - 1))
def test_swapped_last_axes_is_numpys_copy(shape, dtype, strided, seed):
    """Every path (the C++ copy forced for any size, numpy for other dtypes), contiguous
    or strided input: the same ids, dtype and shape as numpy's copy."""
    groups, rows, cols = shape
    info = np.iinfo(dtype)
    values = np.random.default_rng(seed).integers(
        max(info.min, -5000), min(info.max, 5000), 2 * groups * rows * cols, endpoint=True)
    source = values.astype(dtype)[::2] if strided else values.astype(dtype)[:groups * rows * cols]
    expected = numpy_swapped(source, groups, rows, cols)
    with mock.patch.object(transpose, "CPP_TRANSPOSE_MIN_IDS", 0):
        fast = swapped_last_axes(source, groups, rows, cols)
    assert fast.dtype == expected.dtype and fast.shape == expected.shape
    assert fast.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.int16, np.int32])
@pytest.mark.parametrize("shape", [(1, 768, 501), (1, 501, 768), (3, 130, 517)])
def test_large_arrays_take_the_cpp_copy(dtype, shape):
    """Above the threshold the wrapper calls the C++ copy, and it agrees with numpy."""
    tiles = np.random.default_rng(1).integers(0, 1472, np.prod(shape)).astype(dtype)
    assert tiles.size >= transpose.CPP_TRANSPOSE_MIN_IDS
    with mock.patch.object(_hooks, "transpose_tiles", wraps=_hooks.transpose_tiles) as hook:
        fast = swapped_last_axes(tiles, *shape)
    assert hook.call_count == 1
    assert fast.tobytes() == numpy_swapped(tiles, *shape).tobytes()


def test_small_arrays_and_other_dtypes_take_numpy():
    with mock.patch.object(_hooks, "transpose_tiles") as hook:
        swapped_last_axes(np.arange(12, dtype=np.int16), 1, 3, 4)
        swapped_last_axes(np.zeros(1 << 15, dtype=np.int64), 1, 128, 256)
    hook.assert_not_called()


def test_a_wrong_size_is_a_target_error():
    with pytest.raises(TargetError, match=r"a \[1, 3, 4\] layout needs 12 tile ids, got 11"):
        swapped_last_axes(np.zeros(11, np.int16), 1, 3, 4)


def test_the_hook_refuses_mismatched_arrays():
    source = np.zeros(12, np.int16)
    with pytest.raises(ValueError, match="groups \\* rows \\* cols"):
        _hooks.transpose_tiles(source, np.zeros(10, np.int16), 1, 3, 4)
    with pytest.raises(ValueError, match="must not be the source"):
        _hooks.transpose_tiles(source, source, 1, 3, 4)
    with pytest.raises(TypeError):
        _hooks.transpose_tiles(source, np.zeros(12, np.int32), 1, 3, 4)


TARGET = TileTarget()
#: A weight-update pass ([K, M] x [M, N]): its LHS is the cube's LHS transposed.
PLAN = MatmulPlan((1, 96, 256, 200), MatmulPartition(1, 4, 2, 8), axes="kmn")


@pytest.mark.parametrize("start_tile", [0, 5])
def test_plan_operand_tiles_is_the_transposed_cube_layout(start_tile):
    plan = MatmulPlan(PLAN.cube, PLAN.partition, PLAN.axes, start_tile=start_tile)
    cube = TARGET.matmul_tiles(*plan.cube, "float32", "lhs", plan.partition)
    expected = (numpy_swapped(cube, 1, 96, 256).astype(np.int64) + start_tile) % 1472
    first = plan_operand_tiles(TARGET, plan, "lhs", "float32")
    assert first.tobytes() == expected.astype(first.dtype).tobytes()
    # while a reader holds it, asking again gives that same read-only array
    assert plan_operand_tiles(TARGET, plan, "lhs", "float32") is first
    assert not first.flags.writeable


def test_plan_operand_readers_moves_the_layout_to_the_cube():
    """Given the plan's own layout in the op's orientation, the readers' need is the one
    of the cube's layout given to the machine directly."""
    own = plan_operand_tiles(TARGET, PLAN, "lhs", "float32")
    cube = TARGET.matmul_tiles(*PLAN.cube, "float32", "lhs", PLAN.partition)
    need = plan_operand_readers(TARGET, PLAN, "lhs", "float32", own)
    direct = TARGET.matmul_readers(*PLAN.cube, "float32", "lhs", cube, PLAN.partition)
    assert np.array_equal(need.received_bytes, direct.received_bytes)
    assert np.array_equal(need.regions, direct.regions)
