"""PopART's ai.graphcore losses (L1, Nll: ops/graphcore_losses.py) and runtime ops over one
replica (ops/graphcore_runtime.py): shapes and folds against numpy written from PopART's
documented semantics, the rewrites into ONNX ops giving the fold's values, the refusals and
their reasons, and models holding them planned end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from graphcore_models import graphcore_model, plan_end_to_end
from popart_unwind.transforms import registry
from test_graphcore_ops import fold, graphcore_op

from popart_unwind.baselines import popart_baseline
from popart_unwind.errors import ShapeError, UnsupportedModelError
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.ir import Builder
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, OpType
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.graphcore_compute import COPY, UNWINDING_COPY

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

RNG = np.random.default_rng(11)


# -- L1 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("reduction", "reduce"), [("Sum", np.sum), ("Mean", np.mean),
                                                   ("None", lambda v: v)])
def test_l1(reduction, reduce):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    out, value = fold("L1", [x], {"lambda": 0.5, "reduction": reduction})
    np.testing.assert_allclose(value, reduce(0.5 * np.abs(x)), rtol=1e-6)
    assert out.shape == ((3, 4) if reduction == "None" else ())


def test_l1_needs_lambda():
    with pytest.raises(ShapeError):
        graphcore_op("L1", [np.zeros(2, np.float32)], {"reduction": "Sum"})


# -- Nll --------------------------------------------------------------------------------------
def _nll_oracle(probs, label, reduction, ignore=None, log_input=False):
    """Written out per label from PopART's documented meaning."""
    losses = []
    kept = 0
    for index in np.ndindex(label.shape):
        if ignore is not None and label[index] == ignore:
            losses.append(0.0)
            continue
        p = float(probs[(*index, int(label[index]))])
        losses.append(-p if log_input else -np.log(p + 1e-7))  # PopART's NllOpx adds 1e-7
        kept += 1
    losses = np.array(losses).reshape(label.shape)
    if reduction == "None":
        return losses
    return losses.sum() if reduction == "Sum" else losses.sum() / max(kept, 1)


@pytest.mark.parametrize("reduction", ["Sum", "Mean", "None"])
@pytest.mark.parametrize("ignore", [None, 2])
@pytest.mark.parametrize("log_input", [False, True])
def test_nll(reduction, ignore, log_input):
    probs = RNG.uniform(0.05, 1, (2, 3, 4)).astype(np.float32)  # classes last
    label = RNG.integers(0, 4, (2, 3)).astype(np.int32)
    label[0, 0] = 2
    attributes = {"reduction": reduction, "inputIsLogProbability": int(log_input)}
    if ignore is not None:
        attributes["ignoreIndex"] = ignore
    out, value = fold("Nll", [probs, label], attributes)
    np.testing.assert_allclose(value, _nll_oracle(probs, label, reduction, ignore, log_input),
                               rtol=1e-5)
    assert out.shape == ((2, 3) if reduction == "None" else ())


def test_nll_refuses_labels_of_another_shape():
    with pytest.raises(ShapeError):
        graphcore_op("Nll", [np.ones((2, 4), np.float32), np.zeros((4,), np.int32)])


@pytest.mark.parametrize(("name", "attributes", "values"), [
    ("L1", {"lambda": 0.25, "reduction": "Mean"}, [RNG.standard_normal((3, 5))]),
    ("Nll", {"reduction": "Mean", "ignoreIndex": 1},
     [RNG.uniform(0.1, 1, (4, 3)), np.array([0, 1, 2, 1], np.int32)]),
    ("Nll", {"reduction": "Sum", "inputIsLogProbability": 1},
     [RNG.uniform(-2, 0, (2, 2, 3)), np.array([[0, 2], [1, 1]], np.int64)]),
])
def test_the_rewrite_computes_what_the_fold_does(name, attributes, values):
    """The ONNX ops the op is rewritten into before planning, evaluated by their folds (on
    graph inputs, so nothing folds before the rewrite), give the op's own fold's value."""
    values = [v.astype(np.float32) if v.dtype.kind == "f" else v for v in values]
    model = graphcore_model(name, {f"x{i}": v for i, v in enumerate(values)}, attributes,
                            then=None)
    ir = import_onnx(model)
    want = fold(name, values, attributes)[1]
    registry.run_pipeline(ir, ["InferShapes", "Canonicalize"])
    assert all(op.type.domain != GRAPHCORE_DOMAIN for op in ir.main_graph.ops)
    [got] = fold_all(ir, {f"x{i}": v for i, v in enumerate(values)})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- runtime ops over one replica -------------------------------------------------------------
