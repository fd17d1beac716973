"""The cost model on hand-built IRs whose costs are known."""

from __future__ import annotations

from math import ceil

import numpy as np
import pytest
from cost_rules import RULES, const, small_target, weight

from popart_unwind.baselines import linear_plan
from popart_unwind.cost import evaluate, tile_bytes
from popart_unwind.errors import PlanError
from popart_unwind.ir import ONNX_DOMAIN, Builder, Ir, OpType
from popart_unwind.ir.tile_mapping import tile_mapping
from popart_unwind.machine import IpuModel, TileTarget, read_need

SHAPE = (4, 8)
NUMEL = 32


def add_ir():
    b = Builder()
    a = b.add_input_tensor("float32", SHAPE, "a")
    c = b.add_input_tensor("float32", SHAPE, "c")
    out = b.ai_onnx.add([a, c], name="add")
    b.add_output_tensor(out)
    return b.ir()


def tiles_of(tile: int, numel: int = NUMEL) -> np.ndarray:
    return np.full(numel, tile, dtype=np.int16)


def test_add_of_tensors_on_different_tiles_moves_one_operand():
    target = small_target()
    report = evaluate(add_ir(), target, {("", "a"): tiles_of(0), ("", "c"): tiles_of(1)},
                      registry=RULES)
    row = report.ops[0]
    assert row.type == "Add" and row.name == "add"
    assert row.exchange_bytes == NUMEL * 4
    assert row.busiest_tile_bytes == NUMEL * 4
    model = target.model
    assert row.cycles == ceil(NUMEL * 4 / model.exchange_bytes_per_cycle) + model.sync_cycles
    assert row.regions == 1 and row.max_tile_regions == 1
    assert report.exchange_bytes == NUMEL * 4
    assert report.exchange_cycles == row.cycles
    assert report.received_bytes_per_tile[0] == NUMEL * 4
    assert report.received_bytes_per_tile.sum() == NUMEL * 4


def test_equal_mappings_move_nothing_and_cost_no_cycles():
    tiles = np.arange(NUMEL, dtype=np.int16) % 16
    report = evaluate(add_ir(), small_target(), {("", "a"): tiles, ("", "c"): tiles.copy()},
                      registry=RULES)
    assert report.exchange_bytes == 0
    assert report.exchange_cycles == 0
    assert report.ops[0].cycles == 0
    assert report.objective == report.upper_bound == NUMEL  # one elementwise pair, value 1


def test_objective_counts_equal_elements_of_elementwise_partners():
    a = np.zeros(NUMEL, np.int16)
    c = np.where(np.arange(NUMEL) < 10, 0, 1).astype(np.int16)
    report = evaluate(add_ir(), small_target(), {("", "a"): a, ("", "c"): c}, registry=RULES)
    assert report.objective == 10
    assert report.upper_bound == NUMEL


def test_regions_count_runs_from_distinct_source_tiles():
    need = read_need(np.zeros(6, np.int64), None, np.array([1, 1, 2, 2, 0, 1]), 4, 3)
    assert need.received_bytes.tolist() == [5 * 4, 0, 0]
    assert need.regions.tolist() == [3, 0, 0]  # [1,1], [2,2], [1]


def matmul_ir(rows=64, inner=32, cols=48):
    b = Builder()
    x = b.add_input_tensor("float32", (rows, inner), "x")
    w = weight(b, (inner, cols), "w")
    b.add_output_tensor(b.ai_onnx.matmul([x, w], name="mm"))
    return b.ir(), (1, rows, inner, cols)


def test_matmul_operands_where_the_plan_wants_them_move_less_than_linear():
    ir, groups = matmul_ir()
    target = small_target(64)
    ideal = {("", "x"): target.matmul_tiles(*groups, "float32", "lhs"),
             ("", "w"): target.matmul_tiles(*groups, "float32", "rhs")}
    best = evaluate(ir, target, ideal, registry=RULES)
    linear = evaluate(ir, target, linear_plan(ir, target), registry=RULES)
    assert best.exchange_bytes < linear.exchange_bytes
    assert best.exchange_cycles < linear.exchange_cycles
    assert best.objective == best.upper_bound == 10 * (64 * 32 + 32 * 48)
    assert linear.objective < linear.upper_bound == best.upper_bound


