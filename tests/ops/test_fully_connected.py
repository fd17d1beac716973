"""Fully connected layers recovered from a training step's matmuls: hand-built passes in
PyTorch's and Gemm's forms, sibling forward matmuls that must stay apart, and the tiny BERT
training step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from popart_unwind import transforms
from popart_unwind.ir import Builder, Ir, TensorType
from popart_unwind.layers import FullyConnectedLayer, fully_connected_layers
from popart_unwind.layers.operand_views import permutation_form
from popart_unwind.machine.interface import MatmulPartition, MatmulPlan
from popart_unwind.memory import Chain
from popart_unwind.ops import REGISTRY
from popart_unwind.options import SessionOptions


def weight(b: Builder, shape: tuple[int, ...], name: str) -> str:
    return b.add_initialized_input_tensor(np.zeros(shape, np.float32), name)


def transposed(b: Builder, tensor: str) -> str:
    return b.ai_onnx.transpose([tensor], perm=[1, 0])


def named_ops(ir: Ir) -> dict:
    return {op.name: op for graph in ir.graphs for op in graph.ops}


def passes_of(layer: FullyConnectedLayer) -> list[tuple[str, str]]:
    return [(op.name, layer.axes_of(op)) for op in layer.ops()]


def linear_training(b: Builder, x: str, w: str, dy: str, tag: str = "") -> None:
    """PyTorch's Linear and its gradients: y = x @ w^T, dx = dy @ w, dw = dy^T @ x."""
    for name, inputs in ((f"fwd{tag}", [x, transposed(b, w)]), (f"bwd{tag}", [dy, w]),
                         (f"wu{tag}", [transposed(b, dy), x])):
        b.add_output_tensor(b.ai_onnx.matmul(inputs, name=name))


def pytorch_layer(rows: int, inner: int, cols: int) -> Ir:
    b = Builder()
    x = b.add_input_tensor("float32", (rows, inner), "x")
    dy = b.add_input_tensor("float32", (rows, cols), "dy")
    linear_training(b, x, weight(b, (cols, inner), "w"), dy)
    return b.ir()


def check_dims(layer: FullyConnectedLayer) -> None:
    """Each op's own product is its axes' view of the layer's cube."""
    for op in layer.ops():
        plan = MatmulPlan(layer.cube, MatmulPartition(1, 1, 1, 1), layer.axes_of(op))
        assert plan.dims == REGISTRY.layout_rule(op).dims(op), op.debug_name()


# -- hand-built graphs --------------------------------------------------------------------
def test_pytorch_linear_passes_form_one_layer():
    [layer] = fully_connected_layers(pytorch_layer(8, 6, 4))
    assert passes_of(layer) == [("fwd", "mkn"), ("bwd", "mnk"), ("wu", "nmk")]
    assert layer.cube == (1, 8, 6, 4)
    assert layer.axes == tuple((op.id, layer.axes_of(op)) for op in layer.ops())
    check_dims(layer)


def test_gemm_forward_with_weight_update_as_x_transposed_times_dy():
    b = Builder()
    x = b.add_input_tensor("float32", (8, 6), "x")
    dy = b.add_input_tensor("float32", (8, 4), "dy")
    w, bias = weight(b, (4, 6), "w"), weight(b, (4,), "bias")
    b.add_output_tensor(b.ai_onnx.gemm([x, w, bias], transB=1, name="fwd"))
    b.add_output_tensor(b.ai_onnx.matmul([dy, w], name="bwd"))
    b.add_output_tensor(b.ai_onnx.gemm([x, dy], transA=1, name="wu"))  # X^T @ dY
    [layer] = fully_connected_layers(b.ir())
    assert passes_of(layer) == [("fwd", "mkn"), ("bwd", "mnk"), ("wu", "kmn")]
    assert layer.cube == (1, 8, 6, 4)
    check_dims(layer)


