"""Shared helpers of the planner tests: small targets, and a random IR program drawn by
hypothesis."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from popart_unwind.frontends.builder import Builder
from popart_unwind.machine import IpuModel, TileTarget


def small_target(tiles: int = 16) -> TileTarget:
    """A small IPU whose linear mapper spreads even tiny tensors over several tiles."""
    return TileTarget(IpuModel(tiles_per_ipu=tiles, min_bytes_per_tile=16))


def weight(builder: Builder, shape, name: str) -> str:
    return builder.add_initialized_input_tensor(np.zeros(shape, np.float32), name)


# -- random programs ---------------------------------------------------------------------
OPS = ("transpose", "reshape", "slice", "relu", "add_same", "add_bias", "matmul", "concat",
       "expand", "softmax", "mul_pool")


@st.composite
def programs(draw, max_ops: int = 7) -> list[tuple]:
    """A random straight-line program over small tensors, as data (so that building it
    twice gives two equal IRs)."""
    dims = st.integers(1, 6)
    starts = draw(st.lists(st.lists(dims, min_size=1, max_size=3), min_size=1, max_size=2))
    steps = []
    shapes = [tuple(s) for s in starts]
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(OPS))
        k = draw(st.integers(0, len(shapes) - 1))
        shape = shapes[k]
        if kind == "transpose":
            perm = tuple(draw(st.permutations(range(len(shape)))))
            steps.append((kind, k, perm))
            shapes.append(tuple(shape[p] for p in perm))
        elif kind == "reshape":
            size = int(np.prod(shape))
            split = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
            steps.append((kind, k, (split, size // split)))
            shapes.append((split, size // split))
        elif kind == "slice":
            start = draw(st.integers(0, shape[0] - 1))
            step = draw(st.sampled_from([1, 2, -1, -2]))
            end = shape[0] if step > 0 else -shape[0] - 1
            steps.append((kind, k, (start, end, step)))
            count = len(range(shape[0])[start::step])
            shapes.append((count, *shape[1:]))
        elif kind in ("relu", "softmax"):
            steps.append((kind, k, None))
            shapes.append(shape)
        elif kind in ("add_same", "add_bias"):
            partner = next((j for j, s in enumerate(shapes) if s == shape and j != k), None)
            steps.append((kind, k, partner if kind == "add_same" else None))
            shapes.append(shape)
        elif kind == "matmul":
            cols = draw(dims)
            steps.append((kind, k, cols))
            shapes.append((*shape[:-1], cols))
        elif kind == "concat":
            steps.append((kind, k, None))
            shapes.append((2 * shape[0], *shape[1:]))
        elif kind == "expand":
            rows = draw(dims)
            steps.append((kind, k, rows))
            shapes.append((rows, *shape))
        elif kind == "mul_pool":
            others = [j for j, s in enumerate(shapes) if s == shape]
            j = draw(st.sampled_from(others))
            steps.append((kind, k, j))
            shapes.append(shape)
    return [("starts", [tuple(s) for s in starts]), *steps]


def build(program: list[tuple]):
    """The Ir of a program drawn by ``programs``."""
    b = Builder()
    _, starts = program[0]
    names = []
    for n, shape in enumerate(starts):
        names.append(b.add_input_tensor("float32", list(shape), f"in{n}") if n % 2 == 0
                     else weight(b, shape, f"w{n}"))
    for n, (kind, k, arg) in enumerate(program[1:]):
        x = names[k]
        shape = tuple(b.get_tensor_shape(x))
        if kind == "transpose":
            y = b.op("Transpose", [x], {"perm": list(arg)})
        elif kind == "reshape":
            y = b.op("Reshape", [x, np.array(arg, np.int64)])
        elif kind == "slice":
            start, end, step = arg
            y = b.op("Slice", [x, np.array([start]), np.array([end]), np.array([0]),
                               np.array([step])])
        elif kind == "relu":
            y = b.op("Relu", [x])
        elif kind == "softmax":
            y = b.op("Softmax", [x])
        elif kind == "add_same":
            other = names[arg] if arg is not None else weight(b, shape, f"s{n}")
            y = b.op("Add", [x, other])
        elif kind == "add_bias":
            y = b.op("Add", [x, weight(b, shape[-1:], f"b{n}")])
        elif kind == "matmul":
            y = b.op("MatMul", [x, weight(b, (shape[-1], arg), f"m{n}")])
        elif kind == "concat":
            y = b.op("Concat", [x, x], {"axis": 0})
        elif kind == "expand":
            y = b.op("Expand", [x, np.array([arg, *shape], np.int64)])
        elif kind == "mul_pool":
            y = b.op("Mul", [x, names[arg]])
        names.append(y)
    b.add_output_tensor(names[-1])
    return b.ir()
