"""The backward pass the IR builds from an ONNX export equals PyTorch autograd's, on the
same weights and inputs: the six models of the suite — BERT (masked-LM head), GPT-2 (tied
LM head), T5 (encoder and decoder), Llama (rotary embeddings, grouped-query attention),
ViT and ResNet (a conv net with inference-mode batch norm) — tiny configurations, float32.

The ONNX file is the forward export of ``tests/models/make_models.py`` (its initializers
named after the module's parameters); the loss is ``--loss nll`` (the first output's
softmax cross-entropy against labels); the IR's gradients are evaluated with every op's
numpy fold, and torch's by ``loss.backward()`` on the module the file was exported from.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

import make_models  # noqa: E402

from popart_unwind.ir import Ir  # noqa: E402
from popart_unwind.ops import REGISTRY  # noqa: E402
from popart_unwind.rewrite import Rewriter  # noqa: E402
from popart_unwind.training import build_backward  # noqa: E402
from popart_unwind.training.losses import add_loss  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all  # noqa: E402

MODELS = ("bert", "gpt2", "vit", "resnet", "t5", "llama")


@pytest.fixture
def uncapped_folds(monkeypatch):
    """The folds' size caps lifted: the oracle computes whole tiny models."""
    for module in ("common", "linalg", "reduce", "indexing", "conv", "pools", "norms",
                   "resizing", "constants", "stochastic"):
        loaded = importlib.import_module(f"popart_unwind.ops.{module}")
        for cap in ("FOLD_MAX_ELEMENTS", "FOLD_MAX_FLOPS"):
            if hasattr(loaded, cap):
                monkeypatch.setattr(loaded, cap, 1 << 40)


def ir_gradients(path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ir = Ir.from_onnx(path)
    graph = ir.main_graph
    rewriter = Rewriter(REGISTRY)
    loss = add_loss(graph, rewriter, "nll")
    grads = build_backward(graph, loss, rewriter)
    first = len(graph.outputs)
    for grad in grads.values():
        graph.mark_output(grad)
    values = fold_all(ir, inputs)
    return dict(zip(grads, values[first:], strict=True))


@pytest.mark.parametrize("name", MODELS)
def test_gradients_equal_torch_autograd(name, uncapped_folds):
    path = make_models.build(name, "forward", "tiny")
    module, args = make_models.tiny_model(name)
    module.eval()
    logits = module(*args)
    classes = logits.shape[-1]
    labels = torch.from_numpy(np.random.default_rng(5).integers(
        0, classes, logits.shape[:-1]).astype(np.int32))
    inputs = {n: a.numpy() for n, a in zip(make_models.input_names(name), args, strict=True)}
    inputs["labels"] = labels.numpy()
    got = ir_gradients(path, inputs)

    module.zero_grad()
    logits = module(*args)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, classes),
                                             labels.reshape(-1).long())
    loss.backward()
    # a tied table under each of its names; an exporter's own initializers (a constant it
    # wrote as one, such as a scalar) are trained too, as PopART trains every initializer,
    # but have no parameter to compare with
    params = dict(module.named_parameters(remove_duplicate=False))
    compared = [w for w in got if w in params]
    assert len(compared) >= 10, compared
    # every parameter the file's graph reads gets its gradient (the exporter drops a bias
    # that is all zeros, as GPT-2's and a fresh classifier's are: the file has no such
    # parameter to train)
    read = _read_initializers(path)
    trained = {n for n, p in params.items() if p.grad is not None and p.grad.abs().max() > 0
               and n in read}
    assert trained <= set(got) | _tied(module, set(got)), sorted(trained - set(got))[:5]
    scale = max(float(params[w].grad.abs().max()) for w in compared)
    for weight in compared:
        np.testing.assert_allclose(got[weight], params[weight].grad.numpy(), rtol=1e-3,
                                   atol=1e-5 * scale, err_msg=f"{name}: gradient of {weight}")


def _read_initializers(path: Path) -> set[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names = {i.name for i in model.graph.initializer}
    return {name for node in model.graph.node for name in node.input if name in names}


def _tied(module, names: set[str]) -> set[str]:
    """Every name of a parameter one of ``names`` also names (a tied table)."""
    by_id: dict[int, list[str]] = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(n)
    return {n for group in by_id.values() if names & set(group) for n in group}


def _matmuls(ir: Ir) -> int:
    return sum(op.type.name in ("MatMul", "Gemm") for op in ir.main_graph.ops)


@pytest.mark.parametrize("name", ["bert", "vit"])
def test_a_step_holds_more_than_twice_the_forward_matmuls(name):
    """Every layer's forward matmul gains its weight-gradient pass and, but for the first
    layer's, its data-gradient pass."""
    from popart_unwind.transforms import run_pipeline

    from popart_unwind.options import SessionOptions

    path = make_models.build(name, "forward", "tiny")
    forward = Ir.from_onnx(path, options=SessionOptions(enable_unwind_layouts=False))
    run_pipeline(forward)
    step = Ir.from_onnx(path, options=SessionOptions(enable_unwind_layouts=False, loss="nll",
                                                     optimizer="adam"))
    run_pipeline(step)
    assert _matmuls(step) > 2 * _matmuls(forward) > 0


def test_an_exports_step_pipelines_over_two_ipus():
    """GPT-2's export shares scalar initializers between its layers; they stay constants,
    so the step's split over two IPUs pipelines (no updated weight is copied)."""
    from popart_unwind.transforms import run_pipeline

    from popart_unwind.ops.stash import is_stash
    from popart_unwind.options import SessionOptions

    path = make_models.build("gpt2", "forward", "tiny")
    ir = Ir.from_onnx(path, options=SessionOptions(
        enable_unwind_layouts=False, loss="nll", optimizer="adam", ipus=2,
        virtual_graph_mode="auto", enable_pipelining=True))
    changed = run_pipeline(ir)
    assert changed["Autodiff"] and changed["Pipeline"]
    assert any(is_stash(op) for op in ir.main_graph.ops)
