"""Ops no layout rule models are never silent barriers: the plan file, the summary and the
report name them by type with counts."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from cli_runner import run
from conftest import save_alone
from onnx import TensorProto, helper, numpy_helper

from popart_unwind.errors import PlanError
from popart_unwind.ir import Ir
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, ONNX_DOMAIN, OpType
from popart_unwind.ops.coverage import has_layout_rule, ops_without_rule, type_label
from popart_unwind.ops.layout_rule import LayoutRule
from popart_unwind.ops.registry import REGISTRY
from popart_unwind.report.demo_model import build_demo_ir
from popart_unwind.report.html import _ops_without_rule
from popart_unwind.report.plan_file import dumps_plan, validate_plan
from popart_unwind.report.session import transform
from popart_unwind.report.summary import ops_without_rule_line

LINE = "ops without a layout rule (barriers, no exchange counted): "


def gaps_model() -> onnx.ModelProto:
    """A matmul, two Trilus (registered, no layout rule) and two ops of a custom domain
    the tool does not know (opaque, typed by ONNX value infos)."""
    weight = numpy_helper.from_array(np.ones((8, 16), np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
        helper.make_node("Trilu", ["xw"], ["p"], name="trilu"),
        helper.make_node("Foo", ["p"], ["f"], domain="com.example", name="foo"),
        helper.make_node("Trilu", ["f"], ["q"], upper=0, name="trilu_again"),
        helper.make_node("Foo", ["q"], ["y"], domain="com.example", name="foo_again"),
    ]
    graph = helper.make_graph(
        nodes, "gaps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        initializer=[weight],
        value_info=[helper.make_tensor_value_info("f", TensorProto.FLOAT, [4, 16])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.example", 1)])


EXPECTED = {"Trilu": 2, "com.example::Foo": 2}


@pytest.fixture
def gaps_path(tmp_path: Path) -> Path:
    return save_alone(gaps_model(), tmp_path / "gaps", "gaps.onnx")



def test_no_rule_means_the_base_rule_itself():
    trilu, matmul = OpType(ONNX_DOMAIN, "Trilu", 14), OpType(ONNX_DOMAIN, "MatMul", 13)
    assert REGISTRY.lookup(trilu) is not None  # known to the registry ...
    assert type(REGISTRY.lookup(trilu).layout) is LayoutRule  # ... with the base rule
    assert isinstance(REGISTRY.lookup(matmul).layout, LayoutRule)
    assert type(REGISTRY.lookup(matmul).layout) is not LayoutRule
    assert REGISTRY.lookup(OpType("com.example", "Foo")) is None  # opaque: the base rule


def test_type_labels_name_the_domain_outside_onnx():
    assert type_label(OpType(ONNX_DOMAIN, "Softmax", 13)) == "Softmax"
    assert type_label(OpType("com.example", "Foo")) == "com.example::Foo"
    assert type_label(OpType(GRAPHCORE_DOMAIN, "Init")) == "ai.graphcore::Init"


def test_every_graph_is_counted():
    ir = Ir()
    main_graph = ir.main_graph
    x = main_graph.add_input("x", "float32", (2, 3))
    main_graph.create_op(OpType("com.example", "Foo"), [x], ["a"])
    main_graph.create_op(OpType(ONNX_DOMAIN, "Relu", 14), [x], ["b"])
    body = ir.create_graph("body")
    y = body.add_input("body/y", "float32", (2, 3))
    body.create_op(OpType("com.example", "Foo"), [y], ["body/a"])
    body.create_op(OpType(ONNX_DOMAIN, "Trilu", 14), [y], ["body/b"])
    assert not has_layout_rule(body.ops[0]) and has_layout_rule(main_graph.ops[1])
    counts = ops_without_rule(ir)
    assert counts == {"Trilu": 1, "com.example::Foo": 2}
    assert list(counts) == sorted(counts)


def test_the_demo_has_a_rule_for_every_op():
    """Its softmaxes, norms, scatters and random ops are modelled, so none is listed."""
    ir = build_demo_ir()
    transform(ir)
    assert {op.type.name for op in ir.all_ops()} >= {
        "Softmax", "LogSoftmax", "LayerNormalization", "ScatterND", "ScatterElements",
        "RandomUniformLike"}
    assert ops_without_rule(ir) == {}


def test_plan_file_summary_and_report_name_the_ops(gaps_path, tmp_path):
    plan, report = tmp_path / "plan.json", tmp_path / "report"
    status, out, err = run("plan", str(gaps_path), "--tiles", "8", "--out", str(plan),
                           "--report", str(report), "--baseline", "linear",
                           "--allow-unknown-ops")
    assert status == 0
    assert err == ("popart-unwind: warning: op types the tool does not know, planned as "
                   "barriers (results mapped linearly, no exchange counted): "
                   "com.example::Foo (nodes 'foo', 'foo_again')\n")
    document = json.loads(plan.read_text())
    validate_plan(document)
    assert document["ops_without_rule"] == EXPECTED
    assert list(document["ops_without_rule"]) == sorted(EXPECTED)
    # the line follows the table and its fullest-tile line, before the closing line
    lines = out.splitlines()
    assert lines[-2] == f"{LINE}Trilu ×2, com.example::Foo ×2"
    assert lines[-3].startswith("fullest tile ") and lines[-4].startswith("regions")
    assert " tensors planned in " in lines[-1]
    page = (report / "index.html").read_text()
    assert "<code>Trilu</code> ×2, <code>com.example::Foo</code> ×2" in page
    again = tmp_path / "again.json"
    assert run("plan", str(gaps_path), "--tiles", "8", "--out", str(again), "--quiet",
               "--baseline", "linear", "--allow-unknown-ops") == (0, "", err)
    assert again.read_bytes() == plan.read_bytes()


def test_a_fully_modelled_model_lists_none(model_path, out_dir):
    plan, report = out_dir / "plan.json", out_dir / "report"
    status, out, err = run("plan", str(model_path), "--tiles", "4", "--out", str(plan),
                           "--report", str(report), "--baseline", "none")
    assert (status, err) == (0, "")
    assert json.loads(plan.read_text())["ops_without_rule"] == {}
    assert '"ops_without_rule": {}' in plan.read_text()
    assert "layout rule" not in out  # the summary is as it was
    assert "Every op has a layout rule." in (report / "index.html").read_text()


def recurrent_model() -> onnx.ModelProto:
    """A GRU over a variable sequence, then a bitwise op and a CumProd on its results' shape:
    the GRU and the CumProd are barriers, the bitwise op an elementwise row."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w", (1, 12, 3)), ("r", (1, 12, 4)))]
    axis = numpy_helper.from_array(np.array(0, np.int64), "axis")
    nodes = [
        helper.make_node("GRU", ["x", "w", "r"], ["", "h"], hidden_size=4, name="gru"),
        helper.make_node("CumProd", ["h", "axis"], ["y"], name="cumprod"),
        helper.make_node("BitwiseXor", ["i", "j"], ["k"], name="xor"),
    ]
    graph = helper.make_graph(
        nodes, "recurrent",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 3]),
         helper.make_tensor_value_info("i", TensorProto.INT32, [8]),
         helper.make_tensor_value_info("j", TensorProto.INT32, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4]),
         helper.make_tensor_value_info("k", TensorProto.INT32, [8])],
        initializer=[*weights, axis])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])


