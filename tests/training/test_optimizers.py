"""Each optimizer's one step, built in the IR and evaluated with the ops' folds, against
torch.optim's (LAMB against its published update rule, in numpy)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from popart_unwind.errors import OptionError
from popart_unwind.ir import Builder
from popart_unwind.ir.tensor import TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.optimizers import OPTIMIZERS, Optimizer, add_updates

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

RNG = np.random.default_rng(3)
SHAPE = (3, 5)


def ir_step(optimizer: Optimizer, weight: np.ndarray, grad: np.ndarray,
            accumulated: int = 1) -> dict[str, np.ndarray]:
    """Every updated value (weight, states) after one step from zero states."""
    b = Builder()
    w = b.add_initialized_input_tensor(weight, "w")
    g = b.add_constant(grad, "g_value")
    g = b.ai_onnx.identity([g], name="g")  # a computed gradient, as autodiff gives one
    ir = b.ir()
    graph = ir.main_graph
    updated = add_updates(graph, {w: graph.tensor(g)}, Rewriter(REGISTRY), optimizer)
    assert list(updated) == [w]
    values = fold_all(ir, {})
    return {graph.outputs[i].producer.input(0).id if graph.outputs[i].producer.input(0)
            .tensor_type is TensorType.VARIABLE else graph.outputs[i].id: values[i]
            for i in range(len(graph.outputs))}


def torch_step(name: str, weight: np.ndarray, grad: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.tensor(weight))
    p.grad = torch.tensor(grad)
    made = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
            "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            "adam": lambda ps: torch.optim.Adam(ps, lr=0.1, eps=1e-8),
            "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1, eps=1e-8, weight_decay=0.01)}
    made[name]([p]).step()
    return p.detach().numpy()


def lamb_step(weight: np.ndarray, grad: np.ndarray, lr: float = 0.1, beta1: float = 0.9,
              beta2: float = 0.999, eps: float = 1e-8, decay: float = 0.01) -> np.ndarray:
    """LAMB's first step (You et al., 2020, Algorithm 2, with bias correction)."""
    m = (1 - beta1) * grad
    v = (1 - beta2) * grad * grad
    r = (m / (1 - beta1)) / (np.sqrt(v / (1 - beta2)) + eps) + decay * weight
    ratio = np.linalg.norm(weight) / np.linalg.norm(r)
    return weight - lr * ratio * r


@pytest.mark.parametrize("name", ["sgd", "sgd_momentum", "adam", "adamw"])
def test_one_step_equals_torch(name):
    weight = RNG.standard_normal(SHAPE).astype(np.float32)
    grad = RNG.standard_normal(SHAPE).astype(np.float32)
    got = ir_step(Optimizer(name, learning_rate=0.1), weight, grad)
    np.testing.assert_allclose(got["w"], torch_step(name, weight, grad), rtol=1e-5,
                               atol=1e-6)


def test_lamb_equals_its_published_rule():
    weight = RNG.standard_normal(SHAPE).astype(np.float32)
    grad = RNG.standard_normal(SHAPE).astype(np.float32)
    got = ir_step(Optimizer("lamb", learning_rate=0.1), weight, grad)
    np.testing.assert_allclose(got["w"], lamb_step(weight, grad), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_states_are_float32_variables_updated_in_place(name):
    """Each state is a float32 Variable of the weight's shape whose new value is a graph
    output computed by an op reading it (so it is updated in place, laid out as itself)."""
    weight = RNG.standard_normal(SHAPE).astype(np.float16)
    b = Builder()
    w = b.add_initialized_input_tensor(weight, "w")
    g = b.ai_onnx.identity([b.add_constant(weight, "g_value")], name="g")
    ir = b.ir()
    graph = ir.main_graph
    add_updates(graph, {w: graph.tensor(g)}, Rewriter(REGISTRY), Optimizer(name))
    states = [t for t in graph.producerless_tensors()
              if t.tensor_type is TensorType.VARIABLE and t.id != w]
    assert len(states) == Optimizer(name).state_count()
    for state in states:
        assert state.dtype == "float32" and state.shape == SHAPE
    updated = {REGISTRY.layout_rule(t.producer).updated_weight(t.producer) is not None
               and t.producer.input(REGISTRY.layout_rule(t.producer)
                                    .updated_weight(t.producer)).id for t in graph.outputs}
    assert updated == {w, *(s.id for s in states)}
    assert graph.tensor(w).dtype == "float16"


def test_gradient_accumulation_and_loss_scaling():
    """The accumulator adds the gradient; the update reads the sum over N micro-batches,
    the loss scaling divided out: from a zero accumulator, w - lr * g / (N * scale)."""
    weight = RNG.standard_normal(SHAPE).astype(np.float32)
    grad = RNG.standard_normal(SHAPE).astype(np.float32)
    got = ir_step(Optimizer("sgd", learning_rate=0.5, gradient_accumulation=4,
                            loss_scaling=8.0), weight, grad)
    np.testing.assert_allclose(got["Accum___w"], grad)
    np.testing.assert_allclose(got["w"], weight - 0.5 * grad / 32, rtol=1e-6)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"name": "rmsprop"}, "unknown optimizer"),
    ({"gradient_accumulation": 0}, "gradient accumulation"),
    ({"learning_rate": -1.0}, "learning_rate"),
])
def test_bad_settings_are_refused(kwargs, words):
    with pytest.raises(OptionError, match=words):
        Optimizer(**kwargs)
