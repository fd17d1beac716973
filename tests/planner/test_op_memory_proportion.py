"""PopART's per-op availableMemoryProportion (``__available_memory_proportion`` on an op):
the op's plan, ours and the PopART baseline's, is the one a session of that proportion
would choose, its cost is counted under it, and a fully connected layer's passes all take
it; an op without one keeps the session's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from popart_unwind.transforms import plan_ir
from test_matmul_plan_choice import training_step

from popart_unwind.baselines import popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.errors import ShapeError
from popart_unwind.ir import Builder
from popart_unwind.ir.ir import Ir
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.machine.interface import MatmulPlan
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.linalg import MEMORY_PROPORTION_ATTRIBUTE

#: A machine whose 4 KiB tiles make the bound bind for these shapes.
TILES, TILE_BYTES, SESSION = 16, 4096, 0.6
DIMS = (1, 24, 64, 24)


def machine(share: float = SESSION) -> TileTarget:
    return TileTarget(IpuModel(tiles_per_ipu=TILES, bytes_per_tile=TILE_BYTES,
                               available_memory_proportion=share))


def two_matmuls(share: float | None) -> Ir:
    """Two equal matmuls of graph inputs; the first carries ``share`` (if not None)."""
    b = Builder()
    _, m, k, n = DIMS
    outputs = []
    for name in ("first", "second"):
        x = b.add_input_tensor("float32", [m, k], f"x_{name}")
        w = b.add_input_tensor("float32", [k, n], f"w_{name}")
        attributes = {MEMORY_PROPORTION_ATTRIBUTE: share} \
            if name == "first" and share is not None else {}
        outputs.append(b.op("MatMul", [x, w], attributes, debug_name=name))
    for out in outputs:
        b.add_output_tensor(out)
    return b.ir()


def _op(ir: Ir, name: str):
    return next(op for op in ir.main_graph.ops if op.name == name)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([0.0, 0.02, 0.1, 0.3, 1.0]))
def test_an_op_is_planned_as_a_session_of_its_proportion_would_plan_it(share):
    ir = two_matmuls(share)
    target = machine()
    own = machine(share).matmul_plan(*DIMS, "float32")
    session = target.matmul_plan(*DIMS, "float32")
    for plans in (plan_ir(ir, target, write=False).op_plans,
                  popart_baseline(ir, target).op_plans):
        # the plan each op's rule computes with, given those plans (as the walk asks)
        planned = target.with_plans(plans)
        first, second = (REGISTRY.layout_rule(op).plan(op, planned)
                          for op in (_op(ir, "first"), _op(ir, "second")))
        assert first.partition == own and first.memory_proportion == share
        assert second.partition == session and second.memory_proportion is None


def test_the_walk_counts_an_op_under_its_own_proportion():
    # a bound tight enough to change the plan: the op is charged what that plan costs
    share = 0.02
    assert machine(share).matmul_plan(*DIMS, "float32") != \
        machine().matmul_plan(*DIMS, "float32")
    target = machine()
    ir, plain = two_matmuls(share), two_matmuls(None)
    mappings = {("", f"{t}_{n}"): np.zeros(size, np.int16)
                for n in ("first", "second")
                for t, size in (("x", DIMS[1] * DIMS[2]), ("w", DIMS[2] * DIMS[3]))}
    rows = {r.name: r for r in evaluate(ir, target, mappings).ops}
    plain_rows = {r.name: r for r in evaluate(plain, target, mappings).ops}
    expected = machine(share).matmul_cost(*DIMS, "float32",
                                          machine(share).matmul_plan(*DIMS, "float32"))
    assert rows["first"].compute_cycles == expected.compute_cycles
    assert rows["first"].compute_cycles != plain_rows["first"].compute_cycles
    assert rows["second"].compute_cycles == plain_rows["second"].compute_cycles


@pytest.mark.parametrize("share", [-0.5, 2.0, "0.3"])
def test_a_proportion_outside_zero_to_one_names_the_op(share):
    ir = two_matmuls(None)
    _op(ir, "first").attributes[MEMORY_PROPORTION_ATTRIBUTE] = share
    with pytest.raises(ShapeError, match=r"first.*__available_memory_proportion"):
        plan_ir(ir, machine(), write=False)


def test_a_plan_records_its_own_proportion_and_only_then():
    plan = MatmulPlan(DIMS, machine().matmul_plan(*DIMS, "float32"))
    assert "available_memory_proportion" not in plan.describe()
    own = MatmulPlan(DIMS, plan.partition, memory_proportion=0.25)
    assert own.describe()["available_memory_proportion"] == 0.25
    assert own.starting_at(3).memory_proportion == 0.25


def test_a_layers_passes_all_take_its_forward_ops_proportion():
    # PopART's MatMul grad ops take the forward op's proportion: so does each pass's plan,
    # ours and Poplibs' choice for the baseline
    ir = training_step((32, 48, 16))
    fwd = _op(ir, "fwd0")
    fwd.attributes[MEMORY_PROPORTION_ATTRIBUTE] = 0.05
    target = machine()
    passes = [_op(ir, name) for name in ("fwd0", "bwd0", "wu0")]
    for plans in (plan_ir(ir, target, write=False).op_plans,
                  popart_baseline(ir, target).op_plans):
        planned = target.with_plans(plans)
        assert [REGISTRY.layout_rule(op).plan(op, planned).memory_proportion
                for op in passes] == [0.05] * 3
        other = _op(ir, "fwd1")
        assert REGISTRY.layout_rule(other).plan(other, planned).memory_proportion is None