def test_resident_bytes_are_parameters_plus_the_largest_op_live_set():
    b = Builder()
    a = b.add_input_tensor("float32", SHAPE, "a")
    c = b.add_input_tensor("float32", SHAPE, "c")
    total = b.ai_onnx.add([a, c], name="add")
    flat = b.ai_onnx.reshape([total, const(b, [NUMEL], "shape")], name="flat")
    b.add_output_tensor(flat)
    ir = b.ir()
    target = small_target()
    plan = {("", "a"): tiles_of(0), ("", "c"): tiles_of(1),
            ("", "shape"): tiles_of(2, 1)}
    report = evaluate(ir, target, plan, registry=RULES)
    parameters = NUMEL * 4 * 2 + 8  # a, c and the int64 shape constant
    assert report.resident_bytes_per_tile.sum() == parameters + NUMEL * 4  # + the sum
    # The sum is cloned from ``a`` (tile 0): a and the sum live there; c on tile 1.
    assert report.resident_bytes_per_tile[:3].tolist() == [2 * NUMEL * 4, NUMEL * 4, 8]
    assert report.max_tile_bytes == 2 * NUMEL * 4
    assert report.tiles_over_budget == 0
    assert report.ops[1].exchange_bytes == 0  # the reshape is a view


def test_tiles_over_budget_are_counted():
    b = Builder()
    x = b.add_input_tensor("float32", (1000,), "x")
    b.add_output_tensor(b.ai_onnx.relu([x]))
    ir = b.ir()
    from popart_unwind.target import IpuModel, TileTarget
    target = TileTarget(IpuModel(tiles_per_ipu=4, bytes_per_tile=1024))
    report = evaluate(ir, target, {("", "x"): np.zeros(1000, np.int16)}, registry=RULES)
    assert report.max_tile_bytes == 8000  # x and its Relu on tile 0
    assert report.tiles_over_budget == 1


def test_missing_mapping_names_the_tensor():
    ir = add_ir()
    with pytest.raises(PlanError, match="'c'"):
        evaluate(ir, small_target(), {("", "a"): tiles_of(0)}, registry=RULES)
    ir.main_graph.tensor("a").tile_mapping = tile_mapping(tiles_of(0), 16)
    with pytest.raises(PlanError, match=r"'c'.*no tile mapping"):
        evaluate(ir, small_target(), registry=RULES)


def test_bad_plan_arrays_are_refused():
    ir = add_ir()
    with pytest.raises(PlanError, match=r"'a'.*31 elements"):
        evaluate(ir, small_target(), {("", "a"): tiles_of(0, 31), ("", "c"): tiles_of(0)},
                 registry=RULES)
    with pytest.raises(PlanError, match=r"'c'.*\[0, 16\)"):
        evaluate(ir, small_target(), {("", "a"): tiles_of(0), ("", "c"): tiles_of(16)},
                 registry=RULES)


def test_ir_mappings_and_explicit_mappings_agree_and_runs_are_deterministic():
    ir, _ = matmul_ir()
    target = small_target(64)
    plan = linear_plan(ir, target)
    first = evaluate(ir, target, plan, registry=RULES)
    for (graph_id, tensor_id), tiles in plan.items():
        ir.graph(graph_id).tensor(tensor_id).tile_mapping = tile_mapping(tiles, 64)
    again = evaluate(ir, target, registry=RULES)
    assert first.summary() == again.summary()
    assert first.ops == again.ops
    assert np.array_equal(first.resident_bytes_per_tile, again.resident_bytes_per_tile)
    assert np.array_equal(first.received_bytes_per_tile, again.received_bytes_per_tile)


