"""ATen batch norms: inference becomes ONNX BatchNormalization, a training-mode batch norm
a decomposition into ops with layout rules; both give torch's values."""

from __future__ import annotations

import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fold_oracle import fold_all  # noqa: E402

from popart_unwind.ir import Ir  # noqa: E402
from popart_unwind.ops.coverage import ops_without_rule  # noqa: E402


def test_an_inference_batch_norm_is_onnx_batch_normalization():
    torch.manual_seed(0)
    norm = torch.nn.BatchNorm2d(3).eval()
    norm.running_mean.uniform_()
    norm.running_var.uniform_(1, 2)
    norm.weight.data.uniform_()
    norm.bias.data.uniform_()
    x = torch.randn(2, 3, 4, 5)
    ir = Ir.from_torch(norm, (x,))
    assert collections.Counter(op.type.name for op in ir.main_graph.ops) == \
        {"BatchNormalization": 1}
    assert ops_without_rule(ir) == {}
    [y] = fold_all(ir, {ir.main_graph.inputs[0].id: x.numpy()})
    np.testing.assert_allclose(y, norm(x).detach().numpy(), atol=1e-6)


class Functional(torch.nn.Module):
    """The functional training batch norm a training step's export holds."""

    def __init__(self, affine: bool, training: bool = True) -> None:
        super().__init__()
        self.training_mode = training
        torch.manual_seed(1)
        self.weight = torch.nn.Parameter(torch.rand(3) + 0.5) if affine else None
        self.bias = torch.nn.Parameter(torch.rand(3)) if affine else None
        self.register_buffer("mean", torch.rand(3))
        self.register_buffer("var", torch.rand(3) + 1)

    def forward(self, x):
        return torch.ops.aten._native_batch_norm_legit_functional(
            x, self.weight, self.bias, self.mean, self.var, self.training_mode, 0.1, 1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_a_training_batch_norm_decomposes_with_torchs_five_results(affine):
    module = Functional(affine)
    x = torch.randn(2, 3, 4, 5)
    ir = Ir.from_torch(module, (x,))
    names = collections.Counter(op.type.name for op in ir.main_graph.ops)
    assert names["ReduceMean"] == 2 and "BatchNormalization" not in names
    assert ops_without_rule(ir) == {}
    values = fold_all(ir, {ir.main_graph.inputs[0].id: x.numpy()})
    expected = [t.detach().numpy() for t in module(x)]
    assert [v.shape for v in values] == [e.shape for e in expected]
    for value, reference in zip(values, expected, strict=True):
        np.testing.assert_allclose(value, reference, atol=1e-6)


def test_a_functional_batch_norm_outside_training_uses_the_running_statistics():
    module = Functional(affine=True, training=False)
    x = torch.randn(2, 3, 4, 5)
    ir = Ir.from_torch(module, (x,))
    assert "BatchNormalization" in {op.type.name for op in ir.main_graph.ops}
    values = fold_all(ir, {ir.main_graph.inputs[0].id: x.numpy()})
    expected = [t.detach().numpy() for t in module(x)]
    for value, reference in zip(values, expected, strict=True):
        assert value.shape == reference.shape
        np.testing.assert_allclose(value, reference, atol=1e-6)
