"""Verification names the first broken invariant of an IR, one test per invariant."""

from __future__ import annotations

import numpy as np
import pytest

from popart_unwind.errors import IrError
from popart_unwind.ir import GRAPHCORE_DOMAIN, Ir, OpType, TensorType


def neg(graph, source, outputs=1):
    op = graph.create_op(OpType("ai.onnx", "Neg", 18), [source], outputs)
    for tensor in op.outputs:
        tensor.shape = graph.tensor(source if isinstance(source, str) else source.id).shape
    return op


def small_ir():
    ir = Ir()
    x = ir.main_graph.add_input("x", "float32", (2,))
    first = neg(ir.main_graph, x)
    second = neg(ir.main_graph, first.output(0))
    ir.main_graph.mark_output(second.output(0))
    return ir, first, second


def test_a_well_formed_ir_verifies():
    ir, _, _ = small_ir()
    ir.verify()


def test_a_tensor_with_two_producers_is_refused():
    ir, first, second = small_ir()
    with pytest.raises(IrError, match="already has producer"):
        ir.main_graph.connect_output(second, 1, first.output(0))
    second._outputs[1] = first.output(0)  # forced past the graph's own checks
    with pytest.raises(IrError, match="names another producer"):
        ir.verify()


def test_a_cycle_is_found():
    ir, first, second = small_ir()
    ir.main_graph.disconnect_input(first, 0)
    ir.main_graph.connect_input(first, 0, second.output(0))
    with pytest.raises(IrError, match="cycle through op Neg#0"):
        ir.verify()


def test_a_graph_input_with_a_producer_is_refused():
    ir, first, _ = small_ir()
    y = ir.main_graph.add_input("y", "float32", (2,))
    ir.main_graph.connect_output(first, 1, y)
    with pytest.raises(IrError, match="graph input 'y' of the main graph has producer Neg#0"):
        ir.verify()


def test_a_shape_mismatch_at_a_call_site_is_refused():
    ir = Ir()
    body = ir.create_graph("body")
    body.mark_output(neg(body, body.add_input("t", "float32", (3, 2))).output(0))
    x = ir.main_graph.add_input("x", "float32", (2, 3))
    call = ir.main_graph.create_op(OpType(GRAPHCORE_DOMAIN, "Call"), [x], 1, {"callee": "body"})
    call.output(0).shape = (3, 2)
    with pytest.raises(IrError, match=r"'x' \(2, 3\) and subgraph tensor 't' \(3, 2\)"):
        ir.verify()


def test_a_constant_without_data_and_a_stray_tensor_are_refused():
    ir, _, _ = small_ir()
    ir.main_graph.add_tensor("c", "float32", (2,), TensorType.CONST)
    with pytest.raises(IrError, match="constant 'c' has no data"):
        ir.verify()
    ir, _, _ = small_ir()
    ir.main_graph.add_tensor("stray", "float32", (2,))
    with pytest.raises(IrError, match=r"'stray' .* has no producer"):
        ir.verify()


def test_a_variable_with_a_producer_and_a_missing_shape_are_refused():
    ir, first, _ = small_ir()
    w = ir.main_graph.add_variable("w", np.zeros(2, np.float32))
    ir.main_graph.connect_output(first, 1, w)
    with pytest.raises(IrError, match="Variable tensor 'w' has producer"):
        ir.verify()
    ir, first, _ = small_ir()
    first.output(0).shape = None
    ir.verify(require_shapes=False)
    with pytest.raises(IrError, match="has no shape"):
        ir.verify()
