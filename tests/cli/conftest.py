"""Tiny ONNX models for the command-line tests, written into each test's folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def linear_layer_model() -> onnx.ModelProto:
    """y = relu(x @ transpose(w) + b): a weight that reaches a matmul through a view."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(16, np.float32), "b")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="transpose_w"),
        helper.make_node("MatMul", ["x", "wt"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["xwb"], name="add_bias"),
        helper.make_node("Relu", ["xwb"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "linear_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        initializer=[weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="cli-tests")
    onnx.checker.check_model(model)
    return model


def save_alone(model: onnx.ModelProto, folder: Path, name: str) -> Path:
    """``model`` saved as ``folder/name`` in a new folder of its own (outputs go elsewhere)."""
    folder.mkdir()
    path = folder / name
    onnx.save(model, str(path))
    return path


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    """The linear-layer model saved in a folder of its own."""
    return save_alone(linear_layer_model(), tmp_path / "model", "linear.onnx")


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the bad inputs' files (``bad_inputs.make_world``), made current:
    relative paths and ``--report .`` refer to it."""
    from bad_inputs import make_world

    root = tmp_path / "world"
    root.mkdir()
    make_world(root)
    monkeypatch.chdir(root)
    return root
