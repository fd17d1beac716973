"""A model with thousands of producer-less tensors, built in a moment with ``onnx.helper``.

A chain of small layers, each ``relu(layer_norm(x @ w + b, gamma, beta))``: four weights
per layer, so ``layers`` layers give ``4 * layers + 1`` tensors to plan (the input too).
Small widths keep planning and costing quick; the report's size grows with the tensor
count, which is what the report's tests and benchmark need.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def wide_model(layers: int, width: int = 8, batch: int = 4) -> onnx.ModelProto:
    """``layers`` layers of width ``width`` on a ``[batch, width]`` input."""
    rng = np.random.default_rng(0)
    nodes, weights = [], []
    x = "x"
    for i in range(layers):
        # named as PyTorch names a Sequential's parameters: 32.weight is part of 132.weight
        names = [f"{i}.weight", f"{i}.bias", f"{i}.norm.weight", f"{i}.norm.bias"]
        values = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                  np.zeros(width, np.float32), np.ones(width, np.float32),
                  np.zeros(width, np.float32)]
        weights += [numpy_helper.from_array(v, n) for n, v in zip(names, values, strict=True)]
        nodes += [
            helper.make_node("MatMul", [x, names[0]], [f"layer{i}/xw"], name=f"layer{i}/matmul"),
            helper.make_node("Add", [f"layer{i}/xw", names[1]], [f"layer{i}/xwb"],
                             name=f"layer{i}/bias"),
            helper.make_node("LayerNormalization", [f"layer{i}/xwb", names[2], names[3]],
                             [f"layer{i}/norm"], axis=-1, name=f"layer{i}/norm"),
            helper.make_node("Relu", [f"layer{i}/norm"], [f"layer{i}/y"],
                             name=f"layer{i}/relu"),
        ]
        x = f"layer{i}/y"
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, width])],
        initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="report-tests")
    onnx.checker.check_model(model)
    return model


def save_wide_model(folder: Path, layers: int, width: int = 8) -> Path:
    """The model saved as ``folder/wide.onnx``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "wide.onnx"
    onnx.save(wide_model(layers, width), str(path))
    return path
