"""A grouped matrix of tile ids with its last two axes swapped, as a new flat array.

The matmul rules move an operand's layout between its plan's cube and the op's own
orientation several times per op, and numpy's strided copy of a real embedding table's
layout (38.6 M ids) misses the cache on nearly every element. Large 16- and 32-bit id
arrays are copied in C++ in cache-sized bands (``_hooks.transpose_tiles``); any other
array by numpy. Both give the same ids in the same dtype.
"""

from __future__ import annotations

import numpy as np

from popart_unwind import _hooks
from popart_unwind.errors import TargetError

#: Fewest ids the C++ copy takes: at 4,096 ids numpy's copy is as quick (both stay in
#: the cache); from 16,384 ids on the C++ copy took 1.7 to 2.8 times less time, at
#: 38.6 M ids 2.5 to 3 times less (docs/ipu-model.md).
CPP_TRANSPOSE_MIN_IDS = 1 << 14
#: The dtypes the C++ copy is built for (the machine's tile dtypes).
CPP_TRANSPOSE_DTYPES = (np.dtype(np.int16), np.dtype(np.int32))


def swapped_last_axes(tiles: np.ndarray, groups: int, rows: int, cols: int) -> np.ndarray:
    """The flat ids of ``tiles`` read as [groups, rows, cols], laid out as [groups, cols,
    rows]: ``np.ascontiguousarray(tiles.reshape(groups, rows, cols).transpose(0, 2, 1))``
    flattened (a view of ``tiles`` where numpy's copy gives one: a swap that moves
    nothing). TargetError unless ``tiles`` holds groups * rows * cols ids."""
    flat = np.asarray(tiles).reshape(-1)
    if flat.size != groups * rows * cols:
        raise TargetError(f"a [{groups}, {rows}, {cols}] layout needs {groups * rows * cols} "
                          f"tile ids, got {flat.size}")
    if flat.size >= CPP_TRANSPOSE_MIN_IDS and flat.dtype in CPP_TRANSPOSE_DTYPES:
        source = np.ascontiguousarray(flat)
        out = np.empty(source.size, source.dtype)
        _hooks.transpose_tiles(source, out, groups, rows, cols)
        return out
    return np.ascontiguousarray(flat.reshape(groups, rows, cols).transpose(0, 2, 1)).reshape(-1)