def test_square_sizes_still_pair_each_pass_with_its_role():
    [layer] = fully_connected_layers(pytorch_layer(8, 8, 8))
    assert passes_of(layer) == [("fwd", "mkn"), ("bwd", "mnk"), ("wu", "nmk")]
    check_dims(layer)


def test_forward_without_input_gradient_keeps_its_weight_update():
    b = Builder()
    x = b.add_input_tensor("float32", (8, 6), "x")
    dy = b.add_input_tensor("float32", (8, 4), "dy")
    w = weight(b, (4, 6), "w")
    b.add_output_tensor(b.ai_onnx.matmul([x, transposed(b, w)], name="fwd"))
    b.add_output_tensor(b.ai_onnx.matmul([transposed(b, dy), x], name="wu"))
    [layer] = fully_connected_layers(b.ir())
    assert layer.bwd is None
    assert passes_of(layer) == [("fwd", "mkn"), ("wu", "nmk")]


@pytest.mark.parametrize("size", [(8, 6, 4), (8, 8, 8)], ids=["rectangular", "square"])
def test_projections_reading_one_input_are_not_passes_of_each_other(size):
    rows, inner, cols = size
    b = Builder()
    x = b.add_input_tensor("float32", (rows, inner), "x")
    for name in "qkv":
        w = transposed(b, weight(b, (cols, inner), f"w{name}"))
        b.add_output_tensor(b.ai_onnx.matmul([x, w], name=name))
    assert fully_connected_layers(b.ir()) == []


@pytest.mark.parametrize("size", [(8, 6, 4), (8, 8, 8)], ids=["rectangular", "square"])
def test_matmuls_sharing_a_weight_are_not_passes_of_each_other(size):
    rows, inner, cols = size
    b = Builder()
    w = weight(b, (inner, cols), "w")
    for name in ("first", "second"):
        x = b.add_input_tensor("float32", (rows, inner), f"x_{name}")
        b.add_output_tensor(b.ai_onnx.matmul([x, w], name=name))
    assert fully_connected_layers(b.ir()) == []


def projections_training_step() -> Ir:
    """Q, K and V reading one x, with their gradients in reverse order."""
    b = Builder()
    x = b.add_input_tensor("float32", (8, 8), "x")
    weights = {name: weight(b, (8, 8), f"w{name}") for name in "qkv"}
    for name in "qkv":
        b.add_output_tensor(b.ai_onnx.matmul([x, transposed(b, weights[name])], name=name))
    for name in "vkq":  # the backward pass runs the other way round
        dy = b.add_input_tensor("float32", (8, 8), f"dy{name}")
        b.add_output_tensor(b.ai_onnx.matmul([transposed(b, dy), x], name=f"wu_{name}"))
        b.add_output_tensor(b.ai_onnx.matmul([dy, weights[name]], name=f"bwd_{name}"))
    return b.ir()


def test_projections_of_one_input_each_get_their_own_passes():
    """Each weight update reads x like every other; the one of the layer is the one
    reading the output gradient its backward pass reads."""
    layers = fully_connected_layers(projections_training_step())
    assert [passes_of(layer) for layer in layers] == [
        [(name, "mkn"), (f"bwd_{name}", "mnk"), (f"wu_{name}", "nmk")] for name in "qkv"]


def test_layers_do_not_depend_on_the_hash_seed(tmp_path):
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import test_fully_connected as t; "
              "print([t.passes_of(layer) for layer in "
              "t.fully_connected_layers(t.projections_training_step())])")
    # run outside the source tree: the installed package, not the sources, is imported
    outputs = {subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)],
                              env={**os.environ, "PYTHONHASHSEED": seed}, check=True,
                              capture_output=True, text=True, cwd=tmp_path).stdout
               for seed in ("0", "1", "12345")}
    assert len(outputs) == 1


