"""Liveness per tile (cost/liveness.py through the cost walk), against hand counts and a
brute-force oracle that sums, at every schedule step, the bytes of each live tensor's
memory on each tile."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
from cost_rules import RULES, small_target
from hypothesis import given, settings
from hypothesis import strategies as st

from popart_unwind.cost import evaluate
from popart_unwind.cost.layouts import tile_bytes
from popart_unwind.cost.liveness import LivenessTracker
from popart_unwind.cost.walk import CostWalk
from popart_unwind.errors import PlanError
from popart_unwind.ir import ONNX_DOMAIN, Builder, Ir, OpType, TensorType
from popart_unwind.ir.tile_mapping import TileIntervals
from popart_unwind.ops import REGISTRY

SHAPE = (4, 8)
BYTES = 4 * 32  # one float32 tensor of SHAPE


def on(tile: int, numel: int = 32) -> np.ndarray:
    return np.full(numel, tile, np.int16)


def view_chain_ir():
    """a = relu(x); t = transpose(a) (a view); u = relu(t) -> output; y = relu(relu(w))."""
    b = Builder()
    x = b.add_input_tensor("float32", SHAPE, "x")
    w = b.add_initialized_input_tensor(np.zeros(SHAPE, np.float32), "w")
    a = b.ai_onnx.relu([x], name="a")
    t = b.ai_onnx.transpose([a], perm=[1, 0], name="t")
    b.add_output_tensor(b.ai_onnx.relu([t], name="u"))
    b.add_output_tensor(b.ai_onnx.relu([b.ai_onnx.relu([w], name="v")], name="y"))
    return b.ir()


@pytest.mark.parametrize("registry,results", [(RULES, 2), (REGISTRY, 1)],
                         ids=["test rules", "library rules"])
def test_peak_of_a_view_chain_by_hand(registry, results):
    report = evaluate(view_chain_ir(), small_target(4), {("", "x"): on(0), ("", "w"): on(1)},
                      registry=registry)
    # x on tile 0 and w on tile 1 always live. Tile 0: a, still held through its view t
    # when u is computed (a + u); tile 1: v and y at once (u lives on tile 0). The
    # library's relu works in place (the test rules have no in-place inputs): u
    # overwrites a through t, its only holder by then, and y overwrites v.
    assert report.always_live_bytes_per_tile.tolist() == [BYTES, BYTES, 0, 0]
    peak = (1 + results) * BYTES
    assert report.peak_bytes_per_tile.tolist() == [peak, peak, 0, 0]
    assert report.peak_tile_bytes == peak
    assert report.always_live_max_tile_bytes == BYTES
    assert report.fits


def test_a_weight_update_overwrites_the_weight_and_nothing_else_does():
    b = Builder()
    w = b.add_initialized_input_tensor(np.zeros(SHAPE, np.float32), "w")
    x = b.add_input_tensor("float32", SHAPE, "x")
    b.add_output_tensor(b.ai_onnx.neg([x], name="not_an_update"))  # x is streamed
    b.add_output_tensor(b.ai_onnx.sub([w, b.ai_onnx.relu([x], name="g")], name="w_new"))
    report = evaluate(b.ir(), small_target(4), {("", "x"): on(0), ("", "w"): on(0)})
    # x, w, the negation and g at once; the update takes w's memory, no more
    assert report.peak_bytes_per_tile.tolist() == [4 * BYTES, 0, 0, 0]
    moved = evaluate(b.ir(), small_target(4), {("", "x"): on(0), ("", "w"): on(1)})
    # the update still has w's layout (the next step reads it there), g is sent to it
    assert moved.peak_bytes_per_tile.tolist() == [3 * BYTES, BYTES, 0, 0]
    assert moved.exchange_bytes == BYTES


def test_a_view_is_not_counted_twice_and_keeps_what_it_views_live():
    b = Builder()
    x = b.add_input_tensor("float32", SHAPE, "x")
    a = b.ai_onnx.relu([x], name="a")
    views = [b.ai_onnx.transpose([a], perm=[1, 0], name=f"t{k}") for k in range(3)]
    b.add_output_tensor(b.ai_onnx.add([views[-1], views[0]], name="last"))
    report = evaluate(b.ir(), small_target(4), {("", "x"): on(2)})
    # x, a (once, whatever its three views) and the sum: all on tile 2; the sum cannot
    # overwrite a, which both its inputs view
    assert report.peak_bytes_per_tile.tolist() == [0, 0, 3 * BYTES, 0]


def test_dead_results_live_only_while_their_op_runs():
    b = Builder()
    x = b.add_input_tensor("float32", SHAPE, "x")
    b.ai_onnx.relu([x], name="unused")
    b.add_output_tensor(b.ai_onnx.neg([x], name="kept"))
    report = evaluate(b.ir(), small_target(4), {("", "x"): on(0)})
    assert report.peak_tile_bytes == 2 * BYTES  # x + one result, never both results


def call_ir():
    b = Builder()
    x = b.add_input_tensor("float32", SHAPE, "x")
    sub = b.create_subgraph_builder("sub")
    s = sub.add_input_tensor("float32", SHAPE, "s")
    sub.add_output_tensor(sub.ai_onnx.relu([sub.ai_onnx.relu([s])]))
    b.add_output_tensor(b.call(sub, [x]))
    return b.ir()


def test_a_callee_peak_is_added_at_its_call_site():
    report = evaluate(call_ir(), small_target(4),
                      {("", "x"): on(0), ("sub", "s"): on(1)}, registry=RULES)
    # Always live: x (tile 0). The callee's input s (tile 1) is the call's copy in, live
    # until the first relu has read it; then both relus are live at once on tile 1. At
    # the call, its output (a clone of the callee's, tile 1) joins the callee's peak.
    assert report.always_live_bytes_per_tile.tolist() == [BYTES, 0, 0, 0]
    assert report.peak_bytes_per_tile.tolist() == [BYTES, 3 * BYTES, 0, 0]


def test_fits_compares_the_busiest_tile_with_a_tile_budget():
    from popart_unwind.target import IpuModel, TileTarget
    target = TileTarget(IpuModel(tiles_per_ipu=4, bytes_per_tile=BYTES))
    report = evaluate(view_chain_ir(), target, {("", "x"): on(0), ("", "w"): on(1)})
    assert report.peak_tile_bytes == 2 * BYTES and not report.fits
    assert report.summary()["fits"] is False


def test_the_tracker_refuses_wrong_sizes_and_unwalked_callees():
    tracker = LivenessTracker(4)
    with pytest.raises(PlanError, match="3 tiles"):
        tracker.add_always_live(np.zeros(3, np.int64))
    tracker.begin_graph("")
    with pytest.raises(PlanError, match="'sub'"):
        tracker.step(["sub"])


# -- the brute-force oracle ------------------------------------------------------------------
class _Recording(CostWalk):
    """The cost walk, keeping every tensor's layout."""

    def write(self, tensor, value):
        super().write(tensor, value)
        self.layouts[(tensor.graph.id, tensor.id)] = np.asarray(value).copy()


