"""Subgraph boundaries (If, Loop): copies tied by ValuedPairs, outputs planned as sinks."""

from __future__ import annotations

import numpy as np
from planner_testing import small_target
from popart_unwind.transforms import plan_ir

from popart_unwind.ir import Ir
from popart_unwind.ir.op import OpType
from popart_unwind.ops.shape_inference import infer_shapes


def onnx(name: str) -> OpType:
    return OpType("ai.onnx", name, 13)


def matmul_after(ir: Ir, tensor) -> None:
    main = ir.main_graph
    w = main.add_variable("w", np.zeros((16, 24), np.float32))
    mm = main.create_op(onnx("MatMul"), [tensor, w], 1)
    main.mark_output(mm.output(0))
    infer_shapes(ir)


def test_if_branches_and_output_follow_the_consumer():
    ir = Ir()
    main = ir.main_graph
    cond = main.add_input("cond", "bool", ())
    x = main.add_input("x", "float32", (8, 16))
    for graph_id, name in (("then", "Relu"), ("else", "Neg")):
        branch = ir.create_graph(graph_id)
        op = branch.create_op(onnx(name), [branch.add_input("a", "float32", (8, 16))], 1)
        branch.mark_output(op.output(0))
    maps = {"then_inputs": [[1, 0]], "else_inputs": [[1, 0]], "then_outputs": [[0, 0]],
            "else_outputs": [[0, 0]]}
    iff = main.create_op(onnx("If"), [cond, x], 1,
                         attributes={"then_branch": "then", "else_branch": "else", **maps})
    matmul_after(ir, iff.output(0))
    result = plan_ir(ir, small_target(8))
    lhs = small_target(8).matmul_tiles(1, 8, 16, 24, "float32", "lhs")
    for graph_id, tensor_id in (("then", "a"), ("else", "a"), ("", "x"),
                                ("", iff.output(0).id)):
        planned = result.tensor(graph_id, tensor_id)
        assert np.array_equal(planned.tiles, lhs), (graph_id, tensor_id)
    assert iff.output(0).tile_mapping is not None


def test_loop_carried_values_are_tied_across_iterations():
    ir = Ir()
    main = ir.main_graph
    trips = main.add_constant("trips", np.array(3, np.int64))
    keep = main.add_constant("keep", np.array(True))
    start = main.add_input("start", "float32", (8, 16))
    body = ir.create_graph("body")
    body.add_input("i", "int64", ())
    go = body.add_input("go", "bool", ())
    value = body.add_input("v", "float32", (8, 16))
    body.mark_output(go)
    body.mark_output(body.create_op(onnx("Relu"), [value], 1).output(0))
    loop = main.create_op(onnx("Loop"), [trips, keep, start], 1, attributes={"body": "body"})
    matmul_after(ir, loop.output(0))
    result = plan_ir(ir, small_target(8))
    lhs = small_target(8).matmul_tiles(1, 8, 16, 24, "float32", "lhs")
    assert np.array_equal(result.tensor("body", "v").tiles, lhs)
    assert np.array_equal(result.tensor("", "start").tiles, lhs)
    assert result.objective == result.upper_bound
