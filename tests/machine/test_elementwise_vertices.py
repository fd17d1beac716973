"""An elementwise op's compute as Poplibs estimates its popops operation's inner loop
(``IpuModel.elementwise_cycles`` with ``POPOPS_INNER_LOOPS``), re-derived here from the
estimate's terms, and as the cost walk charges it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popart_unwind.cost import evaluate
from popart_unwind.ir import Builder
from popart_unwind.machine.ipu_model import (
    ELEMENTWISE_SUPERVISOR_CYCLES,
    ELEMENTWISE_WORKER_CYCLES_FLOAT,
    ELEMENTWISE_WORKER_CYCLES_HALF,
    POPOPS_INNER_LOOPS,
    WORKER_CONTEXTS,
)
from popart_unwind.ops.elementwise import POPOPS_OPERATIONS
from popart_unwind.target import IpuModel, TileTarget


def oracle(elements: int, dtype: str, loop: tuple[int, int] | None) -> int:
    """Six workers share the elements; each runs its loop after a fixed start; the tile
    issues the workers' cycles in turn, and the supervisor adds its own."""
    half = dtype == "float16"
    per_worker = -(-elements // WORKER_CONTEXTS)
    if loop is None:
        inner = -(-per_worker // (4 if half else 2))  # one 64-bit vector per cycle
    else:
        cycles, unrolled = loop
        inner = -(-per_worker // unrolled) * cycles
    fixed = ELEMENTWISE_WORKER_CYCLES_HALF if half else ELEMENTWISE_WORKER_CYCLES_FLOAT
    return WORKER_CONTEXTS * (fixed + inner) + ELEMENTWISE_SUPERVISOR_CYCLES


@given(st.integers(1, 5000), st.sampled_from(["float32", "float16"]),
       st.sampled_from([None, *sorted(POPOPS_INNER_LOOPS)]))
def test_an_operation_costs_its_inner_loop(elements, dtype, operation):
    loop = None if operation is None else POPOPS_INNER_LOOPS[operation][dtype == "float16"]
    assert IpuModel().elementwise_cycles(elements, dtype, operation) == \
        oracle(elements, dtype, loop)


def test_integer_operands_and_the_former_model_keep_one_vector_per_cycle():
    assert IpuModel().elementwise_cycles(999, "int32", "DIVIDE") == \
        IpuModel().elementwise_cycles(999, "int32")
    former = IpuModel(vertex_costs=False)
    assert former.elementwise_cycles(999, "float32", "ERF") == -(-999 // 2)


def test_every_named_operation_has_both_loops():
    assert set(POPOPS_OPERATIONS.values()) <= set(POPOPS_INNER_LOOPS)
    for float_loop, half_loop in POPOPS_INNER_LOOPS.values():
        assert min(*float_loop, *half_loop) >= 1


@pytest.mark.parametrize(("op_type", "operation"), [("Exp", "EXPONENT"), ("Erf", "ERF"),
                                                    ("Add", None), ("Div", "DIVIDE")])
def test_the_walk_charges_the_op_its_operation(op_type, operation):
    b = Builder()
    x = b.add_input_tensor("float32", [64, 32], "x")
    y = b.add_input_tensor("float32", [64, 32], "y")
    b.add_output_tensor(b.op(op_type, [x, y] if op_type in ("Add", "Div") else [x]))
    ir = b.ir()
    target = TileTarget(IpuModel(tiles_per_ipu=4))
    # both inputs, and so the result, on tile 0: its 2,048 elements are the busiest tile's
    on_tile_0 = {("", name): np.zeros(64 * 32, np.int16) for name in ("x", "y")}
    [row] = [r for r in evaluate(ir, target, on_tile_0).ops if r.type == op_type]
    assert row.compute_cycles == target.elementwise_cycles(64 * 32, "float32", operation)
