"""A PyTorch training step given an optimizer's updates in the IR (``import_torch(...,
optimizer=...)``), evaluated with the ops' folds: against the traced SGD step, and against
torch.optim's step on the module itself."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from popart_unwind.errors import ModelImportError  # noqa: E402
from popart_unwind.ir import Ir, TensorType  # noqa: E402
from popart_unwind.training.optimizers import Optimizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all  # noqa: E402

TORCH_OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.1, eps=1e-8),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1, eps=1e-8, weight_decay=0.01),
}


def mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                 torch.nn.Linear(16, 4))
    return module, torch.randn(3, 8)


def run(ir: Ir, x: torch.Tensor) -> dict[str, np.ndarray]:
    """Every graph output's value by its id, the Stream input fed ``x``."""
    graph = ir.main_graph
    (stream,) = [t for t in graph.inputs if t.tensor_type is TensorType.STREAM]
    return dict(zip(graph.output_ids, fold_all(ir, {stream.id: x.numpy()}), strict=True))


def updates(ir: Ir) -> dict[str, str]:
    """Weight id -> the output holding its new value: ``Sub(w, step)`` reading the weight."""
    found = {}
    for tensor in ir.main_graph.outputs:
        op = tensor.producer
        if op is not None and op.type.name == "Sub" and \
                op.input(0).tensor_type is TensorType.VARIABLE:
            assert op.input(0).id not in found, op.input(0).id
            found[op.input(0).id] = tensor.id
    return found


def torch_step(module: torch.nn.Module, x: torch.Tensor, name: str) -> dict[str, np.ndarray]:
    """One step of torch.optim's ``name`` on the summed output, by torch autograd."""
    reference = copy.deepcopy(module)
    optimizer = TORCH_OPTIMIZERS[name](list(reference.parameters()))
    reference(x).sum().backward()
    optimizer.step()
    return {n: p.detach().numpy() for n, p in reference.named_parameters()}


def test_sgd_in_the_ir_is_the_traced_sgd_step():
    module, x = mlp()
    traced = Ir.from_torch(module, (x,), training=True, learning_rate=0.1)
    built = Ir.from_torch(module, (x,), training=True,
                          optimizer=Optimizer("sgd", learning_rate=0.1))
    built.verify()
    names = [n for n, _ in module.named_parameters()]
    graph = built.main_graph
    assert graph.output_ids[0] == built.final_loss_id
    assert len(graph.output_ids) == 1 + len(names)  # the loss and one update each
    assert list(updates(built)) == names
    old, new = run(traced, x), run(built, x)
    old_outputs = traced.main_graph.output_ids
    np.testing.assert_allclose(new[built.final_loss_id], old[traced.final_loss_id],
                               rtol=1e-6)
    for name, traced_id in zip(names, old_outputs[1:], strict=True):
        np.testing.assert_allclose(new[updates(built)[name]], old[traced_id], rtol=1e-6,
                                   atol=1e-7, err_msg=name)


@pytest.mark.parametrize("name", sorted(TORCH_OPTIMIZERS))
def test_one_step_equals_torch_optim(name):
    module, x = mlp()
    ir = Ir.from_torch(module, (x,), training=True,
                       optimizer=Optimizer(name, learning_rate=0.1))
    ir.verify()
    values = run(ir, x)
    expected = torch_step(module, x, name)
    assert list(updates(ir)) == list(expected)
    for weight, output in updates(ir).items():
        np.testing.assert_allclose(values[output], expected[weight], rtol=1e-5, atol=1e-6,
                                   err_msg=weight)
    states = [t for t in ir.main_graph.producerless_tensors()
              if t.tensor_type is TensorType.VARIABLE and t.id not in expected]
    assert len(states) == Optimizer(name).state_count() * len(expected)
    assert all(t.dtype == "float32" for t in states)


def test_no_gradient_is_left_an_output():
    """Only the loss, the new weights and the new states are outputs."""
    module, x = mlp()
    ir = Ir.from_torch(module, (x,), training=True, optimizer=Optimizer("adam"))
    graph = ir.main_graph
    for tensor in graph.outputs[1:]:
        written = tensor.producer.input(0)
        assert written.tensor_type is TensorType.VARIABLE, tensor.id  # an update's result
    assert len(graph.outputs) == 1 + 3 * len(list(module.parameters()))


def test_buffers_keep_their_outputs_and_the_loss_follows_them():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                 torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    traced = Ir.from_torch(module, (x,), training=True, learning_rate=0.1)
    built = Ir.from_torch(module, (x,), training=True,
                          optimizer=Optimizer("sgd", learning_rate=0.1))
    buffers = 3  # running mean, running variance, batch count
    assert built.final_loss_id == built.main_graph.output_ids[buffers]
    old, new = run(traced, x), run(built, x)
    for old_id, new_id in zip(traced.main_graph.output_ids[:buffers + 1],
                              built.main_graph.output_ids[:buffers + 1], strict=True):
        np.testing.assert_allclose(new[new_id], old[old_id], rtol=1e-6)
    names = [n for n, _ in module.named_parameters()]
    for name, traced_id in zip(names, traced.main_graph.output_ids[buffers + 1:],
                               strict=True):
        np.testing.assert_allclose(new[updates(built)[name]], old[traced_id], rtol=1e-5,
                                   atol=1e-6, err_msg=name)


class Tied(torch.nn.Module):
    """An embedding whose table is also the output layer's weight (one tensor, two names)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(10, 6)
        self.mix = torch.nn.Linear(6, 6)
        self.head = torch.nn.Linear(6, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.embed(ids))))


def test_a_tied_parameter_has_one_update_of_the_tensor_the_graph_reads():
    module, ids = Tied(), torch.tensor([[1, 4, 4, 9]])
    ir = Ir.from_torch(module, (ids,), training=True,
                       optimizer=Optimizer("adam", learning_rate=0.1))
    ir.verify()
    found = updates(ir)
    tied = [w for w in found if w in ("embed.weight", "head.weight")]
    assert len(tied) == 1 and len(found) == 3  # the table once, mix's weight and bias
    table = ir.main_graph.tensor(tied[0])
    assert {op.type.name for op in table.consumers} - {"Sub", "Mul", "Cast"}  # read by the step
    values = run(ir, ids)
    expected = torch_step(module, ids, "adam")
    np.testing.assert_allclose(values[found[tied[0]]], expected["embed.weight"], rtol=1e-5,
                               atol=1e-6)


def test_an_optimizer_needs_a_training_step_and_holds_the_learning_rate():
    module, x = mlp()
    with pytest.raises(ModelImportError, match="training"):
        Ir.from_torch(module, (x,), optimizer=Optimizer("adam"))
    with pytest.raises(ModelImportError, match="learning_rate"):
        Ir.from_torch(module, (x,), training=True, optimizer=Optimizer("adam"),
                      learning_rate=0.5)
