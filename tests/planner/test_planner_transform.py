"""UnwindLayouts as a registered transform of the pipeline."""

from __future__ import annotations

import numpy as np
from planner_testing import small_target, weight
from popart_unwind.transforms import Condition, UnwindLayouts, plan_ir, registry

from popart_unwind.frontends.builder import Builder
from popart_unwind.ops import REGISTRY
from popart_unwind.options import SessionOptions
from popart_unwind.rewrite import Rewriter


def small_ir(options: SessionOptions | None = None):
    b = Builder(options=options)
    x = b.add_input_tensor("float32", [8, 16], "x")
    y = b.op("MatMul", [x, weight(b, (16, 8), "w")])
    b.add_output_tensor(b.op("Add", [y, weight(b, (8,), "bias")]))
    return b.ir()


def test_registered_with_its_id_and_conditions():
    assert "UnwindLayouts" in registry.names()
    transform = registry.get("UnwindLayouts")
    assert isinstance(transform, UnwindLayouts)
    assert UnwindLayouts.id == 5
    assert transform.target.num_tiles == 1472  # the IPU Model's default
    assert UnwindLayouts.assumes == frozenset({Condition.SHAPES_KNOWN})
    assert Condition.SHAPES_KNOWN in UnwindLayouts.preserves


def test_apply_reports_changes_and_passes_the_condition_checks():
    ir = small_ir()
    transform = UnwindLayouts(target=small_target(8))
    assert registry.apply(transform, ir, check=True) is True
    assert all(t.tile_mapping is not None for t in ir.main_graph.producerless_tensors())
    assert registry.apply(transform, ir, check=True) is False  # the same plan again
    ir.main_graph.tensor("w").tile_mapping = None
    assert registry.apply(transform, ir, check=True) is True


def test_pipeline_appends_the_planner_when_enabled():
    ir = small_ir()
    changes = registry.run_pipeline(ir)
    assert list(changes)[-1] == "UnwindLayouts" and changes["UnwindLayouts"]
    assert ir.main_graph.tensor("bias").tile_mapping is not None
    off = small_ir(SessionOptions(enable_unwind_layouts=False))
    assert "UnwindLayouts" not in registry.run_pipeline(off)
    assert off.main_graph.tensor("bias").tile_mapping is None


def test_plans_survive_json_round_trips():
    from popart_unwind.ir import Ir

    ir = small_ir()
    transform = UnwindLayouts(target=small_target(8))
    assert registry.apply(transform, ir) is True
    again = Ir.from_json(ir.to_json())
    for tensor in ir.main_graph.producerless_tensors():
        copy = again.main_graph.tensor(tensor.id)
        assert [list(map(tuple, t)) for t in copy.tile_mapping] == tensor.tile_mapping
    assert registry.apply(transform, again) is False
    assert np.all([t.tile_mapping is not None for t in again.main_graph.producerless_tensors()])


def test_plan_ir_writes_mappings_through_the_rewriter_it_is_handed():
    ir = small_ir()
    rewriter = Rewriter(REGISTRY)
    plan = plan_ir(ir, small_target(8), rewriter=rewriter)
    assert plan.changed and rewriter.changes == len(plan.tensors)
    again = plan_ir(ir, small_target(8), rewriter=rewriter)
    assert not again.changed and rewriter.changes == len(plan.tensors)
    unwritten = plan_ir(small_ir(), small_target(8),
                        write=False, rewriter=rewriter)
    assert not unwritten.changed and rewriter.changes == len(plan.tensors)
