"""Planning's own memory at size (docs/memory.md, "The planner's own memory"): the chunked
comparisons equal their whole-array oracles, large layouts held as intervals cost the same
as tile arrays, fills are folded without their elements, large hook answers are shared
while held, and costing a [4096, 4096] matmul stays under traced-memory bounds its earlier
forms exceeded."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from popart_unwind.transforms import run_pipeline

from popart_unwind.baselines import linear_plan
from popart_unwind.cost import evaluate, layouts
from popart_unwind.cost.walk import CostWalk
from popart_unwind.ir import Builder, Ir
from popart_unwind.ir.interpreter import key
from popart_unwind.ir.serialize import array_digest
from popart_unwind.ir.tile_mapping import TileIntervals, tile_mapping
from popart_unwind.machine import IpuModel, TileTarget, exchange, tile_target
from popart_unwind.ops import REGISTRY, layout_rule
from popart_unwind.report.demo_model import build_demo_ir


@contextlib.contextmanager
def _set(module, name, value):
    """``module.name`` set to ``value`` for the block (hypothesis runs many examples in one
    test, which pytest's function-scoped monkeypatch does not)."""
    kept = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, kept)


def _need_oracle(readers, held, element_bytes, num_tiles):
    """Element by element: a received element starts a region unless the one before it was
    received by the same tile from the same tile."""
    received = np.zeros(num_tiles, np.int64)
    regions = np.zeros(num_tiles, np.int64)
    for k, (tile, source) in enumerate(zip(readers, held, strict=True)):
        if tile == source:
            continue
        received[tile] += element_bytes
        if not (k and readers[k - 1] == tile and held[k - 1] == source
                and held[k - 1] != readers[k - 1]):
            regions[tile] += 1
    return received, regions


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4).flatmap(lambda tiles: st.tuples(
    st.just(tiles), st.lists(st.tuples(st.integers(0, tiles - 1), st.integers(0, tiles - 1)),
                             max_size=40))), st.integers(1, 7))
def test_same_shape_reads_in_chunks_equal_the_element_oracle(case, chunk):
    num_tiles, pairs = case
    readers = np.array([p[0] for p in pairs], np.int16)
    held = np.array([p[1] for p in pairs], np.int16)
    with _set(exchange, "SAME_SHAPE_CHUNK", chunk):
        need = exchange.read_need(readers, None, held, 4, num_tiles)
    received, regions = _need_oracle(readers, held, 4, num_tiles)
    np.testing.assert_array_equal(need.received_bytes, received)
    np.testing.assert_array_equal(need.regions, regions)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4).flatmap(lambda tiles: st.tuples(
    st.just(tiles), st.lists(st.tuples(st.integers(0, tiles - 1), st.integers(1, 5)),
                             max_size=12),
    st.lists(st.tuples(st.integers(0, tiles - 1), st.integers(1, 5)), max_size=12))),
    st.integers(1, 7))
def test_same_shape_runs_in_chunks_equal_the_element_oracle(case, chunk):
    """Layouts made of runs (as real ones are), the figures counted run by run, equal the
    element-by-element oracle wherever the chunks cut the runs."""
    num_tiles, reader_runs, held_runs = case
    readers = np.repeat([t for t, _ in reader_runs], [n for _, n in reader_runs])
    held = np.repeat([t for t, _ in held_runs], [n for _, n in held_runs])
    size = min(readers.size, held.size)
    readers, held = readers[:size].astype(np.int16), held[:size].astype(np.int16)
    with _set(exchange, "SAME_SHAPE_CHUNK", chunk):
        need = exchange.read_need(readers, None, held, 4, num_tiles)
    received, regions = _need_oracle(readers, held, 4, num_tiles)
    np.testing.assert_array_equal(need.received_bytes, received)
    np.testing.assert_array_equal(need.regions, regions)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=50),
       st.integers(1, 9))
def test_count_equal_in_chunks_equals_numpy(pairs, chunk):
    a = np.array([p[0] for p in pairs], np.int16)
    b = np.array([p[1] for p in pairs], np.int16)
    with _set(layout_rule, "COUNT_CHUNK", chunk):
        assert layout_rule.count_equal(a, b) == int(np.count_nonzero(a == b))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 7), st.integers(1, 30), st.integers(0, 2**31))
def test_count_equal_rows_of_a_transposed_view_equals_numpy(rows, cols, chunk, seed):
    """A layout against a matmul grid's transpose (a strided view), a band of rows at a
    time, bands of one row or of several, or the whole."""
    rng = np.random.default_rng(seed)
    layout = rng.integers(0, 3, (rows, cols)).astype(np.int16)
    grid = rng.integers(0, 3, (cols, rows)).astype(np.int16)
    with _set(layout_rule, "COUNT_CHUNK", chunk):
        assert layout_rule.count_equal_rows(layout, grid.T) == \
            int(np.count_nonzero(layout == grid.T))


