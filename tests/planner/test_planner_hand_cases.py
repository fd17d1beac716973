"""Small IRs whose right plan is known by hand (issue 6, item 4)."""

from __future__ import annotations

import numpy as np
import pytest
from planner_testing import small_target, weight
from popart_unwind.transforms import plan_ir

from popart_unwind.frontends.builder import Builder
from popart_unwind.ir import Ir
from popart_unwind.ir.tile_mapping import tile_array
from popart_unwind.machine import IpuModel, TileTarget
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


def _lookup(ids_count: int = 12) -> Ir:
    """ids -> Gather from a (30, 3) table, whose sliceable layout fills the 16 tiles
    unevenly; nothing but the lookup reads the ids."""
    b = Builder()
    ids = b.add_input_tensor("int64", [ids_count], "ids")
    table = weight(b, (30, 3), "table")
    b.add_output_tensor(b.op("Gather", [table, ids], {"axis": 0}))
    return b.ir()


def test_lookup_indices_lie_on_the_least_loaded_tiles():
    """Every tile of the table receives all the indices, so their layout costs only
    memory: they take popops' indices layout (at least 32 a tile) over the tiles the
    other layouts fill least, not whatever tile the rotating linear mapper reached."""
    ir = _lookup()
    result, fresh = plan(ir)
    load = np.zeros(16, np.int64)
    for planned in result.tensors:
        if planned.tensor_id != "ids":
            load += np.bincount(planned.tiles, minlength=16) * 4
    expected = fresh.indices_tiles(12, preference=np.argsort(load, kind="stable"))
    ids = tiles_of(ir, "ids")
    assert np.array_equal(ids, expected)
    assert len(set(ids.tolist())) == 1 and load[ids[0]] == load.min()
    assert load[ids[0]] < load.max()  # the test means something: the tiles differ
    planned = result.tensor("", "ids")
    assert planned.method == "linear"
    assert planned.explanation == ("all elements in the layout popops gives Gather#0 "
                                   "'Gather''s indices, on the least loaded tiles (nothing "
                                   "wanted them elsewhere)")
    popart = fresh.indices_tiles(12)  # what popops creates: tile 0
    assert popart.tolist() == [0] * 12 and ids[0] != 0


def test_without_balancing_lookup_indices_are_laid_out_as_popops_creates_them():
    ir = _lookup(100)
    plan(ir, options=SessionOptions(balance_tile_memory=False))
    # mapTensorLinearly with at least 32 a tile: 100 indices on three tiles from tile 0
    assert np.bincount(tiles_of(ir, "ids")).tolist() == [33, 33, 34]


def test_lookup_indices_weigh_the_load_of_their_own_ipu():
    """Tile ids name the same tiles of every IPU: the indices on IPU 1 go to the tile IPU
    1's layouts fill least (tile 1, 12 bytes of the table), although tile 1 of IPU 0 also
    holds a tensor (added over both IPUs, tile 9 would be the emptiest)."""
    b = Builder()
    with b.virtual_graph(0):
        b.add_output_tensor(b.op("Relu", [b.add_input_tensor("float32", [8], "v")]))
    with b.virtual_graph(1):
        ids = b.add_input_tensor("int64", [12], "ids")
        b.add_output_tensor(b.op("Gather", [weight(b, (30, 3), "table"), ids], {"axis": 0}))
    ir = b.ir()
    target = TileTarget(IpuModel(tiles_per_ipu=16, min_bytes_per_tile=16, ipus=2))
    plan_ir(ir, target)
    held = {name: np.bincount(tiles_of(ir, name), minlength=16) * 4
            for name in ("v", "table")}
    assert held["table"].argmin() == 1 and held["v"][1] > 0  # what the test relies on
    assert (held["table"] + held["v"]).argmin() == 9
    assert tiles_of(ir, "ids").tolist() == [1] * 12


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