def test_forward_matmuls_sharing_a_weight_each_get_their_own_passes():
    b = Builder()
    w = weight(b, (8, 8), "w")
    inputs = {tag: b.add_input_tensor("float32", (8, 8), f"x{tag}") for tag in "12"}
    for tag in "12":
        b.add_output_tensor(b.ai_onnx.matmul([inputs[tag], transposed(b, w)], name=f"fwd{tag}"))
    for tag in "21":
        dy = b.add_input_tensor("float32", (8, 8), f"dy{tag}")
        b.add_output_tensor(b.ai_onnx.matmul([dy, w], name=f"bwd{tag}"))
        b.add_output_tensor(b.ai_onnx.matmul([transposed(b, dy), inputs[tag]],
                                             name=f"wu{tag}"))
    layers = fully_connected_layers(b.ir())
    assert [passes_of(layer) for layer in layers] == [
        [(f"fwd{tag}", "mkn"), (f"bwd{tag}", "mnk"), (f"wu{tag}", "nmk")] for tag in "12"]


def test_batched_operands_are_followed_through_reshapes_and_transposes():
    """A Linear on [batch, seq, features]: the weight update reads both activations
    flattened, the output gradient transposed."""
    b = Builder()
    x = b.add_input_tensor("float32", (2, 4, 6), "x")
    dy = b.add_input_tensor("float32", (2, 4, 3), "dy")
    w = weight(b, (3, 6), "w")
    flat_x = b.ai_onnx.reshape([x, np.array([8, 6], np.int64)])
    flat_dy = b.ai_onnx.reshape([dy, np.array([8, 3], np.int64)])
    b.add_output_tensor(b.ai_onnx.matmul([x, transposed(b, w)], name="fwd"))
    b.add_output_tensor(b.ai_onnx.matmul([dy, w], name="bwd"))
    b.add_output_tensor(b.ai_onnx.matmul([transposed(b, flat_dy), flat_x], name="wu"))
    [layer] = fully_connected_layers(b.ir())
    assert passes_of(layer) == [("fwd", "mkn"), ("bwd", "mnk"), ("wu", "nmk")]
    assert layer.cube == (1, 8, 6, 3)
    check_dims(layer)


def test_layers_stay_within_their_graph():
    b = Builder()
    x = b.add_input_tensor("float32", (8, 6), "x")
    dy = b.add_input_tensor("float32", (8, 4), "dy")
    w = weight(b, (4, 6), "w")
    b.add_output_tensor(b.ai_onnx.matmul([x, transposed(b, w)], name="outer"))
    sub = b.create_subgraph_builder("passes")
    inner = {name: sub.add_input_tensor("float32", shape, name)
             for name, shape in (("x", (8, 6)), ("w", (4, 6)), ("dy", (8, 4)))}
    linear_training(sub, inner["x"], inner["w"], inner["dy"], tag="_inner")
    for out in b.call(sub, [x, w, dy], num_outputs=3):
        b.add_output_tensor(out)
    [layer] = fully_connected_layers(b.ir())
    assert {op.graph.id for op in layer.ops()} == {"passes"}
    assert [name for name, _ in passes_of(layer)] == ["fwd_inner", "bwd_inner", "wu_inner"]


def test_axes_of_an_op_outside_the_layer_is_an_error():
    ir = pytorch_layer(8, 6, 4)
    [layer] = fully_connected_layers(ir)
    transpose = next(op for op in ir.main_graph.ops if op.is_type("Transpose"))
    with pytest.raises(ValueError, match="no pass"):
        layer.axes_of(transpose)


# -- the tiny BERT training step ---------------------------------------------------------------
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


