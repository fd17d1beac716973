"""AutoVirtualGraph and InterIpuCopy: PopART's split of a model over IPUs, and the copies
between them."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from popart_unwind.transforms.auto_virtual_graph import split_forward
from popart_unwind.transforms.split_by_memory import CROSSING_SLACK, choose_split, held_per_ipu

from popart_unwind import transforms
from popart_unwind.errors import OptionError, TransformError
from popart_unwind.frontends.builder import Builder
from popart_unwind.ir import Ir
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.ipu_copy import DESTINATION_IPU, IPU_COPY, op_ipu, tensor_ipus
from popart_unwind.options import SessionOptions

WIDTH = 8


def chain_model(widths: list[int], placement: list[int] | None = None) -> Ir:
    """x -> (MatMul by w_k, Relu) per layer; layer k's weight is WIDTH x widths[k] wide
    (widths[k] = WIDTH keeps the chain square), placed on ``placement[k]`` if given."""
    b = Builder()
    h = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    width = WIDTH
    for k, out in enumerate(widths):
        scope = b.virtual_graph(placement[k]) if placement else contextlib.nullcontext()
        with scope:
            w = b.add_initialized_input_tensor(np.ones((width, out), np.float32), f"w{k}")
            h = b.ai_onnx.relu([b.ai_onnx.matmul([h, w])])
        width = out
    b.add_output_tensor(h)
    return b.ir()


def _options(ir: Ir, **values: object) -> None:
    ir.options = dataclasses.replace(SessionOptions(check_transform_conditions=True),
                                     **values)


def _run(ir: Ir) -> None:
    transforms.run_pipeline(ir, transforms.registry.pipeline_names(ir.options)[:-1])


# -- InterIpuCopy ------------------------------------------------------------------------
def test_a_tensor_read_on_another_ipu_is_copied_once_per_destination():
    ir = chain_model([WIDTH] * 4, placement=[0, 0, 1, 1])
    _options(ir, ipus=2, virtual_graph_mode="manual")
    _run(ir)
    main = ir.main_graph
    copies = [op for op in main.ops if op.type.name == IPU_COPY]
    assert len(copies) == 1
    copy = copies[0]
    assert op_ipu(copy) == 0 and copy.attributes[DESTINATION_IPU] == 1
    assert copy.input(0).producer.settings.vgraph_id == 0
    assert [op_ipu(r) for r in copy.output(0).consumers] == [1]
    assert transforms.check_condition(ir, transforms.Condition.NO_IMPLICIT_COPY) == []
    assert tensor_ipus(ir)[(main.id, copy.output(0).id)] == 1


def test_a_weight_read_on_two_ipus_lives_with_its_first_reader_and_is_copied():
    b = Builder()
    x = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    w = b.add_initialized_input_tensor(np.ones((WIDTH, WIDTH), np.float32), "tied")
    with b.virtual_graph(0):
        h = b.ai_onnx.matmul([x, w])
    with b.virtual_graph(1):
        y = b.ai_onnx.matmul([h, w])
        z = b.ai_onnx.matmul([y, w])
    b.add_output_tensor(z)
    ir = b.ir()
    _options(ir, ipus=2, virtual_graph_mode="manual")
    _run(ir)
    copies = [op for op in ir.main_graph.ops if op.type.name == IPU_COPY]
    copied = sorted(t.id for op in copies for t in op.inputs)
    assert copied == sorted(["tied", h])  # the weight once, for both readers on IPU 1
    assert len(copies) == 1  # MergeCopies: the first matmul on IPU 1 reads both
    assert (ir.main_graph.id, "tied") not in tensor_ipus(ir)  # it lives on IPU 0


def test_a_constant_read_on_two_ipus_is_held_by_each_not_copied():
    b = Builder()
    x = b.add_input_tensor(np.float32, (4, WIDTH), "x")
    shape = b.add_constant(np.array([WIDTH, 4], np.int64), "shape")
    with b.virtual_graph(0):
        h = b.ai_onnx.reshape([b.ai_onnx.relu([x]), shape])
    with b.virtual_graph(1):
        y = b.ai_onnx.reshape([b.ai_onnx.relu([h]), shape])
    b.add_output_tensor(y)
    ir = b.ir()
    _options(ir, ipus=2, virtual_graph_mode="manual")
    _run(ir)
    copied = [t.id for op in ir.main_graph.ops if op.type.name == IPU_COPY for t in op.inputs]
    assert copied == [h]


def test_a_placement_beyond_the_machine_is_refused_naming_the_op():
    ir = chain_model([WIDTH] * 2, placement=[0, 3])
    _options(ir, ipus=2, virtual_graph_mode="manual")
    with pytest.raises(TransformError, match=r"placed on IPU 3, but the machine has 2 IPUs"):
        _run(ir)


def test_off_adds_no_transform_and_one_ipu_needs_no_mode():
    assert "InterIpuCopy" not in transforms.registry.pipeline_names(SessionOptions())
    names = transforms.registry.pipeline_names(SessionOptions(ipus=2,
                                                              virtual_graph_mode="auto"))
    assert names[-4:] == ["SplitByMemory", "InterIpuCopy", "MergeCopies", "UnwindLayouts"]
    names = transforms.registry.pipeline_names(SessionOptions(
        ipus=2, virtual_graph_mode="auto", auto_split="popart"))
    assert names[-4:] == ["AutoVirtualGraph", "InterIpuCopy", "MergeCopies", "UnwindLayouts"]
    with pytest.raises(OptionError, match="virtual_graph_mode is off"):
        SessionOptions(ipus=2)
    with pytest.raises(OptionError, match="gives 1 ratios for 2 IPUs"):
        SessionOptions(ipus=2, virtual_graph_mode="auto", virtual_graph_split_ratios=(1.0,))
    with pytest.raises(OptionError, match="ipus must be an int of at least 1"):
        SessionOptions(ipus=0)


# -- AutoVirtualGraph ------------------------------------------------------------------------
def _chain_oracle(costs: list[int], ipus: int, ratios: tuple[float, ...] = ()
                  ) -> list[int] | None:
    """PopART's cut of a plain chain, where every op is a split point and the last op of
    each running cost stands for it: IPU i ends at the first such cost reaching its share
    of the total, or at the cost before when that one is strictly nearer; a cost once cut
    is no split point again; the cut op stays on the earlier IPU. None when some IPU finds
    no split point at or above its share (PopART then refuses)."""
    running = [int(c) for c in np.cumsum(costs)]
    last = {c: k for k, c in enumerate(running)}  # the later op of one cost wins
    points = sorted(last)
    total = running[-1]
    cuts, share = [], 0.0
    for i in range(1, ipus):
        share += ratios[i - 1] / sum(ratios) if ratios else 1 / ipus
        wanted = share * total
        above = [c for c in points if c >= wanted]
        if not above:
            return None
        at = points.index(above[0])
        if at > 0 and wanted - points[at - 1] < points[at] - wanted:
            at -= 1
        cuts.append(last[points.pop(at)])
    return [sum(1 for cut in cuts if cut < k) for k in range(len(costs))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=4, max_size=10), st.integers(2, 4),
       st.booleans())
def test_a_chain_is_cut_where_popart_cuts_it(widths, ipus, weighted):
    ir = chain_model(widths)
    ratios = tuple(float(k + 1) for k in range(ipus)) if weighted else ()
    ops = ir.main_graph.schedule()
    forward = {op.id for op in ops}
    # weights are the only cost of an inference graph: WIDTH x widths[k] float32 per MatMul
    costs = [4 * op.input(1).nelms() if op.is_type("MatMul") else 0 for op in ops]
    expected = _chain_oracle(costs, ipus, ratios)
    if expected is None:  # too few places to cut: PopART refuses
        with pytest.raises(TransformError, match="found places to cut"):
            split_forward(ops, forward, False, ipus, ratios)
        return
    placement = split_forward(ops, forward, False, ipus, ratios)
    assert [placement[op.id] for op in ops] == expected


def test_four_equal_layers_split_two_by_two_and_the_cut_op_stays_before():
    ir = chain_model([WIDTH] * 4)
    _options(ir, ipus=2, virtual_graph_mode="auto", auto_split="popart")
    _run(ir)
    ops = ir.main_graph.schedule()
    placed = [(op.type.name, op.settings.vgraph_id) for op in ops]
    assert placed == [("MatMul", 0), ("Relu", 0), ("MatMul", 0), ("Relu", 0),
                      ("IpuCopy", 0), ("MatMul", 1), ("Relu", 1), ("MatMul", 1),
                      ("Relu", 1)]


def test_too_few_places_to_cut_is_one_clear_error():
    ir = chain_model([WIDTH])
    _options(ir, ipus=4, virtual_graph_mode="auto", auto_split="popart")
    with pytest.raises(TransformError, match="cut the model for 2 IPUs, not 4"):
        _run(ir)
    ir = chain_model([WIDTH])
    _options(ir, ipus=4, virtual_graph_mode="auto")
    with pytest.raises(TransformError, match="SplitByMemory found 1 places to cut"):
        _run(ir)


MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


@pytest.fixture(scope="module")
def gpt2_on_four() -> Ir:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if str(MODELS_DIR) not in sys.path:
        sys.path.insert(0, str(MODELS_DIR))
    import make_models

    module, args = make_models.tiny_model("gpt2", "training")
    ir = Ir.from_torch(module, args, training=True, options=SessionOptions(
        enable_unwind_layouts=False, ipus=4, virtual_graph_mode="auto", auto_split="popart"))
    transforms.run_pipeline(ir)
    return ir


def test_a_training_step_is_split_forward_first_and_updates_stay_with_weights(gpt2_on_four):
    ir = gpt2_on_four
    main = ir.main_graph
    loss = main.tensor(ir.final_loss_id)
    assert op_ipu(loss.producer) == 3
    used = {op_ipu(op) for op in main.ops}
    assert used == {0, 1, 2, 3}
    updates = [(op, REGISTRY.layout_rule(op).updated_weight(op)) for op in main.ops]
    updates = [(op, index) for op, index in updates if index is not None]
    assert len(updates) > 10
    for op, index in updates:
        weight = op.input(index)
        readers = [op_ipu(r) for r in weight.consumers if r.type.name != IPU_COPY]
        assert op_ipu(op) == min(readers)
    assert transforms.check_condition(ir, transforms.Condition.NO_IMPLICIT_COPY) == []
    assert transforms.check_condition(ir, transforms.Condition.VGRAPH) == []


def test_blocks_place_a_torch_model_as_begin_block_does():
    """PopTorch's BeginBlock: blocks begin in the order given, each where its submodule's
    parameters are first read after the block before, and last until the next; a tied
    head is found by the table it reads; InterIpuCopy puts the backward pass with its
    layers."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if str(MODELS_DIR) not in sys.path:
        sys.path.insert(0, str(MODELS_DIR))
    import make_models

    module, args = make_models.tiny_model("gpt2", "training")
    blocks = {"model.transformer.wte": 0, "model.transformer.wpe": 1,
              "model.transformer.h.1": 2, "model.lm_head": 0}
    ir = Ir.from_torch(module, args, training=True, blocks=blocks, options=SessionOptions(
        enable_unwind_layouts=False, ipus=3, virtual_graph_mode="manual"))
    transforms.run_pipeline(ir)
    main = ir.main_graph
    ipu_of_reader = {}
    for op in main.ops:
        for tensor in op.inputs:
            if tensor.producer is None and op.type.name != IPU_COPY:
                ipu_of_reader.setdefault(tensor.id, set()).add(op_ipu(op))
    assert ipu_of_reader["model.transformer.wpe.weight"] == {1}
    assert ipu_of_reader["model.transformer.h.0.attn.c_attn.weight"] == {1}
    assert ipu_of_reader["model.transformer.h.1.attn.c_attn.weight"] == {2}
    logits = [op for op in main.ops if op.is_type("MatMul") and any(
        t.id == "model.lm_head.weight" or (t.producer is not None and any(
            u.id == "model.lm_head.weight" for u in t.producer.inputs))
        for t in op.inputs)]
    assert logits and 0 in {op_ipu(op) for op in logits}
    assert transforms.check_condition(ir, transforms.Condition.NO_IMPLICIT_COPY) == []
    with pytest.raises(Exception, match=r"block 'model.nothing' never begins"):
        Ir.from_torch(module, args, blocks={"model.nothing": 1})
    with pytest.raises(Exception, match=r"block 'model.transformer.h.0' never begins: no op "
                                        r"after block 'model.transformer.h.1'"):
        Ir.from_torch(module, args, blocks={"model.transformer.h.1": 1,
                                            "model.transformer.h.0": 2})


