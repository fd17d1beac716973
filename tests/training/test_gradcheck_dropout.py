"""Dropout's gradient rule: the identity outside training; in training the mask it drew,
scaled. The oracle's numpy folds cannot draw the op's mask, so the training cases run with
Dropout's fold replaced by one applying a fixed mask: the forward is then a function central
differences can take."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gradcheck import check_gradients

from popart_unwind.errors import TransformError
from popart_unwind.ir import Builder
from popart_unwind.ir.op import ONNX_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import build_backward

RNG = np.random.default_rng(3)
SHAPE = (3, 4)
MASK = RNG.random(SHAPE) > 0.4


@pytest.fixture
def fixed_mask(monkeypatch):
    """Dropout folds as ``x · MASK / (1 - ratio)`` in training, with its mask output."""
    key = (ONNX_DOMAIN, "Dropout")
    opdef = REGISTRY._defs[key]  # the registry has no public way to replace a definition

    def fold(op, constants):
        ratio = (float(op.attributes.get("ratio", 0.5)) if op.type.version < 12
                 else float(constants[1]))
        mask = MASK if op.type.version >= 10 else MASK.astype(constants[0].dtype)
        return [constants[0] * MASK / (1 - ratio), mask]

    monkeypatch.setitem(REGISTRY._defs, key, dataclasses.replace(opdef, fold=fold))


def test_inference_dropout_is_the_identity():
    def forward(b, ids):
        return b.ai_onnx.mul([b.ai_onnx.dropout([ids["x"]]), ids["x"]])

    check_gradients(forward, {"x": RNG.standard_normal(SHAPE)})


def test_training_mode_false_is_the_identity():
    def forward(b, ids):
        out = b.ai_onnx.dropout([ids["x"], np.array(0.3), np.array(False)], num_outputs=2)[0]
        return b.ai_onnx.mul([out, ids["x"]])

    check_gradients(forward, {"x": RNG.standard_normal(SHAPE)})


@pytest.mark.parametrize("ratio", [0.25, 0.6])
def test_training_dropout_reads_its_mask(fixed_mask, ratio):
    def forward(b, ids):
        out = b.ai_onnx.dropout([ids["x"], np.array(ratio), np.array(True)], num_outputs=2)[0]
        return b.ai_onnx.mul([out, b.ai_onnx.sin([ids["x"]])])

    check_gradients(forward, {"x": RNG.standard_normal(SHAPE)})


@pytest.mark.parametrize("version", [7, 10])
def test_dropout_before_opset_12_drops(fixed_mask, version):
    """Before opset 12 the op has no training_mode: in training it drops (ratio an
    attribute; its mask of the data's type before opset 10)."""
    def forward(b, ids):
        return b.op("Dropout", [ids["x"]], {"ratio": 0.2}, 2, version=version)[0]

    check_gradients(forward, {"x": RNG.standard_normal(SHAPE)})


def test_dropping_without_a_mask_output_is_refused():
    b = Builder()
    x = b.add_initialized_input_tensor(RNG.standard_normal(SHAPE), "x")
    out = b.ai_onnx.dropout([x, np.array(0.5), np.array(True)], name="drop")
    loss = b.ai_onnx.reducesum([out], keepdims=0)
    graph = b.ir().main_graph
    with pytest.raises(TransformError, match=r"drop.*mask output"):
        build_backward(graph, graph.tensor(loss), Rewriter(REGISTRY))
