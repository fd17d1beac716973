"""PopART's creator search as the baseline: creators found through views, unwound exactly."""

from __future__ import annotations

import numpy as np
from cost_rules import RULES, const, small_target, weight

from popart_unwind.baselines import linear_plan, popart_baseline
from popart_unwind.cost import evaluate
from popart_unwind.ir import Builder
from popart_unwind.layers import tied_embeddings

TILES = 64


def rhs_wanted(target, rows, inner, cols):
    return target.matmul_tiles(1, rows, inner, cols, "float32", "rhs").reshape(inner, cols)


def test_weight_behind_reshape_and_transpose_gets_the_matmul_layout_unwound():
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    w = weight(b, (4, 12, 32), "w")
    flat = b.ai_onnx.reshape([w, const(b, [48, 32], "shape")], name="flat")
    rhs = b.ai_onnx.transpose([flat], perm=[1, 0], name="t")
    mm = b.ai_onnx.matmul([x, rhs], name="mm")
    b.add_output_tensor(mm)
    ir = b.ir()
    target = small_target(TILES)
    plan = popart_baseline(ir, target, registry=RULES)
    expected = rhs_wanted(target, 16, 32, 48).T.reshape(-1)  # undo the transpose, reshape
    decision = plan.decision("w")
    assert np.array_equal(decision.tiles, expected)
    assert decision.method.startswith("created by MatMul") and "input 1" in decision.method
    assert "flat" in decision.explanation and "'t'" in decision.explanation
    lhs = target.matmul_tiles(1, 16, 32, 48, "float32", "lhs")
    assert np.array_equal(plan.decision("x").tiles, lhs)
    assert plan.decision("shape").method == "linear"


def test_the_baseline_does_not_touch_the_ir_and_is_deterministic():
    b = Builder()
    x = b.add_input_tensor("float32", (8, 16), "x")
    w = weight(b, (16, 24), "w")
    b.add_output_tensor(b.ai_onnx.matmul([x, w]))
    ir = b.ir()
    before = ir.to_json()
    target = small_target(TILES)
    first = popart_baseline(ir, target, registry=RULES)
    target.linear_tiles((999,), "float32")
    second = popart_baseline(ir, target, registry=RULES)
    assert ir.to_json() == before
    assert all(t.tile_mapping is None for t in ir.main_graph.tensors)
    assert first.mappings.keys() == second.mappings.keys()
    for key, tiles in first.mappings.items():
        assert np.array_equal(tiles, second.mappings[key])


def bias_ir():
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    w = weight(b, (32, 48), "w")
    bias = weight(b, (48,), "bias")
    y = b.ai_onnx.matmul([x, w], name="mm")
    b.add_output_tensor(b.ai_onnx.add([y, bias], name="add_bias"))
    return b.ir()


def test_a_broadcast_bias_is_not_unwound_through_add():
    ir = bias_ir()
    target = small_target(TILES)
    plan = popart_baseline(ir, target, registry=RULES)
    assert plan.decision("bias").method == "linear"
    assert plan.decision("w").method.startswith("created by")
    # linear decisions come from the rotating mapper in tensor order: x, w created, bias first
    target.reset()
    assert np.array_equal(plan.decision("bias").tiles, target.linear_tiles((48,), "float32"))


def elementwise_ir(op_name: str):
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    other = b.add_input_tensor("float32", (16, 32), "other")
    w = weight(b, (32, 8), "w")
    y = b.ai_onnx.relu([x]) if op_name == "Relu" else b.op(op_name, [x, other])
    b.add_output_tensor(b.ai_onnx.matmul([y, w]))
    return b.ir()


def test_same_shape_elementwise_ops_unwind_but_add_is_a_dead_end():
    target = small_target(TILES)
    lhs = target.matmul_tiles(1, 16, 32, 8, "float32", "lhs")
    for name in ("Relu", "Mul"):
        plan = popart_baseline(elementwise_ir(name), target, registry=RULES)
        assert np.array_equal(plan.decision("x").tiles, lhs), name
    plan = popart_baseline(elementwise_ir("Add"), target, registry=RULES)
    assert plan.decision("x").method == "linear"
    assert plan.decision("other").method == "linear"
    views_only = popart_baseline(elementwise_ir("Relu"), target, registry=RULES,
                                 unwind_elementwise=False)
    assert views_only.decision("x").method == "linear"