# -- SplitByMemory -----------------------------------------------------------------------
@settings(max_examples=120, deadline=None)
@given(st.data())
def test_our_split_is_the_most_even_of_those_holding_least_on_the_fullest_ipu(data):
    """Brute force over every cut at the allowed places (the narrowest of their
    neighbourhoods): ours has the least bytes on its fullest IPU and, among such cuts, the
    least sum of squares."""
    n = data.draw(st.integers(3, 9))
    ipus = data.draw(st.integers(2, 4))
    held = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    crossing = [0, *data.draw(st.lists(st.integers(1, 3), min_size=n - 1, max_size=n - 1))]
    tied = (0, n - 1) if n >= 4 and data.draw(st.booleans()) else (-1, n)
    start, head = tied[0] + 1, tied[1]
    inside = list(range(max(start, 1), head))
    window = max(1, len(inside) // (8 * ipus))
    allowed = [k for at, k in enumerate(inside) if crossing[k] <= CROSSING_SLACK * min(
        crossing[j] for j in inside[max(0, at - window):at + window + 1])]
    fixed = sum(held[:start]) + sum(held[head:])

    def loads(cuts: tuple[int, ...]) -> list[int]:
        bounds = [start, *cuts, head]
        return [sum(held[a:b]) + (fixed if i == 0 else 0)
                for i, (a, b) in enumerate(itertools.pairwise(bounds))]

    candidates = [cuts for cuts in itertools.combinations(allowed, ipus - 1)
                  if cuts[0] > start or (cuts[0] == start and start >= 1)]
    if not candidates:
        with pytest.raises(TransformError):
            choose_split(held, crossing, tied, ipus)
        return
    best = min((max(loads(c)), sum(x * x for x in loads(c))) for c in candidates)
    split = choose_split(held, crossing, tied, ipus)
    ours = loads(split.cuts)
    assert (max(ours), sum(x * x for x in ours)) == best
    assert held_per_ipu(split, held, ipus) == ours


@pytest.mark.parametrize("name", ["gpt2", "t5"])
def test_our_split_keeps_a_tied_head_with_its_table(name):
    """The table, the head and every other reader (T5's decoder lookup) on one IPU: the
    table is never copied."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if str(MODELS_DIR) not in sys.path:
        sys.path.insert(0, str(MODELS_DIR))
    import make_models

    module, args = make_models.tiny_model(name, "forward")
    ir = Ir.from_torch(module, args, options=SessionOptions(
        enable_unwind_layouts=False, ipus=4, virtual_graph_mode="auto"))
    transforms.run_pipeline(ir)
    main = ir.main_graph
    table = next(t for t in main.producerless_tensors()
                 if t.tensor_type.name == "VARIABLE" and len(t.consumers) > 1
                 and t.nelms() == max(u.nelms() for u in main.producerless_tensors()))
    assert {op_ipu(op) for op in table.consumers} == {0}
    assert not any(op.type.name == IPU_COPY and table in op.inputs for op in main.ops)
    assert {op_ipu(op) for op in main.ops} == {0, 1, 2, 3}
