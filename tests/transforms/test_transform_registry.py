"""The registry: names, lookup, application, the pipeline, and checking declarations."""

import dataclasses

import numpy as np
import pytest
from transform_testing import TEST_OPS, add_op, call, chain_ir, identity_subgraph, onnx, out

from popart_unwind import transforms
from popart_unwind.errors import TransformError
from popart_unwind.ir import Ir
from popart_unwind.options import DEFAULT_PIPELINE, SessionOptions

ALL_CONDITIONS, Condition, Transform = (transforms.ALL_CONDITIONS, transforms.Condition,
                                        transforms.Transform)
Canonicalize, InferShapes = transforms.Canonicalize, transforms.InferShapes
MergeDuplicateOps, Prune = transforms.MergeDuplicateOps, transforms.Prune
registry = transforms.registry

FULLY_PLACED = {"vgraph_id": 0, "pipeline_stage": 0, "execution_phase": 0,
                "batch_serialized_phase": 0}


# -- test-only transforms ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AddUnplacedRelu(Transform):
    """Claims to preserve every condition but creates an op without placement."""

    id = 900
    name = "AddUnplacedRelu"
    preserves = ALL_CONDITIONS

    def apply(self, graph, rewriter):
        rewriter.create_op(graph, onnx("Relu"), [graph.outputs[0]])
        return True


@dataclasses.dataclass(frozen=True)
class DropFirstCall(Transform):
    """Erases a call op (rerouting its consumers), leaving its callee unreachable."""

    id = 901
    name = "DropFirstCall"

    def apply(self, graph, rewriter):
        op = next(op for op in graph.ops if op.is_type("Call"))
        for index, tensor in op.output_map().items():
            rewriter.replace_all_uses(tensor, op.input(index))
        rewriter.erase_op(op)
        return True


@dataclasses.dataclass(frozen=True)
class Lie(Transform):
    """Reports ``answer`` and does ``work`` (an option, as transform fields are)."""

    id = 902
    name = "Lie"
    answer: object = True
    work: bool = False

    def apply(self, graph, rewriter):
        if self.work:
            rewriter.set_op_name(graph.ops[0], "renamed")
        return self.answer


@dataclasses.dataclass(frozen=True)
class RenameBehindTheRewritersBack(Transform):
    """Renames an op directly, not through the rewriter it is handed, and says so."""

    id = 906
    name = "RenameBehindTheRewritersBack"

    def apply(self, graph, rewriter):
        graph.ops[0].settings.name = "renamed"
        return True


@dataclasses.dataclass(frozen=True)
class NeedsNoIpuCopy(Transform):
    id = 903
    name = "NeedsNoIpuCopy"
    assumes = frozenset({Condition.NO_IPU_COPY})
    ran: list = dataclasses.field(default_factory=list)

    def apply(self, graph, rewriter):
        self.ran.append(True)
        return False


@dataclasses.dataclass(frozen=True)
class PromisesVgraph(Transform):
    id = 904
    name = "PromisesVgraph"
    guarantees = frozenset({Condition.VGRAPH})

    def apply(self, graph, rewriter):
        return False


@dataclasses.dataclass(frozen=True)
class AddCalleeInput(Transform):
    """Adds a subgraph input without feeding it at the call site."""

    id = 905
    name = "AddCalleeInput"

    def apply(self, graph, rewriter):
        rewriter.add_graph_input(graph.ir.graph("sub"), "sub/extra", "float32", (2, 3))
        return True


@dataclasses.dataclass(frozen=True)
class KeepsItsRewriter(Transform):
    """Remembers the rewriter of each application and changes nothing."""

    id = 907
    name = "KeepsItsRewriter"
    seen: list = dataclasses.field(default_factory=list)

    def apply(self, graph, rewriter):
        self.seen.append(rewriter)
        return False


def called_ir():
    ir = chain_ir()
    main = ir.main_graph
    sub = identity_subgraph(ir, "sub", n_inputs=1)
    op = call(main, sub, [main.outputs[0]])
    main.output_ids = [out(op).id]
    return ir


# -- names, get, apply -------------------------------------------------------------------
def test_the_four_transforms_are_registered_in_id_order_with_stable_ids():
    assert registry.names()[:4] == ["InferShapes", "Canonicalize", "Prune",
                                    "MergeDuplicateOps"]
    assert [InferShapes.id, Canonicalize.id, Prune.id, MergeDuplicateOps.id] == [1, 2, 3, 4]


