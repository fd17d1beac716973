"""InferPipelineStages and Pipeline: a model over IPUs run as a pipeline, its stashes and
restores, and what the cost model makes of them."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
from popart_unwind.transforms.infer_pipeline_stages import gradient_chain_ops
from popart_unwind.transforms.unwind_layouts import plan_ir

from popart_unwind import transforms
from popart_unwind.cost import evaluate
from popart_unwind.errors import TransformError
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir import Ir
from popart_unwind.ir.weights import is_weight, weight_derived
from popart_unwind.machine import IpuModel, TileTarget
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.ipu_copy import IPU_COPY, op_ipu
from popart_unwind.ops.stash import RESTORE, STASH, STASH_SIZE
from popart_unwind.options import SessionOptions
from popart_unwind.training import loss_forward_ops

WIDTH = 8
TILES = 16


def _stage(op) -> int:
    return op.settings.pipeline_stage


def placed_chain(placement: list[int], tied_tail: bool = False) -> Ir:
    """x -> (MatMul by w_k, Relu) per layer k on IPU ``placement[k]``; with ``tied_tail``
    a last MatMul on IPU 0 reads the transposed first weight (a tied head)."""
    b = Builder()
    h = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    first = None
    for k, ipu in enumerate(placement):
        with b.virtual_graph(ipu):
            w = b.add_initialized_input_tensor(np.ones((WIDTH, WIDTH), np.float32), f"w{k}")
            first = first or w
            h = b.ai_onnx.relu([b.ai_onnx.matmul([h, w])])
    if tied_tail:
        with b.virtual_graph(0):
            h = b.ai_onnx.matmul([h, b.ai_onnx.transpose([first], perm=[1, 0])])
    b.add_output_tensor(h)
    return b.ir()


def pipelined(ir: Ir, ipus: int, **values: object) -> Ir:
    ir.options = dataclasses.replace(
        ir.options, ipus=ipus, enable_pipelining=True, check_transform_conditions=True,
        virtual_graph_mode=values.pop("virtual_graph_mode", "manual"), **values)
    transforms.run_pipeline(ir, transforms.registry.pipeline_names(ir.options)[:-1])
    return ir


def ops_of(ir: Ir, name: str) -> list:
    return [op for op in ir.main_graph.ops if op.type.name == name]


# -- stages ------------------------------------------------------------------------------
def test_a_chain_over_ipus_in_order_has_popart_stages_and_nothing_to_stash():
    ir = pipelined(placed_chain([0, 0, 1, 2, 3]), 4)
    for op in ir.main_graph.ops:
        if op.type.name != IPU_COPY:
            assert _stage(op) == op_ipu(op)  # PopART's rule: the stage is the IPU
        else:
            assert _stage(op) == _stage(op.input(0).producer)  # with what it copies
    assert ops_of(ir, STASH) == [] and ops_of(ir, RESTORE) == []


def test_coming_back_to_an_ipu_starts_a_new_stage_and_a_weight_only_op_runs_late():
    ir = pipelined(placed_chain([0, 1, 2], tied_tail=True), 3)
    main = ir.main_graph
    [transpose] = [op for op in main.ops if op.type.name == "Transpose"]
    [head] = transpose.output(0).consumers
    assert (op_ipu(head), _stage(head)) == (0, 3)  # PopTorch's BeginBlock: stages 0, 1, 2, 3
    assert _stage(transpose) == 3  # made from a weight alone: where it is read
    assert ops_of(ir, STASH) == []  # the transposed weight is the weight: never stashed


def test_stages_given_by_the_model_are_kept_and_checked():
    b = Builder()
    h = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    for k, (ipu, stage) in enumerate([(0, 0), (1, 1), (0, 2)]):
        w = b.add_initialized_input_tensor(np.ones((WIDTH, WIDTH), np.float32), f"w{k}")
        with b.virtual_graph(ipu), b.pipeline_stage(stage):
            h = b.ai_onnx.relu([b.ai_onnx.matmul([h, w])])
    b.add_output_tensor(h)
    ir = pipelined(b.ir(), 2)
    assert sorted({(op_ipu(op), _stage(op)) for op in ir.main_graph.ops
                   if op.type.name != IPU_COPY}) == [(0, 0), (0, 2), (1, 1)]


@pytest.mark.parametrize("stages, message", [
    ([(0, 0), (1, None), (1, 1)], "has no pipeline stage, but other forward ops have one"),
    ([(0, 0), (1, 0), (1, 1)], "stage 0 runs on IPU 0: a stage's ops share one IPU"),
    ([(0, 0), (1, 2), (1, 2)], "not numbered 0 to 1 without gaps"),
    ([(0, 1), (1, 0), (1, 0)], "in the later stage 1"),
])
def test_bad_given_stages_are_one_clear_error(stages, message):
    b = Builder()
    h = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    for k, (ipu, stage) in enumerate(stages):
        w = b.add_initialized_input_tensor(np.ones((WIDTH, WIDTH), np.float32), f"w{k}")
        scope = b.pipeline_stage(stage) if stage is not None else contextlib.nullcontext()
        with b.virtual_graph(ipu), scope:
            h = b.ai_onnx.relu([b.ai_onnx.matmul([h, w])])
    b.add_output_tensor(h)
    with pytest.raises(TransformError, match=message):
        pipelined(b.ir(), 2)


def test_pipelining_needs_several_ipus():
    ir = placed_chain([0, 0])
    ir.options = SessionOptions(enable_pipelining=True)
    with pytest.raises(TransformError, match="pipelining needs a model over several IPUs"):
        transforms.registry.apply("InferPipelineStages", ir)
    names = transforms.registry.pipeline_names(SessionOptions(
        ipus=2, virtual_graph_mode="auto", enable_pipelining=True))
    assert names[-5:] == ["SplitByMemory", "InferPipelineStages", "InterIpuCopy", "Pipeline",
                          "UnwindLayouts"]  # PopART's order


# -- a training step ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2_pipeline() -> Ir:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import make_models

    module, args = make_models.tiny_model("gpt2", "training")
    ir = Ir.from_torch(module, args, training=True, options=SessionOptions(
        ipus=4, virtual_graph_mode="auto", enable_pipelining=True,
        check_transform_conditions=True))
    transforms.run_pipeline(ir, transforms.registry.pipeline_names(ir.options)[:-1])
    return ir


def test_every_op_reads_its_own_stage_or_a_copy_or_a_restore(gpt2_pipeline):
    assert_stage_discipline(gpt2_pipeline)


def assert_stage_discipline(ir: Ir) -> None:
    """What Pipeline guarantees: past the stash, no op reads a value of another stage of
    its IPU, except weights (constant over the step) and gradients on their way to an
    update (accumulated where they are made)."""
    main = ir.main_graph
    weights_only = weight_derived(main.schedule())
    forward = {op.id for op in loss_forward_ops(main, main.tensor(ir.final_loss_id))}
    to_updates = gradient_chain_ops(
        main.schedule(), {op.id for op in main.ops if op.id not in forward}, REGISTRY)
    for op in main.ops:
        if op.type.name in (IPU_COPY, STASH, RESTORE):
            continue
        for tensor in op.inputs:
            producer = tensor.producer
            if is_weight(tensor) or tensor.id in weights_only:
                continue
            if producer is None:  # a model input: read in one stage, or restored
                readers = {_stage(r) for r in tensor.consumers
                           if r.type.name not in (IPU_COPY, STASH)}
                assert len(readers) == 1, tensor.id
            elif producer.type.name == IPU_COPY:
                assert _stage(producer) < _stage(op)
            elif producer.id not in to_updates:
                assert _stage(producer) == _stage(op), (tensor.id, op.debug_name())


def assert_mirrored_stashes(ir: Ir) -> None:
    """A forward tensor of stage s restored in its backward stage 2L - s keeps
    2(L - s) + 1 micro-batches; every stash is as deep as its latest restore needs."""
    main = ir.main_graph
    last = max(_stage(op) for op in main.ops) // 2  # the loss's stage: stages run 0 to 2L
    stashes = ops_of(ir, STASH)
    assert stashes
    mirrored = 0
    for stash in stashes:
        size = stash.attributes[STASH_SIZE]
        restores = stash.output(0).consumers
        assert {r.type.name for r in restores} == {RESTORE}
        assert all(op_ipu(r) == op_ipu(stash) for r in restores)
        assert size == max(_stage(r) for r in restores) - _stage(stash) + 1
        if any(_stage(r) == 2 * last - _stage(stash) for r in restores):
            mirrored += 1
            assert size == 2 * (last - _stage(stash)) + 1
        assert stash.output(0).shape == (size, *stash.input(0).shape)
    assert mirrored


def test_stash_sizes_follow_the_stages(gpt2_pipeline):
    assert_mirrored_stashes(gpt2_pipeline)


def test_a_model_placed_by_blocks_is_placed_whole_before_its_stages():
    """PopTorch-like blocks place the forward pass only; the backward pass is placed
    before the stages are inferred, so a placed model pipelines as a split one does."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import make_models

    module, args = make_models.tiny_model("gpt2", "training")
    blocks = {"model.transformer.wte": 0, "model.transformer.h.1": 1, "model.lm_head": 0}
    ir = Ir.from_torch(module, args, training=True, blocks=blocks)
    pipelined(ir, 2)
    assert_stage_discipline(ir)
    assert_mirrored_stashes(ir)
    main = ir.main_graph
    assert max(_stage(op) for op in main.ops) == 2 * 2  # stages: IPU 0, 1, then 0 (head)