def replay(ir, target, plan, registry=REGISTRY):
    """The producer-less tensors' bytes per tile; per schedule step of the main graph (no
    calls): the op, each tile's total, and the bytes of every tensor holding memory
    (producer-less ones, and the buffers of the computed tensors live then: produced by
    then, read at or after the step; views and results computed in place resolved to the
    memory they hold); and the buffers each computed tensor holds."""
    target.reset()
    walk = _Recording(ir, target, plan, registry, ir.options.unwind_valuations)
    walk.layouts = {}
    walk.run(ir)
    graph = ir.main_graph
    schedule = graph.schedule()
    step_of = {op.id: k for k, op in enumerate(schedule)}

    def nbytes(tensor):
        layout = walk.layouts[(graph.id, tensor.id)]
        return tile_bytes(layout, target.dtype_size(tensor.dtype), target.num_tiles)

    def dies(tensor):
        return len(schedule) if tensor.id in graph.output_ids else max(
            (step_of[reader.id] for reader in tensor.consumers),
            default=step_of[tensor.producer.id])

    def live_at(tensor, step):
        return tensor.producer is not None and step_of[tensor.producer.id] <= step <= dies(tensor)

    memo = {}

    def touches_always_live(tensor):
        """Whether ``tensor`` is, or shares memory with, a producer-less tensor."""
        op = tensor.producer
        if op is None:
            return True
        rule = registry.layout_rule(op)
        if rule.aliases_outputs(op):
            return any(touches_always_live(op.input(k)) for k in rule.viewed_inputs(op))
        overwritten = in_place_on(op, tensor, rule)
        return overwritten is not None and touches_always_live(overwritten)

    def buffers(tensor):
        if tensor.producer is None:
            return set()
        if tensor.id not in memo:
            memo[tensor.id] = _buffers(tensor)
        return memo[tensor.id]

    def _buffers(tensor):
        op = tensor.producer
        rule = registry.layout_rule(op)
        if rule.aliases_outputs(op):
            return set().union(*(buffers(op.input(k)) for k in rule.viewed_inputs(op)))
        overwritten = in_place_on(op, tensor, rule)
        return {tensor.id} if overwritten is None else buffers(overwritten)

    def in_place_on(op, out, rule):
        """The input ``op`` overwrites, found the slow way: every condition checked over
        the whole schedule."""
        if len(op.outputs) != 1:
            return None
        step = step_of[op.id]
        for index in rule.inplace_inputs(op):
            tensor = op.input(index)
            if (tensor.dtype, tensor.shape) != (out.dtype, out.shape) \
                    or tensor.id in graph.output_ids \
                    or max(step_of[reader.id] for reader in tensor.consumers) != step \
                    or not np.array_equal(walk.layouts[(graph.id, tensor.id)],
                                          walk.layouts[(graph.id, out.id)]):
                continue
            held = buffers(tensor)
            if tensor.producer is None or not held:  # a weight: only its update
                others = {t.id for t in op.inputs if t is not tensor}
                if tensor.producer is None and out.id in graph.output_ids and others \
                        and tensor.tensor_type is TensorType.VARIABLE:
                    return tensor
                continue
            sharing = [other for other in graph.tensors if other is not tensor
                       and live_at(other, step) and other is not out
                       and buffers(other) & held]
            if not sharing and not touches_always_live(tensor):
                return tensor
        return None

    always = {t.id: nbytes(t) for t in graph.producerless_tensors()}
    steps = []
    for step, op in enumerate(schedule):
        live = set()
        for tensor in graph.tensors:
            if live_at(tensor, step):
                live |= buffers(tensor)
        holdings = {**always, **{name: nbytes(graph.tensor(name)) for name in live}}
        total = sum(holdings.values(), np.zeros(target.num_tiles, np.int64))
        steps.append((op, total, holdings))
    return always, steps, {t.id: buffers(t) for t in graph.tensors if t.producer is not None}