def _costs(ir, target, mappings):
    report = evaluate(ir, target, mappings)
    return (report.summary(), [tuple(vars(row).values()) if hasattr(row, "__dict__") else row
                               for row in report.ops],
            report.received_bytes_per_tile.tolist(), report.resident_bytes_per_tile.tolist())


def test_layouts_held_as_intervals_cost_what_tile_arrays_cost(monkeypatch):
    ir = build_demo_ir()
    ir.options = ir.options.__class__(enable_unwind_layouts=False)
    run_pipeline(ir)
    target = TileTarget(IpuModel(tiles_per_ipu=64))
    mappings = {k: tile_mapping(v, 64) for k, v in linear_plan(ir, target).items()}
    whole = _costs(ir, target, mappings)
    monkeypatch.setattr(layouts, "HELD_AS_INTERVALS", 1)  # every layout held and read so
    assert _costs(ir, target, mappings) == whole
    walk = CostWalk(ir, target.with_plans({}), mappings, REGISTRY,
                    ir.options.unwind_valuations)
    walk.report()
    # a layout smaller than the per-tile index of intervals stays an array (held_layout)
    outputs = [t for t in ir.main_graph.tensors
               if t.is_graph_output() and t.producer and 2 * t.nelms() > 8 * 65]
    assert outputs and all(isinstance(walk.env[key(t)], TileIntervals) for t in outputs)


def test_a_fill_is_folded_without_its_elements():
    shape = [4096, 4096]
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["w"], value=helper.make_tensor(
                 "v", TensorProto.FLOAT, [1], [0.5])),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "fill", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4096])],
        [helper.make_tensor("s", TensorProto.INT64, [2], shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ir = Ir.from_onnx(model)
    run_pipeline(ir)
    [weight] = [t for t in ir.main_graph.tensors if t.data is not None and t.nelms() > 1000]
    data = np.asarray(weight.data)
    assert data.shape == tuple(shape) and data.strides == (0, 0)  # one element, broadcast
    assert float(data[123, 4000]) == 0.5
    made = np.full(shape, 0.5, np.float32)
    header = f"{made.dtype.str}{tuple(made.shape)}".encode()
    assert array_digest(data) == hashlib.sha256(header + made.tobytes()).hexdigest()


def _traced_peak_costing_a_matmul(size: int) -> int:
    b = Builder()
    lhs = b.add_input_tensor("float32", (size, size), "a")
    rhs = b.add_input_tensor("float32", (size, size), "b")
    b.add_output_tensor(b.ai_onnx.matmul([lhs, rhs], name="mm"))
    ir = b.ir()
    target = TileTarget(IpuModel())
    mappings = {k: tile_mapping(v, target.num_tiles) for k, v in linear_plan(ir, target).items()}
    tracemalloc.start()
    try:
        evaluate(ir, target, mappings)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_costing_a_4096_square_matmul_holds_few_tile_arrays():
    """16.8 M elements an operand: a tile array is 32 MiB, and the target's room of hook
    answers keeps the plan's three layouts of this size. Holding both operands, the
    output and the plan's layouts expanded, with whole-array masks beside them, peaked at
    352 MiB traced; reading one operand at a time, in chunks, at 176 MiB; with the result
    held as intervals while the operands are priced, at 161 MiB (measured)."""
    assert _traced_peak_costing_a_matmul(4096) < 185 * 2**20


def test_costing_a_matmul_whose_layouts_the_room_cannot_keep_holds_two_arrays():
    """A [8192, 8192] matmul's layouts (128 MiB each) are too large for the room of hook
    answers; here a room of 64 MiB does the same to the 32 MiB layouts of a [4096, 4096]
    one. Holding the result, both operands as the plan wants them and the plan's layout
    asked again, as the walk did, peaked at 144 MiB traced; two arrays at a time (an
    operand and the plan's layout of it, the repeated question answered with the array
    already held) and chunked counts, at 77 MiB (measured)."""
    with _set(tile_target, "ANSWER_BYTES_KEPT", 64 * 2**20):
        assert _traced_peak_costing_a_matmul(4096) < 100 * 2**20


def test_a_large_answer_asked_again_while_held_is_the_same_array():
    """The room does not keep an answer over a quarter of it, but while a reader holds it
    the same question gives that array (read-only) instead of a second copy."""
    answers = tile_target._Answers()
    made = []

    def compute():
        made.append(np.zeros(tile_target.ANSWER_BYTES_KEPT // 4 + 2, np.int8))
        return made[-1]

    first = answers.get(("big",), compute)
    assert answers.get(("big",), compute) is first and len(made) == 1
    assert not first.flags.writeable
    del first, made[:]
    gc.collect()
    again = answers.get(("big",), compute)
    assert len(made) == 1 and again is made[0]  # made again once no reader held it