def import_bert(training: bool, model: str = "bert") -> Ir:
    """The tiny BERT (masked LM), or another of tests/models, imported and transformed as
    benchmarks/models.py does."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if str(MODELS_DIR) not in sys.path:
        sys.path.insert(0, str(MODELS_DIR))
    import make_models

    module, args = make_models.tiny_model(model)
    ir = Ir.from_torch(module, args, training=training,
                       options=SessionOptions(enable_unwind_layouts=False))
    transforms.run_pipeline(ir)
    return ir


@pytest.fixture(scope="module")
def bert() -> tuple[Ir, list[FullyConnectedLayer]]:
    ir = import_bert(training=True)
    return ir, fully_connected_layers(ir)


def weight_read(op) -> str | None:
    """The producer-less weight a MatMul reads, transposed, as its rhs (a Linear layer)."""
    if not op.is_type("MatMul"):
        return None
    rhs = op.input(1)
    if rhs.producer is None or not rhs.producer.is_type("Transpose"):
        return None
    source = rhs.producer.input(0)
    usable = source.producer is None and source.tensor_type is TensorType.VARIABLE
    return source.id if usable else None


def update_reads(tensor, weight_id: str) -> bool:
    """Whether ``tensor`` flows, one consumer after another, into the graph output that
    updates ``weight_id`` (the SGD step reads the old weight)."""
    for _ in range(8):
        if tensor.is_graph_output():
            return any(t.id == weight_id for t in tensor.producer.inputs)
        if len(tensor.consumers) != 1:
            return False
        tensor = tensor.consumers[0].output(0)
    return False


def output_gradient_of(layer: FullyConnectedLayer, op):
    """The base of the output gradient ``op``, a pass of ``layer``, reads (through views)."""
    tensor = op.input(0 if layer.axes_of(op) in ("mnk", "nmk") else 1)
    while tensor.producer is not None and tensor.producer.type.name in ("Reshape",
                                                                        "Transpose"):
        tensor = tensor.producer.input(0)
    return tensor


def test_bert_linear_layers_have_both_passes(bert):
    ir, layers = bert
    by_forward = {layer.fwd.id: layer for layer in layers}
    linear = [op for op in ir.main_graph.schedule() if weight_read(op)]
    assert len(linear) == 14  # Q, K, V, attention output, 2 feed-forward per layer; 2 heads
    for op in linear:
        layer = by_forward[op.id]
        assert layer.bwd is not None and layer.wu is not None, op.debug_name()
        assert update_reads(layer.wu.output(0), weight_read(op)), op.debug_name()
    # the loss sums the logits: the decoder's output gradient is a constant that constant
    # folding copied for each pass; the copies hold equal values, so they are one tensor
    decoder = next(layer for layer in layers
                   if weight_read(layer.fwd) == "model.cls.predictions.decoder.weight")
    bwd_gradient, wu_gradient = (output_gradient_of(decoder, op)
                                 for op in (decoder.bwd, decoder.wu))
    assert bwd_gradient is not wu_gradient
    assert bwd_gradient.tensor_type is wu_gradient.tensor_type is TensorType.CONST
    assert "output" in decoder.producerless and "rhs" in decoder.producerless


def test_bert_attention_products_form_layers(bert):
    ir, layers = bert
    grouped = [layer for layer in layers if layer.cube[0] > 1]
    assert len(grouped) == 4  # scores and context of 2 encoder layers
    assert all(layer.bwd is not None and layer.wu is not None for layer in grouped)
    in_layers = {op.id for layer in layers for op in layer.ops()}
    for op in ir.main_graph.ops:
        dims = REGISTRY.layout_rule(op).dims(op) if op.is_type("MatMul") else None
        if dims is not None and dims[0] > 1:
            assert op.id in in_layers, op.debug_name()


def test_bert_layers_are_disjoint_and_share_their_cube(bert):
    _, layers = bert
    ids = [op.id for layer in layers for op in layer.ops()]
    assert len(ids) == len(set(ids))
    for layer in layers:
        assert layer.axes_of(layer.fwd) == "mkn"
        check_dims(layer)


def test_bert_inference_has_no_layer():
    assert fully_connected_layers(import_bert(training=False)) == []


def by_names(layers: list[FullyConnectedLayer]) -> list[list[tuple]]:
    """Each layer as its ops' names, the names of the tensors they read, and their axes."""
    return [[(op.name, tuple(t.id for t in op.inputs), layer.axes_of(op)) for op in layer.ops()]
            for layer in layers]


