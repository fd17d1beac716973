"""A Concat of k inputs is planned in time linear in k (offsets summed once, each slab
answered from its bounds, the creator search asking each op once). These tests hold the
fast paths to the direct ones on small k: the same slabs, views, baseline and plan file."""

from __future__ import annotations

import importlib
import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from popart_unwind.baselines import popart_baseline
from popart_unwind.cli import main
from popart_unwind.ir import Builder
from popart_unwind.memory import Chain, DisjointRegions, Region
from popart_unwind.memory import sett_bounded as sb
from popart_unwind.ops import REGISTRY
from popart_unwind.target import IpuModel, TileTarget
from popart_unwind.unwind import UnwindGraph
from popart_unwind.unwind.ops import Node, concat_slab, forward_edges, unwind_routes

#: the module (the package exports its function under the same name)
baseline_module = importlib.import_module("popart_unwind.baselines.popart_baseline")


def concat_ir(widths: list[int], axis: int):
    """Inputs [3, w] (axis 1) or [w, 3] (axis 0) concatenated, then multiplied by a weight:
    the matmul creates the Concat's output, so the creator search unwinds through slabs."""
    b = Builder()
    names = [b.add_input_tensor("float32", (3, w) if axis == 1 else (w, 3), f"x{i}")
             for i, w in enumerate(widths)]
    joined = b.ai_onnx.concat(names, axis=axis, name="join")
    total = sum(widths)
    weight = b.add_initialized_input_tensor(
        np.zeros((total, 2) if axis == 1 else (3, 2), np.float32), "w")
    b.add_output_tensor(b.ai_onnx.matmul([joined, weight], name="mm"))
    return b.ir()


def concat_op(ir):
    return next(op for op in ir.main_graph.ops if op.type.name == "Concat")


widths_and_axis = st.tuples(st.lists(st.integers(1, 5), min_size=1, max_size=9),
                            st.sampled_from([0, 1]))


@settings(max_examples=40, deadline=None)
@given(widths_and_axis)
def test_slabs_are_the_sums_of_the_sizes_before(case) -> None:
    widths, axis = case
    op = concat_op(concat_ir(widths, axis))
    rule = REGISTRY.layout_rule(op)
    slabs = rule.input_slabs(op)
    for index, width in enumerate(widths):
        begin = sum(widths[:index])  # brute force: every size before, summed again
        assert slabs[index] == (axis, begin, begin + width)
        assert rule.input_slab(op, index) == slabs[index]


@settings(max_examples=40, deadline=None)
@given(widths_and_axis)
def test_views_of_all_inputs_at_once_are_each_inputs_view(case) -> None:
    widths, axis = case
    op = concat_op(concat_ir(widths, axis))
    rule = REGISTRY.layout_rule(op)
    views = rule.popart_views(op, 0)
    assert sorted(views) == list(range(len(widths)))
    out_shape = op.output(0).shape
    for index, tensor in enumerate(op.inputs):
        one = rule.popart_view(op, index, 0)
        assert views[index] == one
        # the chain places each element of input i in its slab of the output
        begin = sum(widths[:index])
        slab = concat_slab(out_shape, axis, begin, widths[index])
        assert one == Chain(tensor.shape).sett_fill_into(slab)
    assert all(view is None for view in rule.popart_views(op, 1).values())


def _fresh_view(self, rule, op, index, out_index):
    """The search's step before it asked each op once: one input's view, afresh."""
    if rule.kind == "elementwise" and not self.unwind_elementwise:
        return None
    return rule.popart_view(op, index, out_index)


@pytest.mark.parametrize("axis", [0, 1])
def test_the_baseline_is_the_one_each_input_asked_afresh_gives(axis, monkeypatch) -> None:
    ir = concat_ir([2, 1, 4, 3, 2, 5, 1], axis)
    target = TileTarget(IpuModel(tiles_per_ipu=16))
    memoised = popart_baseline(ir, target)
    monkeypatch.setattr(baseline_module._CreatorSearch, "_view", _fresh_view)
    fresh = popart_baseline(ir, target)
    assert [(d.tensor_id, d.method, d.explanation) for d in memoised.decisions] == [
        (d.tensor_id, d.method, d.explanation) for d in fresh.decisions]
    assert memoised.mappings.keys() == fresh.mappings.keys()
    for key, tiles in memoised.mappings.items():
        assert np.array_equal(tiles, fresh.mappings[key])
    created = [d for d in memoised.decisions if d.tensor_id.startswith("x")]
    assert all("Concat" in d.explanation or "join" in d.explanation for d in created)