def sliced_weight_ir(width: int, both: bool):
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    w = weight(b, (32, width), "w")
    axes = const(b, [1], "axes")
    left = b.ai_onnx.slice([w, const(b, [0], "s0"), const(b, [48], "e0"), axes], name="left")
    mm_left = b.ai_onnx.matmul([x, left], name="mm_left")
    outputs = [mm_left]
    if both:
        right = b.ai_onnx.slice([w, const(b, [48], "s1"), const(b, [96], "e1"), axes],
                                name="right")
        outputs.append(b.ai_onnx.matmul([x, right], name="mm_right"))
    for out in outputs:
        b.add_output_tensor(out)
    return b.ir()


def test_two_partial_creators_are_stitched():
    ir = sliced_weight_ir(96, both=True)
    target = small_target(TILES)
    plan = popart_baseline(ir, target, registry=RULES)
    wanted = rhs_wanted(target, 16, 32, 48)
    expected = np.concatenate([wanted, wanted], axis=1).reshape(-1)
    decision = plan.decision("w")
    assert decision.method == "stitched"
    assert np.array_equal(decision.tiles, expected)
    assert "mm_left" in decision.explanation and "mm_right" in decision.explanation


def test_what_no_creator_covers_is_mapped_linearly():
    ir = sliced_weight_ir(100, both=False)
    target = small_target(TILES)
    plan = popart_baseline(ir, target, registry=RULES)
    decision = plan.decision("w").tiles.reshape(32, 100)
    assert plan.decision("w").method == "stitched"
    assert np.array_equal(decision[:, :48], rhs_wanted(target, 16, 32, 48))
    # x is created by the matmul; then w's leftover takes its share of a rotating linear map
    target.reset()
    linear = target.linear_tiles((32, 100), "float32").reshape(32, 100)
    assert np.array_equal(decision[:, 48:], linear[:, 48:])
    assert "1664 of 3200 elements: linear" in plan.decision("w").explanation


def test_higher_priority_wins_over_more_elements():
    b = Builder()
    table = weight(b, (10, 32), "table")
    ids = b.add_input_tensor("int64", (5,), "ids")
    x = b.add_input_tensor("float32", (16, 10), "x")
    part = b.ai_onnx.slice([table, const(b, [0], "s"), const(b, [16], "e"),
                            const(b, [1], "a")], name="part")
    b.add_output_tensor(b.ai_onnx.gather([table, ids], axis=0, name="lookup"))
    b.add_output_tensor(b.ai_onnx.matmul([x, part], name="mm"))
    ir = b.ir()
    target = small_target(TILES)
    plan = popart_baseline(ir, target, registry=RULES)
    decision = plan.decision("table")
    # the matmul (priority 2) covers half the table; the gather (priority 1) all of it
    assert decision.method == "stitched"
    tiles = decision.tiles.reshape(10, 32)
    assert np.array_equal(tiles[:, :16], rhs_wanted(target, 16, 10, 16))
    sliceable = target.sliceable_tiles(10, 32, "float32").reshape(10, 32)
    assert np.array_equal(tiles[:, 16:], sliceable[:, 16:])


def test_a_gather_table_gets_the_sliceable_layout():
    b = Builder()
    table = weight(b, (100, 24), "table")
    ids = b.add_input_tensor("int64", (7,), "ids")
    b.add_output_tensor(b.ai_onnx.gather([table, ids], axis=0))
    target = small_target(TILES)
    plan = popart_baseline(b.ir(), target, registry=RULES)
    assert np.array_equal(plan.decision("table").tiles, target.sliceable_tiles(100, 24,
                                                                               "float32"))
    assert plan.decision("ids").method == "linear"  # these test rules create no indices


def test_gatheropx_creates_its_indices_from_tile_0():
    """The real rules: GatherOpx also creates its indices (popops' createIndicesTensor: at
    least 32 a tile, from tile 0, whatever the rotating mapper has done)."""
    b = Builder()
    table = weight(b, (100, 24), "table")
    ids = b.add_input_tensor("int64", (70,), "ids")
    b.add_output_tensor(b.ai_onnx.gather([table, ids], axis=0))
    target = small_target(TILES)
    target.linear_tiles((50,), "float32")
    decision = popart_baseline(b.ir(), target).decision("ids")
    assert decision.tiles.tolist() == [0] * 35 + [1] * 35
    assert decision.method == "created by Gather#0 'Gather' input 1"


