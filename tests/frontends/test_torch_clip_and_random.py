"""ATen ops that the models' training steps use and ONNX spells otherwise: clamp → Clip,
ne → Not(Equal), rsqrt → Reciprocal(Sqrt), bernoulli → RandomUniformLike, Less, Cast."""

from __future__ import annotations

import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from popart_unwind.ir import Ir, Tensor  # noqa: E402
from popart_unwind.ops.coverage import ops_without_rule  # noqa: E402
from popart_unwind.ops.registry import REGISTRY  # noqa: E402


def fold_all(ir: Ir, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The main graph's outputs computed with each op's numpy fold (a test oracle)."""
    values: dict[str, np.ndarray] = dict(inputs)
    graph = ir.main_graph
    for tensor in graph.producerless_tensors():
        if tensor.data is not None:
            values[tensor.id] = np.asarray(tensor.data)
    for op in graph.schedule():
        constants = [values.get(t.id) if t is not None else None
                     for t in [op.input(i) if op.has_input(i) else None
                               for i in range(max(op.input_map(), default=-1) + 1)]]
        result = REGISTRY.lookup(op).fold(op, constants)
        assert result is not None, op.debug_name()
        for tensor, value in zip(op.outputs, result, strict=True):
            values[tensor.id] = values[value.id] if isinstance(value, Tensor) else value
    return [values[t.id] for t in graph.outputs]


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
