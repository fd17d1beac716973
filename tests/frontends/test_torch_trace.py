"""Tracing PyTorch modules into whole-graph programs (forward pass and training step).

torch and transformers are optional: the tests that need them are skipped without them, and
the ones that check the package works without torch run everywhere.
"""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from popart_unwind.errors import ModelImportError

MAKE_MODELS = Path(__file__).resolve().parents[1] / "models" / "make_models.py"


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)


def test_importing_the_package_and_tracer_does_not_import_torch() -> None:
    result = _run_python(
        "import sys, popart_unwind, popart_unwind.frontends.torch_trace\n"
        "print('torch' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_missing_torch_is_a_model_import_error_with_the_install_hint() -> None:
    result = _run_python(
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "from popart_unwind.errors import ModelImportError\n"
        "from popart_unwind.frontends.torch_trace import trace_forward\n"
        "try:\n"
        "    trace_forward(object(), ())\n"
        "except ModelImportError as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "pip install '.[torch]'" in result.stdout


# -- with torch -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trace(torch: Any) -> Any:
    from popart_unwind.frontends import torch_trace

    return torch_trace


@pytest.fixture
def mlp(torch: Any) -> tuple[Any, Any]:
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
        torch.nn.Linear(16, 4),
    )
    return module, torch.randn(3, 8)


def _kinds(specs: Any) -> list[str]:
    return [spec.kind.name for spec in specs]


def _graph_text(program: Any) -> str:
    return str(program.graph)


def test_mlp_forward_program_matches_the_module(torch: Any, trace: Any, mlp: Any) -> None:
    module, x = mlp
    program = trace.trace_forward(module, x)
    kinds = _kinds(program.graph_signature.input_specs)
    assert kinds == ["PARAMETER"] * 6 + ["BUFFER"] * 3 + ["USER_INPUT"]
    assert module.training, "the module's own train/eval flag is restored"
    module.eval()
    torch.testing.assert_close(program.module()(x), module(x))
    assert trace.aten_op_counts(program)["aten.addmm.default"] == 2


def test_mlp_training_step_is_one_sgd_step(torch: Any, trace: Any, mlp: Any) -> None:
    module, x = mlp
    before = copy.deepcopy(module.state_dict())
    program = trace.trace_training_step(module, (x,), learning_rate=0.1)
    for name, value in module.state_dict().items():  # tracing ran on fake tensors
        assert torch.equal(value, before[name]), name

    signature = program.graph_signature
    assert _kinds(signature.output_specs) == ["BUFFER_MUTATION"] * 3 + ["USER_OUTPUT"] * 7
    updated = trace.updated_parameters(program)
    assert list(updated) == [name for name, _ in module.named_parameters()]
    assert list(updated.values()) == list(signature.user_outputs[1:])

    reference = copy.deepcopy(module)
    loss = reference(x).sum()
    loss.backward()
    outputs = program.module()(x)
    torch.testing.assert_close(outputs[0], loss)
    for (name, param), new in zip(reference.named_parameters(), outputs[1:], strict=True):
        torch.testing.assert_close(new, param - 0.1 * param.grad, msg=name)


def test_a_step_traced_without_its_update_gives_the_gradients(
        torch: Any, trace: Any, mlp: Any) -> None:
    module, x = mlp
    program = trace.trace_training_step(module, (x,), update=False)
    signature = program.graph_signature
    assert _kinds(signature.output_specs) == ["BUFFER_MUTATION"] * 3 + ["USER_OUTPUT"] * 7
    gradients = trace.parameter_gradients(program)
    assert list(gradients) == [name for name, _ in module.named_parameters()]
    assert list(gradients.values()) == list(signature.user_outputs[1:])
    reference = copy.deepcopy(module)
    loss = reference(x).sum()
    loss.backward()
    outputs = program.module()(x)
    torch.testing.assert_close(outputs[0], loss)
    for (name, param), grad in zip(reference.named_parameters(), outputs[1:], strict=True):
        torch.testing.assert_close(grad, param.grad, msg=name)


def test_training_graph_has_backward_ops_before_and_after_decomposition(
        trace: Any, mlp: Any) -> None:
    module, x = mlp
    raw = trace.aten_op_counts(trace.trace_training_step(module, x, decompose=False))
    assert raw["aten.native_batch_norm_backward.default"] == 1
    assert raw["aten.threshold_backward.default"] == 1
    lowered = trace.aten_op_counts(trace.trace_training_step(module, x))
    assert lowered["aten.mm.default"] >= 3  # the weight and input gradients of the Linears
    assert not any("backward" in op for op in lowered)  # all lowered to core ATen


def test_custom_loss_and_frozen_parameters(torch: Any, trace: Any, mlp: Any) -> None:
    module, x = mlp
    module[0].weight.requires_grad_(False)
    program = trace.trace_training_step(module, x, loss_fn=lambda out: (out ** 2).mean())
    updated = trace.updated_parameters(program)
    assert "0.weight" not in updated and len(updated) == 5
    assert trace.aten_op_counts(program)["aten.pow.Tensor_Scalar"] >= 1


def test_tracing_is_deterministic(trace: Any, mlp: Any) -> None:
    module, x = mlp
    assert _graph_text(trace.trace_forward(module, x)) == _graph_text(
        trace.trace_forward(module, x))
    assert _graph_text(trace.trace_training_step(module, x)) == _graph_text(
        trace.trace_training_step(module, x))


def test_bad_arguments_are_model_import_errors(torch: Any, trace: Any, mlp: Any) -> None:
    module, x = mlp
    with pytest.raises(ModelImportError, match=r"nn\.Module"):
        trace.trace_forward(lambda t: t, (x,))
    with pytest.raises(ModelImportError, match="example_args"):
        trace.trace_forward(module, {"x": x})
    with pytest.raises(ModelImportError, match="no trainable parameter"):
        trace.trace_training_step(torch.nn.ReLU(), x)
    with pytest.raises(ModelImportError, match="single element"):
        trace.trace_training_step(module, x, loss_fn=lambda out: out)
    with pytest.raises(ModelImportError, match=r"torch\.export"):
        trace.trace_forward(module, (x, x))  # the module takes one input


# -- tiny BERT, built by tests/models/make_models.py ------------------------------------

@pytest.fixture(scope="module")
def make_models(torch: Any) -> Any:
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("make_models", MAKE_MODELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bert(make_models: Any) -> tuple[Any, tuple[Any, ...]]:
    return make_models.tiny_model("bert")


@pytest.fixture(scope="module")
def bert_training(trace: Any, bert: Any) -> Any:
    return trace.trace_training_step(*bert)


def test_tiny_models_are_seeded(torch: Any, make_models: Any) -> None:
    first, args = make_models.tiny_model("gpt2")
    second, again = make_models.tiny_model("gpt2")
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    assert all(torch.equal(a, b) for a, b in zip(args, again, strict=True))


def test_bert_forward(torch: Any, trace: Any, bert: Any) -> None:
    module, args = bert
    program = trace.trace_forward(module, args)
    signature = program.graph_signature
    kinds = _kinds(signature.input_specs)
    # one PARAMETER per name: the MLM head's decoder weight and bias are tied to the word
    # embedding and the head's bias, so two tensors have two names each
    named = list(module.named_parameters(remove_duplicate=False))
    assert len(named) == len(list(module.parameters())) + 2
    assert kinds.count("PARAMETER") == len(named)
    assert kinds[-2:] == ["USER_INPUT", "USER_INPUT"]  # input_ids, attention_mask
    counts = trace.aten_op_counts(program)
    assert counts["aten.view.default"] > counts["aten.addmm.default"] > 0
    torch.testing.assert_close(program.module()(*args), module(*args))


def test_bert_training_step(trace: Any, bert: Any, bert_training: Any) -> None:
    module, _ = bert
    signature = bert_training.graph_signature
    names = [name for name, _ in module.named_parameters()]
    assert trace.updated_parameters(bert_training) == dict(
        zip(names, signature.user_outputs[1:], strict=True))
    shapes = {node.name: tuple(node.meta["val"].shape) for node in bert_training.graph.nodes
              if "val" in node.meta and hasattr(node.meta["val"], "shape")}
    for name, param in module.named_parameters():
        assert shapes[trace.updated_parameters(bert_training)[name]] == tuple(param.shape)
    assert shapes[signature.user_outputs[0]] == ()  # the loss
    counts = trace.aten_op_counts(bert_training)
    assert counts["aten.mm.default"] > 0  # matmul gradients
    assert counts["aten.index_put.default"] == 3  # the three embedding tables' gradients


def test_bert_training_trace_is_deterministic(trace: Any, bert: Any, bert_training: Any) -> None:
    assert _graph_text(trace.trace_training_step(*bert)) == _graph_text(bert_training)


def test_transformers_patch_is_scoped(trace: Any, bert: Any) -> None:
    import transformers.masking_utils as masking

    original = masking.is_tracing
    with trace.transformers_tracing_patch():
        assert masking.is_tracing() is True
    assert masking.is_tracing is original