def concat_model(widths: list[int], axis: int) -> onnx.ModelProto:
    """x_i -> (Add x_i + x_i for odd i) -> Concat -> MatMul with a weight."""
    nodes, joined = [], []
    inputs = []
    for i, w in enumerate(widths):
        shape = [3, w] if axis == 1 else [w, 3]
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape))
        if i % 2:
            nodes.append(helper.make_node("Add", [f"x{i}", f"x{i}"], [f"a{i}"]))
            joined.append(f"a{i}")
        else:
            joined.append(f"x{i}")
    nodes.append(helper.make_node("Concat", joined, ["c"], axis=axis))
    total = sum(widths)
    weight_shape = (total, 2) if axis == 1 else (3, 2)
    nodes.append(helper.make_node("MatMul", ["c", "w"], ["y"]))
    out_shape = [3, 2] if axis == 1 else [total, 2]
    graph = helper.make_graph(
        nodes, "concat", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                out_shape)],
        initializer=[numpy_helper.from_array(np.ones(weight_shape, np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def plan_bytes(model_path: Path, out: Path) -> bytes:
    status = main(["plan", str(model_path), "--out", str(out), "--tiles", "16", "--quiet"],
                  stdout=io.StringIO(), stderr=io.StringIO())
    assert status == 0
    return out.read_bytes()


def _clear_set_caches() -> None:
    for name in dir(sb):
        cached = getattr(sb, name)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


@pytest.mark.parametrize("axis", [0, 1])
def test_the_plan_file_is_the_one_index_arrays_give(axis, tmp_path, monkeypatch) -> None:
    """End to end (our plan, PopART's, linear, their costs): answering one-run sets from
    their bounds changes no byte of the plan file."""
    folder = tmp_path / "model"
    folder.mkdir()
    model_path = folder / "concat.onnx"
    onnx.save(concat_model([3, 1, 4, 1, 5, 2, 6, 5, 3], axis), str(model_path))
    _clear_set_caches()
    fast = plan_bytes(model_path, tmp_path / "fast.json")
    monkeypatch.setattr(sb, "_run", lambda ds, size: None)  # every set through index arrays
    _clear_set_caches()
    try:
        dense = plan_bytes(model_path, tmp_path / "dense.json")
    finally:
        _clear_set_caches()
    assert fast == dense


@settings(max_examples=30, deadline=None)
@given(widths_and_axis)
def test_each_input_reaches_exactly_its_slab_in_the_unwinding_graph(case) -> None:
    """The unwinding graph's concat edges (forward: an input onto its slab; back: the slab
    sampled) give the same regions, member for member, as the index-array path."""
    widths, axis = case
    in_shapes = [(3, w) if axis == 1 else (w, 3) for w in widths]
    out_shape = (3, sum(widths)) if axis == 1 else (sum(widths), 3)
    node = Node("concat", tuple(f"x{i}" for i in range(len(widths))), axis=axis)

    def images() -> list[str]:
        found = []
        for edge, shape in zip(forward_edges(node, out_shape, in_shapes), in_shapes,
                               strict=True):
            found.append(repr(edge.chain.apply_regions(Region.full(shape))))
        for _, back in unwind_routes(node, out_shape, in_shapes):
            found.append(repr(back.apply_regions(Region.full(out_shape))))
        return found

    _clear_set_caches()
    fast = images()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sb, "_run", lambda ds, size: None)
        _clear_set_caches()
        dense = images()
    _clear_set_caches()
    assert fast == dense
    for index, edge in enumerate(forward_edges(node, out_shape, in_shapes)):
        begin = sum(widths[:index])
        slab = concat_slab(out_shape, axis, begin, widths[index])
        assert edge.chain.apply_regions(Region.full(in_shapes[index])) == DisjointRegions(
            out_shape, [slab])


# -- a Concat split again (or sliced) -------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.data())
def test_a_slice_of_a_concat_within_one_input_views_that_input(widths, data) -> None:
    """The unwinding graph's slice of a concat's output is, element for element, numpy's
    slice of the concatenation, whether or not it lies within one input's slab."""
    graph = UnwindGraph()
    inputs = [graph.sink((w, 3), name=f"x{i}") for i, w in enumerate(widths)]
    joined = graph.concat(inputs, axis=0)
    total = sum(widths)
    low = data.draw(st.integers(0, total - 1))
    high = data.draw(st.integers(low + 1, total))
    columns = sorted(data.draw(st.lists(st.integers(0, 3), min_size=2, max_size=2,
                                        unique=True)))
    sliced = graph.slice(joined, (low, columns[0]), (high, columns[1]))
    arrays = {t: (np.arange(w * 3) + 100 * i).reshape(w, 3)
              for i, (t, w) in enumerate(zip(inputs, widths, strict=True))}
    node = graph.node(sliced)
    source = node.inputs[0]
    held = arrays[source] if source in arrays else np.concatenate(
        [arrays[t] for t in inputs], axis=0)
    expected = np.concatenate([arrays[t] for t in inputs], axis=0)[
        low:high, columns[0]:columns[1]]
    assert np.array_equal(node.chain.apply(held), expected)
    ends = np.cumsum(widths)
    within = int(np.searchsorted(ends, low, side="right"))
    assert (source != joined) == (high <= ends[within])  # skipped the concat iff within


def split_ir(widths: list[int], axis: int):
    """Inputs concatenated, split again into other sizes, each piece multiplied by a
    weight (the matmuls create the pieces, so the search unwinds through the Split)."""
    b = Builder()
    names = [b.add_input_tensor("float32", (3, w) if axis == 1 else (w, 3), f"x{i}")
             for i, w in enumerate(widths)]
    joined = b.ai_onnx.concat(names, axis=axis, name="join")
    total = sum(widths)
    pieces = [total // 3, total // 3, total - 2 * (total // 3)]
    parts = b.ai_onnx.split([joined, np.array(pieces, np.int64)], num_outputs=3, axis=axis,
                            name="cut")
    for i, (part, size) in enumerate(zip(parts, pieces, strict=True)):
        weight = np.zeros((size, 2) if axis == 1 else (3, 2), np.float32)
        b.add_output_tensor(b.ai_onnx.matmul(
            [part, b.add_initialized_input_tensor(weight, f"w{i}")], name=f"mm{i}"))
    return b.ir()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=3, max_size=8), st.sampled_from([0, 1]),
       st.data())
def test_the_split_finds_the_outputs_a_reach_meets_as_asking_each_does(widths, axis,
                                                                     data) -> None:
    ir = split_ir(widths, axis)
    op = next(op for op in ir.main_graph.ops if op.type.name == "Split")
    rule = REGISTRY.layout_rule(op)
    shape = op.input(0).shape
    low = data.draw(st.integers(0, shape[axis] - 1))
    high = data.draw(st.integers(low + 1, shape[axis]))
    lower, upper = [0, 0], list(shape)
    lower[axis], upper[axis] = low, high
    reach = DisjointRegions(shape, [Region.from_bounds(shape, lower, upper)])
    views = rule.popart_output_views(op)
    asked = [out for out in sorted(op.output_map())
             if not views[out][0].apply_regions(reach).is_empty()]
    assert rule.popart_output_finder(op, 0)(reach) == asked


@pytest.mark.parametrize("axis", [0, 1])
def test_the_baseline_through_a_split_is_the_one_following_every_output(axis,
                                                                        monkeypatch) -> None:
    """Following only the Split outputs an input's elements reach, and skipping views
    that hold none of them, decides every tensor as following all of them does."""
    ir = split_ir([2, 1, 4, 3, 2, 5, 1], axis)
    target = TileTarget(IpuModel(tiles_per_ipu=16))
    pruned = popart_baseline(ir, target)
    monkeypatch.setattr(type(REGISTRY.layout_rule(next(
        op for op in ir.main_graph.ops if op.type.name == "Split"))), "popart_output_finder",
        lambda self, op, index: None)
    monkeypatch.setattr(DisjointRegions, "is_empty", lambda self: False)
    every = popart_baseline(ir, target)
    assert [(d.tensor_id, d.method, d.explanation) for d in pruned.decisions] == [
        (d.tensor_id, d.method, d.explanation) for d in every.decisions]
    for key, tiles in pruned.mappings.items():
        assert np.array_equal(tiles, every.mappings[key])
    assert any("cut" in d.explanation for d in pruned.decisions)  # through the Split