def test_new_barriers_are_listed(tmp_path):
    path = save_alone(recurrent_model(), tmp_path / "recurrent", "recurrent.onnx")
    plan = tmp_path / "plan.json"
    status, out, err = run("plan", str(path), "--tiles", "8", "--out", str(plan),
                           "--baseline", "none")
    assert (status, err) == (0, "")
    assert json.loads(plan.read_text())["ops_without_rule"] == {"CumProd": 1, "GRU": 1}
    assert f"{LINE}CumProd ×1, GRU ×1" in out.splitlines()


def test_summary_line_orders_by_count_then_name():
    assert ops_without_rule_line({"b": 1, "a": 1, "Foo": 3}) == f"{LINE}Foo ×3, a ×1, b ×1"


def test_report_escapes_op_types():
    text = _ops_without_rule(SimpleNamespace(ops_without_rule={"x.y::<Foo&>": 2}))
    assert "<code>x.y::&lt;Foo&amp;&gt;</code> ×2" in text and "<Foo" not in text


def plan_with(counts: object) -> dict:
    """A valid plan document whose ``ops_without_rule`` is ``counts``."""
    return {"version": 1, "target": {"tiles": 1}, "summary": {},
            "tensors": {"w": {"shape": [2], "dtype": "float32", "tile_mapping": [[[0, 2]]],
                              "method": "linear", "explanation": "-", "graph": ""}},
            "ops": {}, "ops_without_rule": counts}