@pytest.mark.parametrize(("name", "unwinds"), [
    ("ReplicatedAllReduce", True), ("ReplicatedAllReduceInplace", True),
    ("AllReduce", True), ("AutoLossScaleProxy", True)])
def test_identities_over_one_replica(name, unwinds):
    """The value passes on; PopART's creator search passes through each (AllReduce of one
    input becomes PopART's identity, a view)."""
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    out, value = fold(name, [x], {"__collectiveOperator": 1} if "Reduce" in name else {})
    np.testing.assert_array_equal(value, x)
    op = graphcore_op(name, [x])
    rule = REGISTRY.layout_rule(op)
    assert out.shape == (2, 3) and (rule.popart_view(op, 0, 0) is not None) == unwinds
    assert rule is (UNWINDING_COPY if name != "AllReduce" else rule)
    assert rule.aliases_outputs(op) == (name == "AllReduce")


@pytest.mark.parametrize("name", ["ReplicatedAllGather", "ReplicatedReduceScatter"])
def test_gather_and_scatter_over_one_replica_flatten(name):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    out, value = fold(name, [x])
    assert out.shape == (6,)
    np.testing.assert_array_equal(value, x.reshape(-1))
    op = graphcore_op(name, [x])
    assert REGISTRY.layout_rule(op) is COPY and COPY.popart_view(op, 0, 0) is None


def test_what_one_replica_cannot_state_is_refused():
    x = np.zeros((2,), np.float32)
    with pytest.raises(ShapeError, match="SquareAdd"):
        graphcore_op("ReplicatedAllReduce", [x], {"__collectiveOperator": 7})
    with pytest.raises(ShapeError, match="across 2 IPUs"):
        graphcore_op("AllReduce", [x, x], {"ipus": [0, 1]}, outputs=2)


@pytest.mark.parametrize(("name", "words"), [
    ("RemoteLoad", "remote buffer"), ("RemoteStore", "remote buffer"),
    ("RemoteLoadInplace", "remote buffer"), ("RemoteCodeLoad", "remote memory"),
    ("HostLoad", "host"), ("HostStore", "host"), ("LossScaleUpdate", "loss scale")])
def test_refusals_name_their_reason(name, words):
    assert words in REGISTRY.refusal(OpType(GRAPHCORE_DOMAIN, name, 1))
    model = graphcore_model(name, {"x": np.zeros((2, 2), np.float32)}, {}, then=None)
    with pytest.raises(UnsupportedModelError, match=f"{name}.*not modelled: it .*{words}"):
        import_onnx(model)


# -- end to end -------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "attributes", "values"), [
    ("L1", {"lambda": 0.1, "reduction": "Sum"}, {"x": np.ones((8, 16), np.float32)}),
    ("Nll", {"reduction": "Mean"}, {"p": np.full((8, 5), 0.2, np.float32),
                                    "t": np.zeros(8, np.int32)}),
    ("ReplicatedAllReduce", {}, {"x": np.ones((8, 16), np.float32)}),
    ("ReplicatedAllGather", {}, {"x": np.ones((8, 16), np.float32)}),
    ("AutoLossScaleProxy", {}, {"x": np.ones((8, 16), np.float32)}),
])
def test_a_model_holding_it_plans_end_to_end(name, attributes, values):
    model = graphcore_model(name, values, attributes, then="Relu")
    run = plan_end_to_end(model)
    assert run.costs["ours"].cycles > 0 and run.costs["popart"].cycles > 0
    assert not any(name in label for label in run.ops_without_rule), run.ops_without_rule


@pytest.mark.parametrize(("name", "created"), [("ReplicatedAllReduce", True),
                                               ("PrintTensor", False)])
def test_popart_creator_search_through_the_copy(name, created):
    """A weight read by a MatMul through the op: PopART's creator search reaches the MatMul
    through ReplicatedAllReduce (CanUnwind) and stops at PrintTensor (Deadend)."""
    b = Builder()
    w = b.add_initialized_input_tensor(np.zeros((16, 8), np.float32), "w")
    x = b.add_input_tensor("float32", (4, 16), "x")
    passed = b.op(name, [w], {}, domain=GRAPHCORE_DOMAIN)
    b.add_output_tensor(b.ai_onnx.matmul([x, passed]))
    decision = popart_baseline(b.ir(), TileTarget(IpuModel(tiles_per_ipu=16))).decision("w")
    assert ("created by" in decision.method) == created, decision.method