def test_the_search_enters_call_subgraphs_and_leaves_through_their_outputs():
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    w = weight(b, (48, 32), "w")
    sub = b.create_subgraph_builder("sub")
    s = sub.add_input_tensor("float32", (48, 32), "s")
    sub.add_output_tensor(sub.ai_onnx.transpose([s], perm=[1, 0], name="t"))
    rhs = b.call(sub, [w])
    b.add_output_tensor(b.ai_onnx.matmul([x, rhs], name="mm"))
    ir = b.ir()
    target = small_target(TILES)
    plan = popart_baseline(ir, target, registry=RULES)
    expected = rhs_wanted(target, 16, 32, 48).T.reshape(-1)
    assert np.array_equal(plan.decision("w").tiles, expected)
    # the subgraph's own input: the search starts inside the first call site
    inner = plan.decision("s", "sub")
    assert np.array_equal(inner.tiles, expected)
    assert inner.method.startswith("created by MatMul")
    report = evaluate(ir, target, plan.mappings, registry=RULES)
    assert report.op(next(op.id for op in ir.main_graph.ops
                          if op.type.name == "Call")).exchange_bytes == 0


def test_a_creator_inside_a_subgraph_lays_out_the_outer_tensor():
    b = Builder()
    w = weight(b, (32, 48), "w")
    sub = b.create_subgraph_builder("sub")
    s = sub.add_input_tensor("float32", (32, 48), "s")
    xs = sub.add_input_tensor("float32", (16, 32), "xs")
    sub.add_output_tensor(sub.ai_onnx.matmul([xs, s], name="mm"))
    x = b.add_input_tensor("float32", (16, 32), "x")
    b.add_output_tensor(b.call(sub, [w, x]))
    target = small_target(TILES)
    plan = popart_baseline(b.ir(), target, registry=RULES)
    assert np.array_equal(plan.decision("w").tiles, rhs_wanted(target, 16, 32, 48).reshape(-1))


def test_the_baseline_is_no_worse_than_linear_on_a_matmul_chain():
    b = Builder()
    x = b.add_input_tensor("float32", (64, 32), "x")
    w1 = weight(b, (32, 64), "w1")
    w2 = weight(b, (64, 16), "w2")
    h = b.ai_onnx.relu([b.ai_onnx.matmul([x, w1])])
    b.add_output_tensor(b.ai_onnx.matmul([h, w2]))
    ir = b.ir()
    target = small_target(TILES)
    ours = evaluate(ir, target, popart_baseline(ir, target, registry=RULES).mappings,
                    registry=RULES)
    linear = evaluate(ir, target, linear_plan(ir, target), registry=RULES)
    assert ours.exchange_bytes < linear.exchange_bytes
    assert ours.objective > linear.objective


def test_concatenated_weights_each_take_their_slab_of_the_creator_layout():
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    left, right = weight(b, (32, 20), "left"), weight(b, (32, 28), "right")
    both = b.ai_onnx.concat([left, right], axis=1, name="cat")
    b.add_output_tensor(b.ai_onnx.matmul([x, both], name="mm"))
    target = small_target(TILES)
    plan = popart_baseline(b.ir(), target, registry=RULES)
    wanted = rhs_wanted(target, 16, 32, 48)
    assert plan.decision("left").method.startswith("created by MatMul")
    assert np.array_equal(plan.decision("left").tiles, wanted[:, :20].reshape(-1))
    assert np.array_equal(plan.decision("right").tiles, wanted[:, 20:].reshape(-1))


def test_an_expanded_weight_takes_the_tile_of_its_first_reader():
    b = Builder()
    x = b.add_input_tensor("float32", (16, 32), "x")
    row = weight(b, (1, 48), "row")
    full = b.ai_onnx.expand([row, const(b, [32, 48], "shape")], name="expand")
    b.add_output_tensor(b.ai_onnx.matmul([x, full], name="mm"))
    target = small_target(TILES)
    plan = popart_baseline(b.ir(), target, registry=RULES)
    assert plan.decision("row").method.startswith("created by MatMul")
    assert np.array_equal(plan.decision("row").tiles, rhs_wanted(target, 16, 32, 48)[0])