def test_linear_outputs_restart_the_rotation_on_every_evaluation():
    b = Builder()
    x = b.add_input_tensor("float32", (300,), "x")
    b.add_output_tensor(b.ai_onnx.softmax([x]))  # unmodelled here: a linear output
    ir = b.ir()
    target = small_target()
    plan = {("", "x"): np.arange(300, dtype=np.int16) % 16}
    first = evaluate(ir, target, plan, registry=RULES)
    target.linear_tiles((1000,), "float32")  # moves the rotation on
    assert evaluate(ir, target, plan, registry=RULES).summary() == first.summary()
    assert np.array_equal(evaluate(ir, target, plan, registry=RULES).resident_bytes_per_tile,
                          first.resident_bytes_per_tile)


def test_summary_has_the_compared_figures():
    report = evaluate(add_ir(), small_target(), {("", "a"): tiles_of(0), ("", "c"): tiles_of(1)},
                      registry=RULES)
    assert set(report.summary()) == {"objective", "upper_bound", "exchange_bytes",
                                     "exchange_cycles", "max_tile_bytes", "regions",
                                     "avoidable_exchange_bytes", "peak_tile_bytes",
                                     "always_live_max_tile_bytes", "fits", "cycles",
                                     "compute_cycles", "peak_tile_bytes_floor"}
    assert report.op(report.ops[0].op_id) is report.ops[0]
    assert report.cycles == report.exchange_cycles + report.partials_cycles \
        + report.compute_cycles == sum(row.total_cycles for row in report.ops)


def call_ir(calls: int = 1):
    b = Builder()
    x = b.add_input_tensor("float32", SHAPE, "x")
    sub = b.create_subgraph_builder("sub")
    s = sub.add_input_tensor("float32", SHAPE, "s")
    sub.add_output_tensor(sub.ai_onnx.relu([s], name="relu"))
    value = x
    for _ in range(calls):
        value = b.call(sub, [value])
    b.add_output_tensor(value)
    return b.ir()


def test_call_copies_are_charged_like_elementwise_copies():
    ir = call_ir()
    target = small_target()
    report = evaluate(ir, target, {("", "x"): tiles_of(0), ("sub", "s"): tiles_of(1)},
                      registry=RULES)
    call_row = next(row for row in report.ops if row.type == "Call")
    relu_row = next(row for row in report.ops if row.type == "Relu")
    assert call_row.exchange_bytes == NUMEL * 4  # copy in: tile 0 -> tile 1
    assert call_row.graph_id == "" and relu_row.graph_id == "sub"
    assert relu_row.exchange_bytes == 0
    # copy-in pair disagrees everywhere; the copy out is a clone of the callee's output
    assert report.objective == NUMEL and report.upper_bound == 2 * NUMEL
    assert report.received_bytes_per_tile[1] == NUMEL * 4


def test_planned_call_outputs_are_honoured_and_copied_out():
    ir = call_ir()
    call = next(op for op in ir.main_graph.ops if op.type.name == "Call")
    plan = {("", "x"): tiles_of(1), ("sub", "s"): tiles_of(1),
            ("", call.output(0).id): tiles_of(3)}
    report = evaluate(ir, small_target(), plan, registry=RULES)
    assert report.op(call.id).exchange_bytes == NUMEL * 4  # copy out: tile 1 -> tile 3
    assert report.received_bytes_per_tile[3] == NUMEL * 4


def test_subgraph_ops_count_once_per_call_site():
    ir = call_ir(calls=2)
    plan = {("", "x"): tiles_of(0), ("sub", "s"): tiles_of(1)}
    report = evaluate(ir, small_target(), plan, registry=RULES)
    relu_row = next(row for row in report.ops if row.type == "Relu")
    assert relu_row.executions == 2
    calls = [row for row in report.ops if row.type == "Call"]
    # first call copies x in (tile 0 -> 1); the second's input is already on tile 1
    assert [row.exchange_bytes for row in calls] == [NUMEL * 4, 0]
    assert report.exchange_bytes == NUMEL * 4


def test_tile_bytes_weights_elements_by_size():
    assert tile_bytes(np.array([0, 0, 2]), 2, 4).tolist() == [4, 0, 2, 0]