def test_get_gives_the_transform_with_default_options():
    assert registry.get("Prune") == Prune()
    assert isinstance(registry.get("Canonicalize"), Canonicalize)


def test_an_unknown_name_is_refused_with_the_known_names():
    with pytest.raises(TransformError, match=r"unknown transform 'Prun'.*'Prune'"):
        registry.get("Prun")


def test_registering_a_clashing_name_or_id_is_refused():
    clash_name = type("Again", (Prune,), {"id": 999})
    clash_id = type("Other", (Prune,), {"name": "Other"})
    for cls in (clash_name, clash_id):
        with pytest.raises(TransformError, match="clashes"):
            registry.register(cls)
    assert "Other" not in registry.names()


def test_apply_takes_an_ir_or_a_graph_and_reports_change():
    ir = chain_ir()
    assert registry.apply(AddUnplacedRelu(), ir) is True
    assert len(ir.main_graph.ops) == 4
    assert registry.apply("MergeDuplicateOps", ir.main_graph) is False


def test_apply_refuses_other_targets():
    with pytest.raises(TransformError, match="not str"):
        registry.apply("Prune", "main")


# -- the pipeline ------------------------------------------------------------------------
def test_the_pipeline_validates_every_name_before_running_any():
    ir = chain_ir()
    before = ir.to_json()
    with pytest.raises(TransformError, match=r"unknown transform\(s\) \['Nope'\]"):
        registry.run_pipeline(ir, ["Prune", "Nope"])
    assert ir.to_json() == before


def test_a_pipeline_given_as_one_string_is_refused():
    ir = chain_ir()
    with pytest.raises(TransformError, match="not one string"):
        registry.run_pipeline(ir, "Prune")
    ir.options = SessionOptions(pipeline="Prune")
    with pytest.raises(TransformError, match="not one string"):
        registry.run_pipeline(ir)


def test_session_pipelines_are_stored_as_tuples():
    assert SessionOptions(pipeline=["Prune"]).pipeline == ("Prune",)


def test_the_pipeline_runs_each_transform_once():
    with pytest.raises(TransformError, match="more than once"):
        registry.run_pipeline(chain_ir(), ["Prune", "MergeDuplicateOps", "Prune"])


def test_the_pipeline_reports_per_transform_change_in_order():
    ir = chain_ir()
    ir.main_graph.add_constant("unused", np.zeros(3))
    result = registry.run_pipeline(ir, ["MergeDuplicateOps", "Prune"])
    assert list(result.items()) == [("MergeDuplicateOps", False), ("Prune", True)]


def test_the_default_pipeline_is_the_sessions():
    options = SessionOptions(pipeline=("Prune",), enable_unwind_layouts=False)
    assert registry.pipeline_names(options) == ["Prune"]
    assert registry.pipeline_names(SessionOptions())[:5] == list(DEFAULT_PIPELINE)


def test_unwind_layouts_joins_the_end_when_enabled_and_registered(monkeypatch):
    monkeypatch.delitem(registry._TRANSFORMS, "UnwindLayouts", raising=False)
    assert registry.pipeline_names(SessionOptions(pipeline=("Prune",))) == ["Prune"]
    fake = type("UnwindLayouts", (Lie,), {"id": 950, "name": "UnwindLayouts"})
    monkeypatch.setitem(registry._TRANSFORMS, "UnwindLayouts", fake)
    assert registry.pipeline_names(SessionOptions(pipeline=("Prune",))) == \
        ["Prune", "UnwindLayouts"]
    assert registry.pipeline_names(SessionOptions(pipeline=("Prune",),
                                                  enable_unwind_layouts=False)) == ["Prune"]


# -- checking declarations ---------------------------------------------------------------
def test_checking_catches_a_broken_preserved_condition():
    ir = chain_ir(**FULLY_PLACED)
    with pytest.raises(TransformError,
                       match=r"AddUnplacedRelu preserves VGRAPH, which held before"):
        registry.apply(AddUnplacedRelu(), ir, check=True)


def test_a_condition_that_did_not_hold_before_need_not_hold_after():
    assert registry.apply(AddUnplacedRelu(), chain_ir(), check=True)


def test_checking_follows_the_session_option():
    ir = chain_ir(**FULLY_PLACED)
    assert registry.apply(AddUnplacedRelu(), ir)  # off by default
    ir = chain_ir(**FULLY_PLACED)
    ir.options = SessionOptions(check_transform_conditions=True)
    with pytest.raises(TransformError, match="preserves VGRAPH"):
        registry.apply(AddUnplacedRelu(), ir)


