"""InferShapes and Canonicalize as transforms, and the default pipeline end to end."""

import dataclasses

import pytest
from transform_testing import pipeline_model

from popart_unwind import transforms
from popart_unwind.errors import TransformError
from popart_unwind.ir import Ir
from popart_unwind.options import SessionOptions
from popart_unwind.rewrite import Rewriter

CHECKED = SessionOptions(check_transform_conditions=True)


def test_infer_shapes_types_every_tensor_and_reports_change_once():
    ir = pipeline_model(options=CHECKED)
    assert transforms.check_condition(ir, transforms.Condition.SHAPES_KNOWN)
    assert transforms.registry.apply("InferShapes", ir) is True
    assert transforms.check_condition(ir, transforms.Condition.SHAPES_KNOWN) == []
    assert transforms.registry.apply("InferShapes", ir) is False


def test_canonicalize_assumes_known_shapes():
    with pytest.raises(TransformError, match="Canonicalize assumes SHAPES_KNOWN"):
        transforms.registry.apply("Canonicalize", pipeline_model(options=CHECKED))


def test_canonicalize_folds_constants_and_keeps_the_model_interface():
    ir = pipeline_model(options=CHECKED)
    transforms.registry.apply("InferShapes", ir)
    outputs = list(ir.main_graph.output_ids)
    assert transforms.registry.apply("Canonicalize", ir) is True
    main = ir.main_graph
    assert main.output_ids == outputs
    assert not any(op.is_type("Add") and all(t.producer is None and t.data is not None
                                             for t in op.inputs) for op in main.ops)


def test_canonicalize_takes_its_caps_from_the_session_unless_given(monkeypatch):
    calls = []

    def fake(ir, registry, *, rewriter, **caps):
        calls.append(caps)
        return type("Stats", (), {"changed": False})()

    monkeypatch.setattr(transforms.canonicalize, "canonicalize", fake)
    ir = Ir(SessionOptions(canonicalize_max_iterations=3, canonicalize_max_rewrites=50,
                           canonicalize_test_convergence=True))
    transforms.registry.apply(transforms.Canonicalize(), ir)
    transforms.registry.apply(transforms.Canonicalize(max_iterations=7,
                                                      test_convergence=False), ir)
    assert calls == [
        {"max_iterations": 3, "max_rewrites": 50, "test_convergence": True},
        {"max_iterations": 7, "max_rewrites": 50, "test_convergence": False}]


def test_canonicalize_runs_the_driver_on_the_rewriter_the_registry_hands_it(monkeypatch):
    handed = []

    def fake(ir, registry, *, rewriter, **caps):
        handed.append((registry, rewriter))
        return type("Stats", (), {"changed": False})()

    monkeypatch.setattr(transforms.canonicalize, "canonicalize", fake)
    transform = transforms.Canonicalize()
    rewriter = Rewriter(transform.op_registry)
    assert transform.apply(Ir().main_graph, rewriter) is False
    assert handed == [(transform.op_registry, rewriter)]


def test_the_default_pipeline_plans_a_checked_model_end_to_end():
    ir = pipeline_model(options=CHECKED)
    assert transforms.run_pipeline(ir) == {"InferShapes": True, "Canonicalize": True,
                                           "Prune": True, "MergeDuplicateOps": True,
                                           "SerializeMatMuls": False,  # nothing marked
                                           "UnwindLayouts": True}
    main = ir.main_graph
    assert [op.type.name for op in main.ops].count("Relu") == 1
    assert not main.has_tensor("unused_weight")
    ir.verify()
    broken = [c.name for c, violations in transforms.check_conditions(ir).items() if violations]
    assert broken == ["VGRAPH", "PSTAGE", "EPHASE", "BPHASE"]  # the model is not placed


def test_transforms_are_frozen_option_objects():
    prune = transforms.Prune()
    with pytest.raises(dataclasses.FrozenInstanceError):
        prune.op_registry = None
    assert transforms.Canonicalize(max_iterations=2) == transforms.Canonicalize(max_iterations=2)


def test_the_checked_pipeline_keeps_a_placed_model_placed():
    ir = pipeline_model(options=CHECKED)
    for op in ir.main_graph.ops:
        op.settings.vgraph_id, op.settings.pipeline_stage = 0, 0
        op.settings.execution_phase, op.settings.batch_serialized_phase = 1, 0
    transforms.run_pipeline(ir)
    assert transforms.check_conditions(ir) == {c: [] for c in transforms.Condition}