def test_bert_layers_are_deterministic(bert):
    _, layers = bert
    again = fully_connected_layers(import_bert(training=True))
    assert by_names(again) == by_names(layers)


# -- the permutation a view makes, in normal form -----------------------------------------------
@st.composite
def views(draw, shape):
    """A chain of DimShuffles and Reshapes that split a dimension or merge neighbours."""
    chain = Chain(shape)
    for _ in range(draw(st.integers(0, 5))):
        current = list(chain.out_shape)
        kind = draw(st.sampled_from(["shuffle", "split", "merge"]))
        if kind == "shuffle":
            chain.dim_shuffle(draw(st.permutations(range(len(current)))))
        elif kind == "split":
            axis = draw(st.integers(0, len(current) - 1))
            factors = [f for f in range(1, current[axis] + 1) if current[axis] % f == 0]
            outer = draw(st.sampled_from(factors))
            chain.reshape((*current[:axis], outer, current[axis] // outer,
                           *current[axis + 1:]))
        elif len(current) > 1:
            axis = draw(st.integers(0, len(current) - 2))
            chain.reshape((*current[:axis], current[axis] * current[axis + 1],
                           *current[axis + 2:]))
    return chain


def same_elements(first: Chain, second: Chain) -> bool:
    probe = np.arange(int(np.prod(first.in_shape))).reshape(first.in_shape)
    return np.array_equal(first.apply(probe).reshape(-1), second.apply(probe).reshape(-1))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_equal_forms_are_equal_permutations(data):
    shape = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1,
                                     max_size=4)))
    first = data.draw(views(shape))
    if data.draw(st.booleans()):  # the same permutation written another way
        detour = data.draw(views(first.out_shape))
        second = first.then(detour).then(detour.mirror())
    else:
        second = data.draw(views(shape))
    flat = (int(np.prod(shape)),)
    first, second = (c.then(Chain(c.out_shape).reshape(flat)) for c in (first, second))
    first_form, second_form = permutation_form(first), permutation_form(second)
    # a reshape cutting a transposed tensor across its axes has no form (mixed radix)
    assume(first_form is not None and second_form is not None)
    assert (first_form == second_form) == same_elements(first, second)


def test_a_transpose_of_merged_heads_is_the_split_shuffle_and_merge():
    """Two ways to view [2, 16, 2*64] as [4, 64, 16] per head, transposed: their canonical
    chains differ, their permutations do not."""
    heads = Chain((2, 16, 128)).reshape((2, 16, 2, 64)).dim_shuffle((0, 2, 1, 3)) \
        .reshape((4, 16, 64)).dim_shuffle((0, 2, 1))
    merged = Chain((2, 16, 128)).dim_shuffle((0, 2, 1)).reshape((4, 64, 16))
    assert permutation_form(heads) == permutation_form(merged)
    assert same_elements(heads, merged)
    other = Chain((2, 16, 128)).reshape((4, 16, 64)).dim_shuffle((0, 2, 1))
    assert permutation_form(heads) != permutation_form(other)


def test_every_matmul_of_the_gpt2_training_step_is_in_a_whole_layer():
    """GPT-2 splits one projection into Q, K and V and views each per head; the backward
    passes read them transposed another way, which only the permutation form matches."""
    ir = import_bert(training=True, model="gpt2")
    layers = fully_connected_layers(ir)
    matmuls = [op for op in ir.main_graph.ops if op.is_type("MatMul")]
    assert sorted(op.id for layer in layers for op in layer.ops()) == \
        sorted(op.id for op in matmuls)
    assert all(layer.bwd is not None and layer.wu is not None for layer in layers)