def test_a_pipelined_step_costs_its_stashes_and_accumulators(gpt2_pipeline):
    ir = gpt2_pipeline
    target = TileTarget(IpuModel(tiles_per_ipu=TILES, ipus=4))
    plan = plan_ir(ir, target)
    report = evaluate(ir, target, op_plans=plan.op_plans)
    main = ir.main_graph
    stash_bytes = [0] * 4
    for stash in ops_of(ir, STASH):
        out = stash.output(0)
        stash_bytes[op_ipu(stash)] += int(np.prod(out.shape)) * target.dtype_size(out.dtype)
    assert list(report.stash_bytes_per_ipu) == stash_bytes
    updated = {op.input(0).id: op for op in main.ops
               if REGISTRY.layout_rule(op).updated_weight(op) is not None}
    assert sum(report.accumulator_bytes_per_ipu) == sum(
        int(np.prod(main.tensor(w).shape)) * target.dtype_size(main.tensor(w).dtype)
        for w in updated)
    summary = report.summary()
    assert summary["pipeline_cycles"] <= summary["cycles"]  # the IPUs overlap
    assert summary["pipeline_cycles"] == max(p["cycles"] for p in summary["per_ipu"]) \
        + report.copy_phase_cycles
    # The fullest moment is found with every stash live (a second walk).
    assert report.fullest_tile is not None and report.fullest_tile.op is not None
    for ipu, entry in enumerate(summary["per_ipu"]):
        tiles = report.always_live_bytes_per_tile[ipu * TILES:(ipu + 1) * TILES]
        assert int(tiles.sum()) >= entry["stash_bytes"] + report.accumulator_bytes_per_ipu[ipu]