def brute_force(ir, target, plan, registry=REGISTRY):
    """(always live, peak) per tile of a graph without calls: each tile's most over the
    steps of ``replay``, never below its always-live bytes."""
    always_by_tensor, steps, _ = replay(ir, target, plan, registry)
    always = sum(always_by_tensor.values(), np.zeros(target.num_tiles, np.int64))
    peak = always.copy()
    for _, total, _ in steps:
        peak = np.maximum(peak, total)
    return always, peak


UNARY = ("relu", "neg", "sigmoid")


@st.composite
def random_chains(draw):
    """A graph of random unary, binary and view ops (transposes, concats, slices) over two
    inputs and a weight, with random graph outputs, and a random plan on 8 tiles."""
    b = Builder()
    pool = [b.add_input_tensor("float32", SHAPE, "x"),
            b.add_input_tensor("float32", SHAPE, "y"),
            b.add_initialized_input_tensor(np.zeros(SHAPE, np.float32), "w")]
    shapes = {name: SHAPE for name in pool}
    for k in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(("unary", "binary", "transpose", "concat", "slice")))
        first = draw(st.sampled_from(pool))
        if kind == "unary":
            out = getattr(b.ai_onnx, draw(st.sampled_from(UNARY)))([first], name=f"op{k}")
            shapes[out] = shapes[first]
        elif kind == "binary":
            second = draw(st.sampled_from([t for t in pool if shapes[t] == shapes[first]]))
            out = b.ai_onnx.add([first, second], name=f"op{k}")
            shapes[out] = shapes[first]
        elif kind == "transpose":
            out = b.ai_onnx.transpose([first], perm=[1, 0], name=f"op{k}")
            shapes[out] = shapes[first][::-1]
        elif kind == "concat":  # a view of both inputs
            second = draw(st.sampled_from([t for t in pool if shapes[t] == shapes[first]]))
            out = b.ai_onnx.concat([first, second], axis=0, name=f"op{k}")
            shapes[out] = (2 * shapes[first][0], shapes[first][1])
        else:  # the first half of the rows: a view of part of its input
            half = max(1, shapes[first][0] // 2)
            bounds = [b.add_constant(np.array([value], np.int64)) for value in (0, half, 0)]
            out = b.ai_onnx.slice([first, *bounds], name=f"op{k}")
            shapes[out] = (half, shapes[first][1])
        pool.append(out)
    computed = pool[3:]
    outputs = draw(st.lists(st.sampled_from(computed), min_size=1, unique=True))
    for name in outputs:
        b.add_output_tensor(name)
    ir = b.ir()
    plan = {("", tensor.id): np.asarray(draw(st.lists(
                st.integers(0, 7), min_size=prod(tensor.shape), max_size=prod(tensor.shape))),
                np.int16)
            for tensor in ir.main_graph.producerless_tensors()}
    return ir, plan


@settings(max_examples=40, deadline=None)
@given(random_chains())
def test_liveness_matches_the_brute_force_oracle_and_its_laws(case):
    ir, plan = case
    target = small_target(8)
    report = evaluate(ir, target, plan)
    always, peak = brute_force(ir, target, plan)
    _, _, held = replay(ir, small_target(8), plan)
    assert report.always_live_bytes_per_tile.tolist() == always.tolist()
    assert report.peak_bytes_per_tile.tolist() == peak.tolist()
    # the floor: the most bytes live at once on all tiles together, spread evenly
    _, steps, _ = replay(ir, target, plan)
    together = max([int(always.sum())] + [int(total.sum()) for _, total, _ in steps])
    assert report.peak_tile_bytes_floor == -(-together // 8) <= report.peak_tile_bytes
    # the same plan held as Poplar intervals costs the same
    intervals = {k: TileIntervals.from_tiles(tiles, 8) for k, tiles in plan.items()}
    again = evaluate(ir, small_target(8), intervals)
    assert again.summary() == report.summary()
    assert again.peak_bytes_per_tile.tolist() == report.peak_bytes_per_tile.tolist()
    # the laws: the peak holds the always-live bytes and every tensor's own memory
    assert (report.peak_bytes_per_tile >= report.always_live_bytes_per_tile).all()
    expected_always = sum(tile_bytes(tiles, target.dtype_size(
        ir.main_graph.tensor(name).dtype), 8) for (_, name), tiles in plan.items())
    assert report.always_live_bytes_per_tile.tolist() == expected_always.tolist()
    walk_target = small_target(8)
    walk = _Recording(ir, walk_target, plan, REGISTRY, ir.options.unwind_valuations)
    walk.layouts = {}
    walk.run(ir)
    for (_, name), layout in walk.layouts.items():
        tensor = ir.main_graph.tensor(name)
        op = tensor.producer
        if op is not None and REGISTRY.layout_rule(op).aliases_outputs(op):
            continue  # a view's elements may repeat (Concat of x with x): no memory of its own
        if op is not None and held[name] != {name}:
            continue  # computed in place: it holds the memory it overwrote
        own = tile_bytes(layout, target.dtype_size(tensor.dtype), 8)
        if op is not None:
            own = own + report.always_live_bytes_per_tile  # new memory beside the rest
        assert (report.peak_bytes_per_tile >= own).all(), name
    assert report.peak_tile_bytes >= report.always_live_max_tile_bytes


def test_evaluation_is_deterministic():
    ir = view_chain_ir()
    plan = {("", "x"): on(0), ("", "w"): on(1)}
    first, again = (evaluate(ir, small_target(4), plan) for _ in range(2))
    assert np.array_equal(first.peak_bytes_per_tile, again.peak_bytes_per_tile)
    assert first.summary() == again.summary()


def if_ir():
    """If(cond): then negates its input once, else twice (two results live at once)."""
    ir = Ir()
    main = ir.main_graph
    cond = main.add_input("cond", "bool", ())
    a = main.add_input("a", "float32", SHAPE)
    for name, negations in (("then", 1), ("else", 2)):
        branch = ir.create_graph(name)
        value = branch.add_input("x", "float32", SHAPE)
        for _ in range(negations):
            op = branch.create_op(OpType(ONNX_DOMAIN, "Neg", 13), [value], 1)
            value = op.output(0)
            value.shape = SHAPE
        branch.mark_output(value)
    op = main.create_op(OpType(ONNX_DOMAIN, "If", 13), [cond, a], 1, {
        "then_branch": "then", "else_branch": "else", "then_inputs": [[1, 0]],
        "else_inputs": [[1, 0]], "then_outputs": [[0, 0]], "else_outputs": [[0, 0]]})
    op.output(0).shape = SHAPE
    main.mark_output(op.output(0))
    return ir


def test_an_if_holds_the_larger_branch_peak_per_tile_not_both():
    plan = {("", "cond"): on(0, 1), ("", "a"): on(0), ("then", "x"): on(2),
            ("else", "x"): on(2)}
    report = evaluate(if_ir(), small_target(4), plan, registry=RULES)
    transient = report.peak_bytes_per_tile - report.always_live_bytes_per_tile
    # the If's output (a clone of a branch's, tile 2) and the else branch's two results
    assert transient.tolist() == [0, 0, 3 * BYTES, 0]


def scatter_into(fill: np.ndarray) -> Ir:
    """out = ScatterND(fill, indices, updates) + 1: an embedding gradient's shape."""
    b = Builder()
    updates = b.add_input_tensor("float32", (2, SHAPE[1]), "updates")
    data = b.add_constant(fill, name="fill")
    indices = b.add_constant(np.array([[1], [3]], np.int64), name="indices")
    scattered = b.ai_onnx.scatternd([data, indices, updates], name="scatter")
    one = b.add_constant(np.float32(1.0), name="one")
    b.add_output_tensor(b.ai_onnx.add([scattered, one], name="out"))
    return b.ir()


def test_a_fill_its_scatter_makes_is_no_constant_held_all_along():
    """PopART's GatherGrad zeroes its result at run time: a scatter into a fill of zeros
    holds that memory as its result only; a fill of varying values stays a constant."""
    zeros = np.zeros(SHAPE, np.float32)
    varied = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    mappings = {}
    for ir in (scatter_into(zeros), scatter_into(varied)):
        mappings[ir] = {(g.id, t.id): on(0, int(np.prod(t.shape or ())))
                        for g in ir.graphs for t in g.producerless_tensors()}
    filled, constant = (evaluate(ir, small_target(4), mapping)
                        for ir, mapping in mappings.items())
    data_bytes = int(np.prod(SHAPE)) * 4
    assert constant.always_live_bytes_per_tile[0] - filled.always_live_bytes_per_tile[0] \
        == data_bytes
    assert constant.peak_tile_bytes - filled.peak_tile_bytes == data_bytes
