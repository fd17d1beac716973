"""The six tiny head models (BERT masked LM, GPT-2 LM, ViT and ResNet classifiers, T5
conditional generation, Llama causal LM), built here with random weights, through both front
ends.

Each model must import (ONNX: forward and, where the exporter allows, training; PyTorch:
forward and training), verify, canonicalize to a fixpoint idempotently, and run through the
transform pipeline deterministically. The LM heads of BERT, GPT-2, T5 and Llama are tied to
their token embedding: one producer-less table is read by a Gather and, transposed, by the
LM head's MatMul, and PopART's creator search lays it out for the Gather.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

sys.path.insert(0, str(Path(__file__).parent))
import make_models

from popart_unwind import transforms
from popart_unwind.baselines import popart_baseline
from popart_unwind.ir import Ir, TensorType
from popart_unwind.ops.coverage import ops_without_rule
from popart_unwind.ops.shape_inference import check_shapes
from popart_unwind.options import SessionOptions
from popart_unwind.target import IpuModel, TileTarget

MODELS = make_models.MODEL_NAMES
#: Embedding lookups each language model's training step differentiates (one ScatterND
#: each): BERT's word, position and token-type tables, GPT-2's word and position tables,
#: T5's shared table (read by the encoder and by the decoder) and its encoder's and
#: decoder's relative-position biases, Llama's word table.
EMBEDDING_TABLES = {"bert": 3, "gpt2": 2, "t5": 4, "llama": 1}
TIED = ("bert", "gpt2", "t5", "llama")  # LM heads sharing the token embedding
ONNX_CASES = [(name, "forward") for name in MODELS] + [
    (name, "training") for name in MODELS if name not in make_models.ONNX_TRAINING_UNSUPPORTED]
CHECKED = SessionOptions(enable_unwind_layouts=False, check_transform_conditions=True)


@pytest.fixture(scope="module", params=ONNX_CASES, ids=lambda case: "-".join(case))
def onnx_case(request):
    name, kind = request.param
    return name, kind, make_models.build(name, kind=kind)


def node_counts(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(node.op_type for node in model.graph.node)


def test_onnx_models_import_with_every_node_and_parameter(onnx_case):
    _, kind, path = onnx_case
    model = onnx.load(str(path), load_external_data=False)
    ir = Ir.from_onnx(path, options=CHECKED)
    ir.verify()
    check_shapes(ir)
    graph = ir.main_graph
    ops = collections.Counter(op.type.name for op in ir.all_ops())
    expected = node_counts(model)
    expected.pop("Constant", None)  # Constant nodes become Const tensors
    for op_type, count in expected.items():
        assert ops[op_type] >= count, op_type  # subgraph ops come on top
    float_initializers = {i.name for i in model.graph.initializer if i.data_type in (1, 10, 16)}
    variables = {t.id for t in graph.tensors if t.tensor_type is TensorType.VARIABLE}
    assert float_initializers <= variables
    assert [t.id for t in graph.outputs] == [o.name for o in model.graph.output]
    if kind == "training":
        assert graph.outputs[0].shape == ()  # the loss, then the updated parameters
        assert all(t.id.endswith(".updated") for t in graph.outputs[1:])


def test_onnx_models_canonicalize_to_an_idempotent_fixpoint(onnx_case):
    name, _, path = onnx_case
    ir = Ir.from_onnx(path, options=CHECKED)
    results = transforms.run_pipeline(ir)
    assert set(results) == {"InferShapes", "Canonicalize", "Prune", "MergeDuplicateOps",
                            "SerializeMatMuls"}
    assert results["SerializeMatMuls"] is False  # no matmul is marked
    ir.verify()
    before = ir.to_json()
    assert transforms.registry.apply("Canonicalize", ir, check=True) is False
    assert ir.to_json() == before
    # the exporter keeps a tied embedding one initializer, read by the Gather and the head
    tables = tied_tables(ir)
    assert len(tables) == (name in TIED), tables
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    for table in tables:  # PopART's default, then its TiedGatherPattern (MatMul or Gemm head)
        assert popart_baseline(ir, target).decision(table).method.startswith("created by Gather")
        tied = popart_baseline(ir, target, tied_gather=True).decision(table).method
        assert tied.startswith(("created by MatMul", "created by Gemm")), tied


def test_the_pipeline_is_deterministic_whatever_the_hash_seed(tmp_path):
    path = make_models.build("bert", kind="training")
    script = (
        "import sys\n"
        "from popart_unwind import transforms\n"
        "from popart_unwind.ir import Ir\n"
        "from popart_unwind.options import SessionOptions\n"
        "ir = Ir.from_onnx(sys.argv[1], options=SessionOptions(enable_unwind_layouts=False))\n"
        "transforms.run_pipeline(ir)\n"
        "sys.stdout.write(ir.to_json())\n")
    outputs = []
    for seed in ("1", "2024"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        # -P: import the installed package, not the source folder the tests may run from
        result = subprocess.run([sys.executable, "-P", "-c", script, str(path)], env=env,
                                capture_output=True, text=True, check=True)
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0]) > 10_000


@pytest.mark.parametrize("training", [False, True], ids=["forward", "training"])
@pytest.mark.parametrize("name", MODELS)
def test_torch_models_import_verify_and_canonicalize(name, training):
    module, args = make_models.tiny_model(name, "training" if training else "forward")
    ir = Ir.from_torch(module, args, training=training, options=CHECKED)
    ir.verify()
    check_shapes(ir)
    parameters = dict(module.named_parameters())
    variables = {t.id for t in ir.main_graph.tensors if t.tensor_type is TensorType.VARIABLE}
    assert set(parameters) <= variables
    if training:  # the loss, then one update per trainable parameter (buffer updates first)
        shapes = collections.Counter(t.shape for t in ir.main_graph.outputs)
        for parameter in parameters.values():
            assert shapes[tuple(parameter.shape)] >= 1
    # advanced indexing, the slices' backward, the embeddings' gradients (index_put,
    # accumulating), BERT's token-type lookup (GatherElements), the convolutions' backward
    # and max pooling with its backward become ops with layout rules: none is left without
    without_rule = set(ops_without_rule(ir))
    assert without_rule == set(), without_rule
    converted = ("index", "slice_scatter", "index_put", "convolution_backward",
                 "max_pool2d_with_indices", "max_pool2d_with_indices_backward")
    assert not any(op.type.domain == "aten" and op.type.name in converted
                   for graph in ir.graphs for op in graph.ops)
    if name in ("bert", "gpt2", "t5", "llama"):
        scatters = sum(1 for op in ir.main_graph.ops if op.type.name == "ScatterND")
        assert scatters == (EMBEDDING_TABLES[name] if training else 0)
    scatters = sum(1 for op in ir.main_graph.ops if op.type.name == "ScatterElements")
    # the cross-entropy's backward writes at the targets; ResNet's max pool's backward too
    assert scatters == (int(training) + int(training and name == "resnet"))
    transforms.run_pipeline(ir)
    ir.verify()
    before = ir.to_json()
    assert transforms.registry.apply("Canonicalize", ir) is False
    assert ir.to_json() == before
    if name in TIED:
        check_tied_lm_head(module, ir)
    else:
        assert tied_tables(ir) == []


def tied_tables(ir: Ir) -> list[str]:
    """Producer-less variables read whole by a Gather (as its table) and, through a single
    Transpose, as the right-hand operand of a MatMul (or Gemm, as the ONNX exporter writes
    BERT's training head): embeddings tied to an LM head."""
    tables = []
    for tensor in ir.main_graph.producerless_tensors():
        if tensor.tensor_type is not TensorType.VARIABLE:
            continue
        gathered = any(op.type.name == "Gather" and op.input(0) is tensor
                       for op in tensor.consumers)
        transposed = [op.output(0) for op in tensor.consumers if op.type.name == "Transpose"]
        multiplied = any(user.type.name in ("MatMul", "Gemm") and user.input(1) is view
                         for view in transposed for user in view.consumers)
        if gathered and multiplied:
            tables.append(tensor.id)
    return tables


def check_tied_lm_head(module, ir: Ir) -> None:
    """The module's LM head shares the token embedding; the graph reads that one tensor
    both ways, and PopART's creator search lays it out for the Gather (for the LM head's
    matmul with its TiedGatherPattern, off by default)."""
    embedding = module.model.get_input_embeddings().weight
    assert module.model.get_output_embeddings().weight is embedding  # tied in the module
    tables = tied_tables(ir)
    assert len(tables) == 1, tables
    table = ir.main_graph.tensor(tables[0])
    assert table.shape == tuple(embedding.shape)
    sharing = {n for n, p in module.named_parameters(remove_duplicate=False) if p is embedding}
    assert table.id in sharing and len(sharing) >= 2  # one of the tied names
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    decision = popart_baseline(ir, target).decision(table.id)
    assert decision.method.startswith("created by Gather")  # GatherOpx's top priority
    assert (decision.tiles.reshape(-1)
            == target.sliceable_tiles(*embedding.shape, table.dtype).reshape(-1)).all()
    # with PopART's TiedGatherPattern the LM head's matmul lays the table out instead
    tied = popart_baseline(ir, target, tied_gather=True).decision(table.id)
    assert tied.method.startswith("created by MatMul"), tied.method


def test_the_llama_graph_has_rotary_embeddings_and_grouped_query_attention():
    module, args = make_models.tiny_model("llama")
    config = module.model.config
    assert config.num_key_value_heads < config.num_attention_heads and config.tie_word_embeddings
    ir = Ir.from_torch(module, args, options=CHECKED)
    transforms.run_pipeline(ir)
    shapes = {t.id: t.shape for t in ir.main_graph.producerless_tensors()}
    width, layers = config.hidden_size, config.num_hidden_layers
    head = width // config.num_attention_heads
    for layer in range(layers):
        attention = f"model.model.layers.{layer}.self_attn."
        assert shapes[attention + "q_proj.weight"] == (config.num_attention_heads * head, width)
        for narrow in ("k_proj.weight", "v_proj.weight"):  # fewer key/value heads
            assert shapes[attention + narrow] == (config.num_key_value_heads * head, width)
    ops = collections.Counter(op.type.name for op in ir.all_ops())
    assert ops["Cos"] >= 1 and ops["Sin"] >= 1  # the rotary embedding's angles
    assert ops["Neg"] == 2 * layers  # rotate_half, on the queries and on the keys
    assert ops["Expand"] >= 2 * layers  # each key and value head serves several query heads