def loop_ir():
    """v -> Loop(body: v -> Relu(v)) -> out, with the condition passed straight through."""
    ir = Ir()
    main, body = ir.main_graph, ir.create_graph("body")
    trips = main.add_constant("trips", np.array(3, np.int64))
    cond = main.add_constant("cond", np.array(True))
    v = main.add_input("v", "float32", SHAPE)
    body.add_input("iteration", "int64", ())
    body_cond = body.add_input("body_cond", "bool", ())
    v_in = body.add_input("v_in", "float32", SHAPE)
    relu = body.create_op(OpType(ONNX_DOMAIN, "Relu", 13), [v_in], ["v_out"])
    relu.output(0).shape = SHAPE
    body.mark_output(body_cond)
    body.mark_output(relu.output(0))
    loop = main.create_op(OpType(ONNX_DOMAIN, "Loop", 13), [trips, cond, v], ["final"],
                          {"body": "body"})
    loop.output(0).shape = SHAPE
    main.mark_output(loop.output(0))
    ir.verify()
    return ir, loop


def test_loop_copies_in_out_and_between_iterations():
    ir, loop = loop_ir()
    plan = {("", "trips"): tiles_of(0, 1), ("", "cond"): tiles_of(0, 1),
            ("", "v"): tiles_of(0), ("body", "iteration"): tiles_of(0, 1),
            ("body", "body_cond"): tiles_of(0, 1), ("body", "v_in"): tiles_of(1)}
    report = evaluate(ir, small_target(), plan, registry=RULES)
    # in: trips, cond (same tiles), v (tile 0 -> 1); out: final clones v_out; feedback
    # v_out -> v_in and body_cond -> body_cond are on the same tiles
    assert report.op(loop.id).exchange_bytes == NUMEL * 4
    copied_in, copied_out, fed_back = 1 + 1 + NUMEL, NUMEL, 1 + NUMEL
    assert report.upper_bound == copied_in + copied_out + fed_back
    assert report.objective == report.upper_bound - NUMEL


def test_compute_cycles_count_the_busiest_tile_a_vector_per_cycle():
    """An elementwise op computes its busiest tile's elements as Poplibs' elementwise vertex
    does: split over six workers, one 64-bit vector (two float32) per worker cycle after 29
    fixed ones, six worker cycles per tile cycle, 11 supervisor cycles; without vertex
    costs, one vector per cycle. A view computes nothing."""
    b = Builder()
    a = b.add_input_tensor("float32", SHAPE, "a")
    c = b.add_input_tensor("float32", SHAPE, "c")
    total = b.ai_onnx.add([a, c], name="add")
    b.add_output_tensor(b.ai_onnx.transpose([total], perm=[1, 0], name="flat"))
    ir = b.ir()
    tiles = np.repeat(np.array([0, 1, 2], np.int16), [20, 8, 4])  # 20 on the busiest tile
    report = evaluate(ir, small_target(), {("", "a"): tiles, ("", "c"): tiles.copy()})
    rows = {row.name: row for row in report.ops}
    assert rows["add"].compute_cycles == 6 * (29 + 2) + 11  # ceil(20 / 6) = 4: two vectors
    assert rows["flat"].compute_cycles == 0
    assert report.compute_cycles == sum(row.compute_cycles for row in report.ops)
    peak_only = TileTarget(IpuModel(tiles_per_ipu=16, vertex_costs=False))
    report = evaluate(ir, peak_only, {("", "a"): tiles, ("", "c"): tiles.copy()})
    assert {row.name: row.compute_cycles for row in report.ops}["add"] == 20 // 2


def test_a_lookup_computes_its_rows_not_its_table():
    b = Builder()
    table = weight(b, (1000, 8), "table")
    ids = b.add_input_tensor("int64", (4,), "ids")
    b.add_output_tensor(b.ai_onnx.gather([table, ids], axis=0, name="lookup"))
    ir = b.ir()
    target = small_target()
    on_one_tile = {("", "table"): np.zeros(8000, np.int16), ("", "ids"): np.zeros(4, np.int16)}
    row = next(r for r in evaluate(ir, target, on_one_tile).ops if r.name == "lookup")
    # at most the 32 output elements (or the 4 ids) on one tile, not the 8,000 of the table
    assert row.compute_cycles <= target.elementwise_cycles(32, "float32")
    assert row.compute_cycles < target.elementwise_cycles(8000, "float32") // 10