def tied_lm_head(backward: bool = False, transposed: bool = True):
    """An embedding table read by a Gather and, transposed, by an LM-head MatMul (the
    library's own rules); ``backward`` adds the input-gradient MatMul reading it directly."""
    b = Builder()
    table = weight(b, (40, 24), "table")
    ids = b.add_input_tensor("int64", (2, 8), "ids")
    hidden = b.add_input_tensor("float32", (16, 24 if transposed else 40), "hidden")
    b.add_output_tensor(b.ai_onnx.gather([table, ids], axis=0, name="embedding"))
    rhs = b.ai_onnx.transpose([table], perm=[1, 0], name="t") if transposed else table
    b.add_output_tensor(b.ai_onnx.matmul([hidden, rhs], name="lm_head"))
    if backward:
        grad = b.add_input_tensor("float32", (16, 40), "grad")
        b.add_output_tensor(b.ai_onnx.matmul([grad, table], name="input_grad"))
    return b.ir()


def test_a_tied_embedding_is_laid_out_for_the_gather_as_popart_does_by_default():
    # GatherOpx creates its table at the highest priority; the LM head's matmul, reached
    # through the Transpose at priority 0, loses (whether or not a backward matmul reads it)
    target = small_target(TILES)
    for backward in (False, True):
        decision = popart_baseline(tied_lm_head(backward), target).decision("table")
        assert decision.method.startswith("created by Gather")
        assert "'embedding'" in decision.method
        assert np.array_equal(decision.tiles, target.sliceable_tiles(40, 24, "float32"))


def test_a_tied_embedding_is_paired_with_its_forward_head():
    # the input-gradient matmul reads the table untransposed, as the Gather does: no match
    for backward in (False, True):
        ir = tied_lm_head(backward)
        ops = {op.name: op.id for op in ir.main_graph.ops}
        assert tied_embeddings(ir) == {ops["embedding"]: ops["lm_head"]}
    assert tied_embeddings(tied_lm_head(transposed=False)) == {}


def test_the_tied_gather_pattern_lets_the_lm_head_lay_the_table_out():
    # PopART's TiedGatherPattern: the Gather becomes a TiedGather of priority -1
    target = small_target(TILES)
    for backward in (False, True):
        plan = popart_baseline(tied_lm_head(backward), target, tied_gather=True)
        decision = plan.decision("table")
        assert decision.method.startswith("created by MatMul") and "lm_head" in decision.method
        assert np.array_equal(decision.tiles, rhs_wanted(target, 16, 24, 40).T.reshape(-1))
        assert decision.tiles.tolist() != target.sliceable_tiles(40, 24, "float32").tolist()


def test_the_tied_gather_pattern_needs_exactly_one_transposed_use():
    # neither use transposed: PopART's pattern does not match, the Gather keeps its priority
    target = small_target(TILES)
    plan = popart_baseline(tied_lm_head(transposed=False), target, tied_gather=True)
    assert plan.decision("table").method.startswith("created by Gather")


def test_the_tied_gather_pattern_reads_a_gemm_head_as_popart_does():
    # PopART turns Gemm(h, W, transB=1) into MatMul(h, Transpose(W)): exactly one use of the
    # table is transposed, so the pattern matches; with transB=0 on W itself it does not
    target = small_target(TILES)
    for trans_b, matched in ((1, True), (0, False)):
        b = Builder()
        table = weight(b, (40, 24), "table")
        ids = b.add_input_tensor("int64", (2, 8), "ids")
        hidden = b.add_input_tensor("float32", (16, 24 if trans_b else 40), "hidden")
        b.add_output_tensor(b.ai_onnx.gather([table, ids], axis=0, name="embedding"))
        b.add_output_tensor(b.ai_onnx.gemm([hidden, table], transB=trans_b, name="lm_head"))
        decision = popart_baseline(b.ir(), target, tied_gather=True).decision("table")
        assert decision.method.startswith("created by Gemm" if matched else "created by Gather")
