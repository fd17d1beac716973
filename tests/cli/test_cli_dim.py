"""``--dim NAME=VALUE``: a symbolic dimension sized in every graph input that has it, and
every way of getting it wrong refused in one line, exit 2, nothing written."""

from __future__ import annotations

import json

import onnx
import pytest
from cli_runner import run
from conftest import save_alone
from onnx import TensorProto
from onnx import helper as oh
from test_cli_errors import assert_refused


def dynamic_model() -> onnx.ModelProto:
    """y = relu(x @ w).reshape(x.shape[0], -1) + m, x of shape [batch, sequence, 8], m of
    shape [batch, 1]: the reshape's target is computed from x's shape, as exporters do."""
    weight = oh.make_tensor("w", TensorProto.FLOAT, [8, 16], [0.5] * 128)
    nodes = [oh.make_node("MatMul", ["x", "w"], ["xw"]), oh.make_node("Relu", ["xw"], ["r"]),
             oh.make_node("Shape", ["x"], ["shape"]),
             oh.make_node("Slice", ["shape", "start", "end"], ["batch"]),
             oh.make_node("Concat", ["batch", "minus_one"], ["target"], axis=0),
             oh.make_node("Reshape", ["r", "target"], ["flat"]),
             oh.make_node("Add", ["flat", "m"], ["y"])]
    ints = lambda name, values: oh.make_tensor(name, TensorProto.INT64, [1], values)  # noqa: E731
    graph = oh.make_graph(
        nodes, "dynamic",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 8]),
         oh.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", 1])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[weight, ints("start", [0]), ints("end", [1]), ints("minus_one", [-1])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.fixture
def dynamic_path(tmp_path):
    return save_alone(dynamic_model(), tmp_path / "model", "dynamic.onnx")


def test_dims_plan_the_model(dynamic_path, out_dir):
    status, _, err = run("plan", str(dynamic_path), "--dim", "batch=4", "--dim", "sequence=3",
                         "--quiet", "--out", str(out_dir / "plan.json"), "--tiles", "8")
    assert status == 0, err
    plan = json.loads((out_dir / "plan.json").read_text())
    assert plan["tensors"]["x"]["shape"] == [4, 3, 8]
    assert plan["tensors"]["m"]["shape"] == [4, 1]


def test_dims_and_an_input_shape_together(dynamic_path, out_dir):
    status, _, err = run("plan", str(dynamic_path), "--dim", "sequence=3", "--input-shape",
                         "x=2,3,8", "--input-shape", "m=2,1", "--quiet", "--out",
                         str(out_dir / "plan.json"), "--tiles", "8")
    assert status == 0, err
    assert json.loads((out_dir / "plan.json").read_text())["tensors"]["x"]["shape"] == [2, 3, 8]


@pytest.mark.parametrize("given, words", [
    ([], ["'x'", "['batch', 'sequence']", "--dim batch="]),
    (["batch=4"], ["'x'", "['sequence']", "--dim sequence="]),
    (["batch=4", "sequence=3", "width=2"], ["'width'", "['batch', 'sequence']"]),
    (["batch=0"], ["--dim", "positive"]),
    (["batch=four"], ["--dim", "batch=four"]),
    (["batch"], ["--dim", "NAME=VALUE"]),
    (["batch=4", "batch=2", "sequence=3"], ["two sizes", "'batch'", "4", "2"]),
])
def test_a_wrong_dim_is_refused(dynamic_path, out_dir, given, words):
    flags = [item for dim in given for item in ("--dim", dim)]
    status, out, err = run("plan", str(dynamic_path), *flags, "--out",
                           str(out_dir / "plan.json"), "--report", str(out_dir / "report"))
    assert_refused(status, out, err, out_dir, *words)


def test_a_shape_read_from_an_input_is_refused(tmp_path, out_dir):
    graph = oh.make_graph(
        [oh.make_node("Reshape", ["x", "target"], ["y"])], "reads-values",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
         oh.make_tensor_value_info("target", TensorProto.INT64, [2])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    path = save_alone(model, tmp_path / "model", "reads.onnx")
    status, out, err = run("plan", str(path), "--out", str(out_dir / "plan.json"))
    assert_refused(status, out, err, out_dir, "Reshape", "values of graph input 'target'")


def test_a_pytorch_factory_takes_no_dim(out_dir):
    status, out, err = run("plan", "nowhere_module:factory", "--dim", "batch=2",
                           "--out", str(out_dir / "plan.json"))
    assert_refused(status, out, err, out_dir, "--dim", "ONNX")