def test_validate_plan_accepts_counts():
    validate_plan(plan_with({}))
    validate_plan(plan_with({"Softmax": 2, "com.example::Foo": 1}))
    validate_plan(json.loads(dumps_plan(plan_with({"Softmax": 2}))))


@pytest.mark.parametrize("counts", [None, [], ["Softmax"], "Softmax", {"Softmax": 0},
                                    {"Softmax": -1}, {"Softmax": 1.0}, {"Softmax": True},
                                    {"Softmax": "2"}, {"": 1}])
def test_validate_plan_rejects_malformed_counts(counts):
    with pytest.raises(PlanError, match="ops_without_rule"):
        validate_plan(plan_with(counts))


def test_validate_plan_needs_the_key():
    document = plan_with({})
    del document["ops_without_rule"]
    with pytest.raises(PlanError, match="ops_without_rule"):
        validate_plan(document)


#: The registered op types with no layout rule today (docs/cli.md names them).
REGISTERED_WITHOUT_RULE = {
    "Constant", "ConstantOfShape",
    "CumProd", "CumSum", "Det", "Dropout", "Einsum", "EyeLike", "GatherND",
    "GlobalLpPool", "GridSample", "GRU", "InstanceNormalization", "LpNormalization", "LRN",
    "LSTM", "MatMulInteger", "MaxUnpool", "NegativeLogLikelihoodLoss", "NonZero", "OneHot",
    "Pad", "Range", "Resize", "ReverseSequence", "RNN", "RoiAlign", "Shape", "Size", "Tile",
    "TopK", "Trilu", "Upsample",
    "ai.graphcore::DynamicAdd", "ai.graphcore::DynamicSlice", "ai.graphcore::DynamicUpdate",
    "ai.graphcore::DynamicZero", "ai.graphcore::GroupNormalization",
    "ai.graphcore::IdentityLoss", "ai.graphcore::Init", "ai.graphcore::LSTM",
    "ai.graphcore::Reverse",
    "ai.graphcore::Subsample", "ai.graphcore::ShapedDropout", "ai.graphcore::Bucketize",
    "ai.graphcore::ReduceMedian", "ai.graphcore::Abort", "ai.graphcore::Zeros",
    "ai.graphcore::ZerosLike", "ai.graphcore::AddBias", "ai.graphcore::L1",
    "ai.graphcore::Nll", "ai.graphcore::Sort", "ai.graphcore::SequenceSlice",
    "ai.graphcore::NormalizeImage", "ai.graphcore::Histogram", "ai.graphcore::TensorRemap",
    "ai.graphcore::CopyVarUpdate", "ai.graphcore::MultiConv",
    "ai.graphcore::ScatterReduce", "ai.graphcore::Ctc", "ai.graphcore::CtcBeamSearchDecoder",
    "ai.graphcore::SplineBasis", "ai.graphcore::SplineWeighting",
    "ai.graphcore::ConvFlipWeights", "ai.graphcore::GroupedGather",
    "ai.graphcore::PackedDataBlock"}


def test_registered_op_types_without_rule_are_the_documented_ones():
    found = {type_label(OpType(domain, name)) for domain, name in REGISTRY.names()
             if type(REGISTRY.lookup(OpType(domain, name)).layout) is LayoutRule}
    assert found == REGISTERED_WITHOUT_RULE


def test_a_gather_off_axis_0_is_listed_a_table_lookup_is_not():
    """GatherRule models lookups into a table along axis 0 only; any other Gather falls
    back to a barrier and must be listed, not counted as modelled."""
    ir = Ir()
    graph = ir.main_graph
    table = graph.add_input("table", "float32", (10, 4))
    rows = graph.add_input("rows", "int64", (3,))
    columns = graph.add_input("columns", "int64", (2,))
    graph.create_op(OpType(ONNX_DOMAIN, "Gather", 13), [table, rows], ["looked_up"],
                    {"axis": 0})
    graph.create_op(OpType(ONNX_DOMAIN, "Gather", 13), [table, columns], ["picked"],
                    {"axis": 1})
    lookup, picked = graph.ops
    assert has_layout_rule(lookup) and not has_layout_rule(picked)
    assert ops_without_rule(ir) == {"Gather": 1}
