"""ATen ops that the models' training steps use and ONNX spells otherwise: clamp → Clip,
ne → Not(Equal), rsqrt → Reciprocal(Sqrt), bernoulli → RandomUniformLike, Less, Cast."""

from __future__ import annotations

import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fold_oracle import fold_all  # noqa: E402

from popart_unwind.ir import Ir  # noqa: E402
from popart_unwind.ops.coverage import ops_without_rule  # noqa: E402
from popart_unwind.ops.registry import REGISTRY  # noqa: E402


class Bounded(torch.nn.Module):
    def forward(self, x):
        clipped = torch.clamp(x, min=-0.5, max=0.75) + torch.clamp(x, max=0.25) \
            + torch.clamp_min(x, 0.1)
        return clipped * (x != 0.5).float() + torch.rsqrt(x.abs() + 1.0)


def test_clamp_ne_and_rsqrt_become_onnx_ops_with_rules_and_the_same_values():
    x = torch.tensor([[-1.0, 0.5, 0.2], [0.3, 2.0, -0.1]])
    ir = Ir.from_torch(Bounded(), (x,))
    names = collections.Counter(op.type.name for op in ir.main_graph.ops)
    assert names["Clip"] == 3 and names["Not"] == 1 and names["Equal"] == 1
    assert names["Reciprocal"] == 1 and names["Sqrt"] == 1
    assert ops_without_rule(ir) == {}
    [input_id] = [t.id for t in ir.main_graph.inputs]
    [value] = fold_all(ir, {input_id: x.numpy()})
    np.testing.assert_allclose(value, Bounded()(x).numpy(), rtol=1e-6)


class Coin(torch.nn.Module):
    def forward(self, x):
        return torch.ops.aten.bernoulli.p(x, 0.25) + x


def test_bernoulli_is_a_uniform_draw_compared_with_p():
    ir = Ir.from_torch(Coin(), (torch.zeros(4, 5),))
    ops = {op.type.name: op for op in ir.main_graph.ops}
    assert {"RandomUniformLike", "Less", "Cast"} <= set(ops)
    assert ops_without_rule(ir) == {}
    draw = ops["RandomUniformLike"]
    assert draw.output(0).shape == (4, 5) and REGISTRY.draws_random(draw)
    less = ops["Less"]
    assert less.input(0) is draw.output(0)
    assert float(np.asarray(less.input(1).data)) == 0.25
    assert ops["Cast"].output(0).dtype == "float32"
