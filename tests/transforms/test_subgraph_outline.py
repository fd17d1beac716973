"""SubgraphOutline: repeated sequences of the main graph become calls of one subgraph.
Values are checked with every op's numpy fold (callees included); the repeat search
against a brute force over every run; plans and costs through the whole pipeline."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from popart_unwind.transforms import run_pipeline
from popart_unwind.transforms.registry import pipeline_names
from popart_unwind.transforms.subgraph_outline import longest_common_prefixes, repeats, suffix_array

from popart_unwind.baselines import linear_plan
from popart_unwind.cost import evaluate
from popart_unwind.errors import OptionError
from popart_unwind.ir import Builder, Ir
from popart_unwind.ir.serialize import ir_to_json
from popart_unwind.options import SessionOptions
from popart_unwind.target import IpuModel, TileTarget

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all

HIDDEN = 16


def layers(count: int, outline: bool, threshold: float = 1.0, plan: bool = False,
           odd_one: bool = False) -> Ir:
    """``count`` layers y = relu(x @ w_k + b_k) + x, then a sum as the output; with
    ``odd_one``, layer 1 adds its relu to itself instead of to x (another wiring)."""
    b = Builder()
    x = b.add_input_tensor("float32", (4, HIDDEN), "x")
    rng = np.random.default_rng(0)
    for k in range(count):
        w = b.add_initialized_input_tensor(
            rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32), f"w{k}")
        bias = b.add_initialized_input_tensor(
            rng.standard_normal(HIDDEN).astype(np.float32), f"b{k}")
        h = b.ai_onnx.matmul([x, w], name=f"mm{k}")
        h = b.ai_onnx.add([h, bias], name=f"add{k}")
        h = b.ai_onnx.relu([h], name=f"relu{k}")
        x = b.ai_onnx.add([h, x if not (odd_one and k == 1) else h], name=f"res{k}")
    b.add_output_tensor(b.ai_onnx.reducesum([x], keepdims=0, name="loss"))
    ir = b.ir()
    ir.options = SessionOptions(enable_unwind_layouts=plan, check_transform_conditions=True,
                                enable_outlining=outline, outline_threshold=threshold)
    run_pipeline(ir)
    return ir


def _calls(ir: Ir) -> list:
    return [op for op in ir.main_graph.schedule() if op.type.name == "Call"]


def _values(ir: Ir) -> list[np.ndarray]:
    x = np.random.default_rng(1).standard_normal((4, HIDDEN)).astype(np.float32)
    return fold_all(ir, {"x": x})


def test_identical_layers_become_calls_of_one_subgraph():
    plain, outlined = layers(4, False), layers(4, True)
    calls = _calls(outlined)
    assert len(calls) == 4
    assert {op.attributes["callee"] for op in calls} == {"outlined_0"}
    callee = outlined.graph("outlined_0")
    assert sorted(op.type.name for op in callee.ops) == ["Add", "Add", "MatMul", "Relu"]
    assert len(callee.inputs) == 3 and len(callee.outputs) == 1  # x, w, b -> y
    for before, after in zip(_values(plain), _values(outlined), strict=True):
        np.testing.assert_allclose(before, after, rtol=1e-5)


def test_calls_run_where_their_layers_ran():
    ir = layers(3, True)
    order = [op.type.name for op in ir.main_graph.schedule()]
    assert order == ["Call", "Call", "Call", "ReduceSum"]
    first, second, third = _calls(ir)
    assert first.output(0) is second.input(0) and second.output(0) is third.input(0)


def test_off_by_default_and_joins_the_pipeline_when_set():
    assert "SubgraphOutline" not in pipeline_names(SessionOptions())
    names = pipeline_names(SessionOptions(enable_outlining=True, recompute="standard"))
    assert names.index("SubgraphOutline") == names.index("UnwindLayouts") - 1
    assert names.index("ExplicitRecompute") < names.index("SubgraphOutline")
    assert not _calls(layers(3, False))


def test_a_run_worth_less_than_the_threshold_stays():
    assert not _calls(layers(3, True, threshold=4000.0))  # each layer is worth 1000.3
    assert len(_calls(layers(3, True, threshold=1000.0))) == 3


def test_only_occurrences_wired_alike_share_a_subgraph():
    ir = layers(4, True, odd_one=True)
    # layer 1 adds its relu to itself: the other three are alike (and not adjacent, so
    # layers 2 and 3 form a run of two layers worth more together) — every call must still
    # compute what the graph did
    plain = layers(4, False, odd_one=True)
    for before, after in zip(_values(plain), _values(ir), strict=True):
        np.testing.assert_allclose(before, after, rtol=1e-5)
    for graph in ir.graphs[1:]:
        callers = [op for op in ir.main_graph.ops if op.attributes.get("callee") == graph.id]
        assert len(callers) >= 2


def test_outlined_steps_plan_and_cost_with_the_subgraph_planned_once():
    ir = layers(4, True, plan=True)
    callee = ir.graph("outlined_0")
    assert all(t.tile_mapping is not None for t in callee.inputs)
    target = TileTarget(IpuModel())
    ours = evaluate(ir, target)
    linear = evaluate(ir, target, dict(linear_plan(ir, target)))
    assert ours.exchange_bytes <= linear.exchange_bytes
    # the callee's ops are costed once per call site, and only its ops and the calls ran
    callee_rows = [row for row in ours.ops if row.graph_id == "outlined_0"]
    assert len(callee_rows) == len(callee.ops)
    assert all(row.executions == 4 for row in callee_rows)
    assert sorted(row.type for row in ours.ops if row.graph_id == "") == \
        ["Call"] * 4 + ["ReduceSum"]


def test_reruns_are_identical():
    assert ir_to_json(layers(4, True)) == ir_to_json(layers(4, True))


def test_a_bad_threshold_is_refused():
    with pytest.raises(OptionError, match="outline_threshold"):
        SessionOptions(outline_threshold=-1.0)


# -- the repeat search ----------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40))
def test_suffix_array_and_prefixes_match_brute_force(tokens):
    order = suffix_array(tokens)
    assert order.tolist() == sorted(range(len(tokens)), key=lambda i: tokens[i:])
    shared = longest_common_prefixes(tokens, order)
    for i in range(1, len(tokens)):
        a, b = tokens[order[i - 1]:], tokens[order[i]:]
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        assert shared[i] == common


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=30))
def test_every_repeated_run_is_found(tokens):
    """Each run occurring at two or more places is a prefix of some group, which holds
    every place it occurs."""
    groups = list(repeats(tokens))
    for length, starts in groups:
        assert len(starts) >= 2 and length >= 1
        assert len({tuple(tokens[s:s + length]) for s in starts}) == 1
    n = len(tokens)
    for size in range(1, n):
        for start in range(n - size + 1):
            run = tokens[start:start + size]
            where = [s for s in range(n - size + 1) if tokens[s:s + size] == run]
            if len(where) < 2:
                continue
            assert any(length >= size and set(where) <= set(starts)
                       and all(tokens[s:s + size] == run for s in starts)
                       for length, starts in groups)