def test_an_unmet_assumption_stops_the_transform_before_it_runs():
    ir = chain_ir()
    add_op(ir.main_graph, "IpuCopy", [ir.main_graph.outputs[0]], domain="ai.graphcore")
    transform = NeedsNoIpuCopy()
    with pytest.raises(TransformError, match=r"NeedsNoIpuCopy assumes NO_IPU_COPY.*IpuCopy"):
        registry.apply(transform, ir, check=True)
    assert transform.ran == []


def test_an_unkept_guarantee_is_caught():
    with pytest.raises(TransformError, match="PromisesVgraph guarantees VGRAPH"):
        registry.apply(PromisesVgraph(), chain_ir(), check=True)


def test_checking_catches_a_graph_left_unreachable():
    ir = called_ir()
    with pytest.raises(TransformError, match="left graph 'sub' unreachable"):
        registry.apply(DropFirstCall(), ir, check=True)


def test_a_graph_unreachable_beforehand_is_not_blamed_on_the_transform():
    ir = chain_ir()
    identity_subgraph(ir, "orphan")
    assert registry.apply(AddUnplacedRelu(), ir, check=True)


def test_checking_catches_a_call_site_out_of_step():
    with pytest.raises(TransformError, match=r"malformed: input 1 \('sub/extra'\)"):
        registry.apply(AddCalleeInput(), called_ir(), check=True)


def test_a_malformed_ir_is_refused_before_the_transform():
    ir = called_ir()
    ir.graph("sub").add_input("sub/extra", "float32", (2, 3))
    with pytest.raises(TransformError, match="handed to transform Prune is malformed"):
        registry.apply("Prune", ir, check=True)


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize(("answer", "work", "message"), [
    (False, True, r"Lie changed the IR but reported no change \(Relu#0 renamed 'renamed'\)"),
    (True, False, "Lie reported a change but left the IR as it was"),
    (1, False, "returned int, not bool"),
])
def test_a_changed_answer_that_disagrees_with_the_rewriters_record_is_an_error_always(
        answer, work, message, check):
    with pytest.raises(TransformError, match=message):
        registry.apply(Lie(answer=answer, work=work), chain_ir(), check=check)


@pytest.mark.parametrize("check", [False, True])
def test_the_changed_answer_is_the_rewriters_record(check):
    ir = chain_ir()
    assert registry.apply(Lie(answer=True, work=True), ir, check=check) is True
    assert ir.main_graph.ops[0].settings.name == "renamed"
    assert registry.apply(Lie(answer=False, work=False), ir, check=check) is False


def test_each_application_gets_a_fresh_rewriter_with_the_transforms_op_registry():
    transform = KeepsItsRewriter(op_registry=TEST_OPS)
    ir = chain_ir()
    registry.apply(transform, ir)
    registry.apply(transform, ir, check=True)
    first, second = transform.seen
    assert first is not second
    assert first.registry is TEST_OPS and second.registry is TEST_OPS


def test_checking_catches_a_change_made_outside_the_rewriter():
    with pytest.raises(TransformError, match="RenameBehindTheRewritersBack changed the IR "
                                             "outside the rewriter"):
        registry.apply(RenameBehindTheRewritersBack(), chain_ir(), check=True)


def test_without_checking_a_change_outside_the_rewriter_does_not_count():
    """Only the record counts: the registry does not look at the IR to find changes."""
    with pytest.raises(TransformError, match="reported a change but left the IR as it was"):
        registry.apply(RenameBehindTheRewritersBack(), chain_ir(), check=False)


def test_applying_without_checking_never_serialises_the_ir(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the IR was serialised")

    ir = chain_ir()
    ir.main_graph.add_variable("unused", np.zeros(3, np.float32))
    monkeypatch.setattr(Ir, "to_json", refuse)
    assert registry.run_pipeline(ir, ["InferShapes", "Canonicalize", "Prune",
                                      "MergeDuplicateOps"]) == {
        "InferShapes": False, "Canonicalize": False, "Prune": True,
        "MergeDuplicateOps": False}



def test_a_transform_whose_apply_takes_no_rewriter_is_refused_where_it_is_defined():
    with pytest.raises(TransformError, match=r"apply must take \(self, graph, rewriter\).*"
                                             r"takes \(self, graph\)"):
        @dataclasses.dataclass(frozen=True)
        class Direct(Transform):
            id = 990
            name = "Direct"

            def apply(self, graph):
                return False