def test_a_weight_copied_between_ipus_cannot_be_pipelined():
    """PopART's AutoVirtualGraph leaves GPT-2's tied head on another IPU than its table:
    PopART refuses to pipeline that, and so do we, naming the weight."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import make_models

    module, args = make_models.tiny_model("gpt2", "training")
    ir = Ir.from_torch(module, args, training=True)
    with pytest.raises(TransformError, match=r"weight 'model\.lm_head\.weight' is read on "
                                             r"IPU \d and on IPU \d"):
        pipelined(ir, 4, virtual_graph_mode="auto", auto_split="popart")


def test_a_layers_passes_are_found_through_its_stashes(gpt2_pipeline):
    """The weight-gradient matmul reads the activation restored from a stash: the same
    values as the forward matmul's, so the layer's three passes are still one layer
    (planned together, as PopART marks them before pipelining)."""
    from popart_unwind.layers import fully_connected_layers

    layers = fully_connected_layers(gpt2_pipeline)
    assert layers and all(layer.bwd is not None and layer.wu is not None
                          for layer in layers)

    def reads_a_restore(op, depth: int = 3) -> bool:
        producers = [t.producer for t in op.inputs if t.producer is not None]
        return any(p.type.name == RESTORE or (depth and reads_a_restore(p, depth - 1))
                   for p in producers)

    assert any(reads_a_restore(layer.wu) for layer in layers)


def shared_weight_chain(updated: bool) -> Ir:
    """Two layers on IPUs 0 and 1 reading one weight ``w`` (an exporter's shared scalar,
    or equal-valued parameters it merged); with ``updated`` the step also computes ``w``'s
    new value on IPU 0, as a training step's update does."""
    b = Builder()
    h = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    w = b.add_initialized_input_tensor(np.full((WIDTH, WIDTH), 0.5, np.float32), "w")
    for ipu in (0, 1):
        with b.virtual_graph(ipu):
            h = b.ai_onnx.relu([b.ai_onnx.matmul([h, w])])
    b.add_output_tensor(h)
    if updated:
        with b.virtual_graph(0):
            b.add_output_tensor(b.ai_onnx.sub([w, b.ai_onnx.mul([w, w])]))
    return b.ir()


