"""The PyTorch front end: torch.export graphs → IR, forward and training steps."""

from __future__ import annotations

import collections

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from popart_unwind.frontends.torch_import import exported_program_to_ir  # noqa: E402
from popart_unwind.frontends.torch_trace import trace_forward  # noqa: E402
from popart_unwind.ir import Ir, TensorType  # noqa: E402
from popart_unwind.ops.shape_inference import check_shapes  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x))).reshape(2, 3, 4).transpose(1, 2)


def op_names(ir: Ir) -> collections.Counter:
    return collections.Counter(op.type.name for op in ir.main_graph.ops)


def test_forward_graph_speaks_onnx_and_keeps_torch_shapes():
    ir = Ir.from_torch(Mlp(), (torch.randn(6, 8),))
    ir.verify()
    check_shapes(ir)
    names = op_names(ir)
    # addmm is decomposed as PopART decomposes Gemm: MatMul then a broadcast Add
    assert names["MatMul"] == 2 and names["Add"] == 2 and names["Gelu"] == 1
    assert names["Transpose"] >= 3 and names["Reshape"] == 1
    graph = ir.main_graph
    assert graph.tensor("up.weight").tensor_type is TensorType.VARIABLE
    assert np.array_equal(graph.tensor("up.weight").data, Mlp().up.weight.detach().numpy())
    (x,) = graph.inputs
    assert x.tensor_type is TensorType.STREAM and x.shape == (6, 8)
    assert [t.shape for t in graph.outputs] == [(2, 4, 3)]


def test_training_step_holds_forward_backward_and_one_update_per_parameter():
    module = Mlp()
    ir = Ir.from_torch(module, (torch.randn(6, 8),), training=True, learning_rate=0.5)
    ir.verify()
    check_shapes(ir)
    outputs = ir.main_graph.outputs
    parameters = dict(module.named_parameters())
    assert len(outputs) == 1 + len(parameters)  # the loss, then each updated parameter
    assert outputs[0].shape == ()
    assert sorted(t.shape for t in outputs[1:]) == sorted(
        tuple(p.shape) for p in parameters.values())
    # forward 2; backward: both weight gradients and the gradient into `down` (none into x)
    assert op_names(ir)["MatMul"] == 5


def test_static_values_become_constants_and_scalars_take_the_tensor_dtype():
    class Masked(torch.nn.Module):
        def forward(self, x):
            positions = torch.arange(x.shape[1])
            return torch.where(positions < 3, x * 2.0, torch.zeros_like(x))

    ir = Ir.from_torch(Masked(), (torch.randn(2, 5),))
    ir.verify()
    check_shapes(ir)
    constants = [t for t in ir.main_graph.tensors if t.tensor_type is TensorType.CONST]
    assert any(np.array_equal(t.data, np.arange(5)) for t in constants)
    assert all(t.dtype == "float32" for t in constants if t.data.dtype.kind == "f")


def test_unknown_aten_ops_stay_opaque_with_torch_shapes():
    class Sorting(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x, dim=1).values + 1.0

    ir = Ir.from_torch(Sorting(), (torch.randn(3, 4),))
    ir.verify()
    opaque = [op for op in ir.main_graph.ops if op.type.domain == "aten"]
    assert [op.type.name for op in opaque] == ["sort"]
    assert [t.shape for t in opaque[0].outputs] == [(3, 4), (3, 4)]


def test_conversion_is_deterministic():
    program = trace_forward(Mlp(), (torch.randn(6, 8),))
    assert exported_program_to_ir(program).to_json() == exported_program_to_ir(program).to_json()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_layer_norms_statistics_keep_the_type_aten_gives_them(dtype):
    """ATen's native_layer_norm returns its mean and inverse deviation in the input's
    type; the LayerNormalization it becomes says so (``stash_type``)."""
    norm = torch.nn.LayerNorm(8).to(dtype)
    ir = Ir.from_torch(norm, (torch.randn(2, 8, dtype=dtype),), training=True)
    check_shapes(ir)
    [op] = [op for op in ir.main_graph.ops if op.type.name == "LayerNormalization"]
    assert {op.output(index).dtype for index in (1, 2)} == {str(dtype).split(".")[1]}
