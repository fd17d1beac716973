"""``--input-shape NAME=D1,D2,...``: an ONNX model with a symbolic batch dimension planned from
the command line, and every way of giving a wrong shape refused in one line, exit 2,
nothing written."""

from __future__ import annotations

import json

import onnx
import pytest
from cli_runner import run
from conftest import save_alone
from onnx import TensorProto
from onnx import helper as oh
from test_cli_errors import assert_refused


def symbolic_model() -> onnx.ModelProto:
    """y = relu(x @ w) with x of shape [batch, 8] and w a [8, 16] weight."""
    weight = oh.make_tensor("w", TensorProto.FLOAT, [8, 16], [0.5] * 128)
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["xw"]), oh.make_node("Relu", ["xw"], ["y"])],
        "symbolic", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        initializer=[weight])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.fixture
def symbolic_path(tmp_path):
    return save_alone(symbolic_model(), tmp_path / "model", "symbolic.onnx")


def test_a_symbolic_batch_needs_a_shape_and_the_error_says_how(symbolic_path, out_dir):
    status, out, err = run("plan", str(symbolic_path), "--out", str(out_dir / "plan.json"))
    assert_refused(status, out, err, out_dir, "'x'", "['batch']", "--input-shape x=")


def test_the_given_shape_is_planned(symbolic_path, out_dir):
    status, _, err = run("plan", str(symbolic_path), "--input-shape", "x=4,8", "--quiet",
                         "--out", str(out_dir / "plan.json"), "--tiles", "8")
    assert status == 0, err
    plan = json.loads((out_dir / "plan.json").read_text())
    assert plan["tensors"]["w"]["shape"] == [8, 16]
    status, _, err = run("plan", str(symbolic_path), "--input-shape", "x=2,8", "--quiet",
                         "--out", str(out_dir / "plan2.json"), "--tiles", "8")
    assert status == 0, err  # another batch, another plan of the same weight
    assert json.loads((out_dir / "plan2.json").read_text())["summary"] != plan["summary"]


@pytest.mark.parametrize("given, words", [
    (["x=4"], ["2 dimensions", "[4]"]),
    (["x=4,9"], ["dimension 1 fixed at 8", "9"]),
    (["z=1,8"], ["'z'", "not a graph input", "['x']"]),
    (["w=8,16"], ["'w'", "not a graph input"]),  # an initializer's shape is its data's
    (["x=0,8"], ["--input-shape", "positive"]),
    (["x=4,eight"], ["--input-shape", "x=4,eight"]),
    (["x"], ["--input-shape", "NAME=D1,D2"]),
    (["=4,8"], ["--input-shape"]),
    (["x=4,8", "x=2,8"], ["two shapes", "[4, 8]", "[2, 8]"]),
])
def test_a_wrong_shape_is_refused(symbolic_path, out_dir, given, words):
    flags = [item for shape in given for item in ("--input-shape", shape)]
    status, out, err = run("plan", str(symbolic_path), *flags, "--out",
                           str(out_dir / "plan.json"), "--report", str(out_dir / "report"))
    assert_refused(status, out, err, out_dir, *words)


def test_a_pytorch_factory_takes_no_input_shape(out_dir):
    status, out, err = run("plan", "nowhere_module:factory", "--input-shape", "x=1,2",
                           "--out", str(out_dir / "plan.json"))
    assert_refused(status, out, err, out_dir, "--input-shape", "ONNX")