def test_a_weight_the_step_only_reads_is_copied_to_a_later_ipu():
    """A forward model's weights are constant over the step (PopART's inference session
    holds them as Const tensors, which its pipeline copies in their reader's stage): the
    second IPU reads a copy of ``w``, made in its stage and not stashed."""
    ir = pipelined(shared_weight_chain(updated=False), 2)
    main = ir.main_graph
    [copy] = [op for op in ops_of(ir, IPU_COPY) if op.input(0).id == "w"]
    [reader] = copy.output(0).consumers
    assert op_ipu(copy) == 0 and op_ipu(reader) == 1
    assert _stage(copy) == _stage(reader) == 1
    assert {op_ipu(op) for op in main.tensor("w").consumers} == {0}  # its home, IPU 0
    assert ops_of(ir, STASH) == []


def test_a_weight_the_step_updates_cannot_be_copied():
    """The same weight with its update in the step is a variable, which PopART's pipeline
    refuses to copy: named, with both IPUs."""
    with pytest.raises(TransformError, match=r"weight 'w' is read on IPU 0 and on IPU 1"):
        pipelined(shared_weight_chain(updated=True), 2)


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit", "llama", "t5"])
def test_our_split_of_a_training_step_pipelines_without_copying_a_weight(name):
    """Each backward op goes to its layer's IPU (the weights it reads, the activations it
    differentiates), so no weight crosses IPUs and the backward pass goes down the
    stages. T5's decoder looks up the table its encoder and head share on the table's
    IPU."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import make_models

    module, args = make_models.tiny_model(name, "training")
    ir = pipelined(Ir.from_torch(module, args, training=True), 4,
                   virtual_graph_mode="auto")
    main = ir.main_graph
    assert not any(is_weight(t) for op in ops_of(ir, IPU_COPY) for t in op.inputs)
    assert ops_of(ir, STASH) and {op_ipu(op) for op in main.ops} == {0, 1, 2, 3}


def test_stages_come_before_the_copies():
    ir = placed_chain([0, 1])
    ir.options = SessionOptions(ipus=2, virtual_graph_mode="manual", enable_pipelining=True)
    transforms.run_pipeline(ir, ["InferShapes", "InterIpuCopy"])
    with pytest.raises(TransformError, match="run InferPipelineStages before InterIpuCopy"):
        transforms.registry.apply("InferPipelineStages", ir)
