"""Small IRs whose right plan is known by hand (issue 6, item 4)."""

from __future__ import annotations

import numpy as np
import pytest
from planner_testing import small_target, weight
from popart_unwind.transforms import plan_ir

from popart_unwind.frontends.builder import Builder
from popart_unwind.ir.tile_mapping import tile_array
from popart_unwind.options import SessionOptions


def plan(ir, tiles: int = 16, **kwargs):
    target = small_target(tiles)
    return plan_ir(ir, target, **kwargs), small_target(tiles)


def tiles_of(ir, tensor_id: str, graph_id: str = "") -> np.ndarray:
    tensor = ir.graph(graph_id).tensor(tensor_id)
    return tile_array(tensor.tile_mapping, tensor.nelms(), len(tensor.tile_mapping))


def test_weight_through_transpose_and_reshape_gets_the_unwound_matmul_layout():
    b = Builder()
    x = b.add_input_tensor("float32", [32, 64], "x")
    w = weight(b, (128, 32), "w")
    wt = b.op("Transpose", [w], {"perm": [1, 0]})  # (32, 128)
    wr = b.op("Reshape", [wt, np.array([64, 64])])  # (64, 64): the rhs [K, N]
    b.add_output_tensor(b.op("MatMul", [x, wr]))
    ir = b.ir()
    result, fresh = plan(ir)
    rhs = fresh.matmul_tiles(1, 32, 64, 64, "float32", "rhs")
    assert len(set(rhs.tolist())) > 1  # the test means something: the rhs spans tiles
    expected = rhs.reshape(32, 128).T  # back through the reshape, then the transpose
    assert np.array_equal(tiles_of(ir, "w").reshape(128, 32), expected)
    lhs = fresh.matmul_tiles(1, 32, 64, 64, "float32", "lhs")
    assert np.array_equal(tiles_of(ir, "x"), lhs)
    assert result.tensor("", "w").method == "unwound"
    assert "rhs" in result.tensor("", "w").explanation
    assert result.objective == result.upper_bound


def test_elementwise_partners_agree_and_both_take_the_wanted_layout():
    b = Builder()
    x = b.add_input_tensor("float32", [16, 32], "x")
    a, c = weight(b, (32, 24), "a"), weight(b, (32, 24), "c")
    b.add_output_tensor(b.op("MatMul", [x, b.op("Add", [a, c])]))
    ir = b.ir()
    plan(ir)
    rhs = small_target().matmul_tiles(1, 16, 32, 24, "float32", "rhs")
    assert np.array_equal(tiles_of(ir, "a"), rhs)
    assert np.array_equal(tiles_of(ir, "c"), rhs)


def test_bias_of_a_broadcast_add_follows_the_broadcast_operand_layout():
    b = Builder()
    x = b.add_input_tensor("float32", [16, 32], "x")
    y = b.op("MatMul", [x, weight(b, (32, 48), "w")])
    b.add_output_tensor(b.op("Add", [y, weight(b, (48,), "bias")]))
    ir = b.ir()
    # Poplibs' rule (each channel on the lowest tile reading it most), not spread by load
    result, fresh = plan(ir, options=SessionOptions(balance_tile_memory=False))
    out = fresh.matmul_tiles(1, 16, 32, 48, "float32", "output")
    expected = fresh.broadcast_operand_tiles(out, (16, 48), (48,))
    assert len(set(expected.tolist())) > 1
    assert np.array_equal(tiles_of(ir, "bias"), expected)
    assert result.tensor("", "bias").method == "unwound"


def test_tensor_reaching_nothing_is_mapped_linearly():
    b = Builder()
    v = weight(b, (8, 40), "lonely")
    b.add_output_tensor(b.op("Softmax", [b.op("Relu", [v])]))
    ir = b.ir()
    result, fresh = plan(ir)
    assert np.array_equal(tiles_of(ir, "lonely"), fresh.linear_tiles((320,), "float32"))
    assert result.tensor("", "lonely").method == "linear"
    assert "linearly" in result.tensor("", "lonely").explanation


def test_gemm_with_transposed_b_and_gather_table():
    b = Builder()
    ids = b.add_input_tensor("int64", [12], "ids")
    table = weight(b, (50, 32), "table")
    rows = b.op("Gather", [table, ids], {"axis": 0})
    wt = weight(b, (24, 32), "wt")  # B transposed: [N, K]
    b.add_output_tensor(b.op("Gemm", [rows, wt], {"transB": 1}))
    ir = b.ir()
    plan(ir)
    fresh = small_target()
    assert np.array_equal(tiles_of(ir, "table"), fresh.sliceable_tiles(50, 32, "float32"))
    rhs = fresh.matmul_tiles(1, 12, 32, 24, "float32", "rhs").reshape(32, 24)
    assert np.array_equal(tiles_of(ir, "wt").reshape(24, 32), rhs.T)


def test_call_boundaries_get_mappings():
    b = Builder()
    x = b.add_input_tensor("float32", [16, 32], "x")
    sub = b.create_subgraph_builder("body")
    a = sub.add_input_tensor("float32", [16, 32], "a")
    sub.add_output_tensor(sub.op("MatMul", [a, weight(sub, (32, 40), "w")]))
    out = b.call(sub, [x])
    b.add_output_tensor(b.op("Relu", [out]))
    ir = b.ir()
    result, fresh = plan(ir)
    lhs = fresh.matmul_tiles(1, 16, 32, 40, "float32", "lhs")
    assert np.array_equal(tiles_of(ir, "a", "body"), lhs)
    assert np.array_equal(tiles_of(ir, "x"), lhs)  # the copy in moves nothing
    call_out = ir.main_graph.tensor(out)
    assert call_out.tile_mapping is not None
    assert np.array_equal(tiles_of(ir, out), fresh.matmul_tiles(1, 16, 32, 40, "float32",
                                                                "output"))
    assert {(p.graph_id, p.tensor_id) for p in result.tensors} >= {
        ("body", "a"), ("body", "w"), ("", "x"), ("", out)}


def test_plan_reports_stages_and_does_not_write_when_asked():
    b = Builder()
    x = b.add_input_tensor("float32", [4, 8], "x")
    b.add_output_tensor(b.op("MatMul", [x, weight(b, (8, 4), "w")]))
    ir = b.ir()
    seen = []
    result, _ = plan(ir, progress=lambda stage, done, total: seen.append(stage), write=False)
    assert ir.main_graph.tensor("x").tile_mapping is None
    assert not result.changed
    assert [s for s in dict.fromkeys(seen)] == ["emit", "solve", "realize"]
    assert set(result.timings) == {"plans", "emit", "solve", "realize", "write", "total"}
    assert result.to_dict()["tensors"]["w"]["method"] == "unwound"


def test_missing_shapes_are_refused_by_name():
    from popart_unwind.errors import PlanError
    from popart_unwind.ir import Ir

    ir = Ir()
    ir.main_graph.add_tensor("shapeless", "float32", None)
    with pytest.raises(PlanError, match="shapeless"):
        plan(ir)
