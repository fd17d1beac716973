"""Shared builders for the transform tests: a small op registry of our own (so the tests
state exactly which ops are pure and which have side effects) and IR construction helpers.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.ir import (
    GRAPHCORE_DOMAIN,
    ONNX_DOMAIN,
    Graph,
    Ir,
    Op,
    OpSettings,
    OpType,
    Tensor,
)
from popart_unwind.ops import OpDef, OpRegistry


def same_as_first_input(op: Op) -> list[tuple[str, tuple[int, ...]]]:
    return [(op.inputs[0].dtype, op.inputs[0].shape)] * len(op.outputs)


#: Elementwise ops with numpy meanings, for tests that evaluate graphs.
NUMPY_MEANING = {
    "Add": lambda a, b: a + b,
    "Mul": lambda a, b: a * b,
    "Relu": lambda a: np.maximum(a, 0),
    "Neg": lambda a: -a,
    "Identity": lambda a: a,
}

TEST_OPS = OpRegistry()
for _name in NUMPY_MEANING:
    TEST_OPS.register(OpDef(_name, infer=same_as_first_input))
TEST_OPS.register(OpDef("Print", infer=same_as_first_input, side_effects=True))
TEST_OPS.register(OpDef("RandomNormalLike", infer=same_as_first_input, random=True))
TEST_OPS.register(OpDef("Call", domain=GRAPHCORE_DOMAIN))
TEST_OPS.register(OpDef("Loop"))
TEST_OPS.register(OpDef("If"))


def onnx(name: str) -> OpType:
    return OpType(ONNX_DOMAIN, name, 13)


CALL = OpType(GRAPHCORE_DOMAIN, "Call", 1)


def add_op(graph: Graph, type_name: str, inputs: list, outputs: int = 1, shape=(2, 3),
           attributes: dict | None = None, domain: str = ONNX_DOMAIN, **settings) -> Op:
    """An op whose outputs get ``shape`` (float32) at once, as shape inference would;
    ``settings`` are OpSettings fields (name, scope, placement)."""
    op = graph.create_op(OpType(domain, type_name, 13), inputs, outputs, attributes,
                         OpSettings(**settings))
    for tensor in op.outputs:
        tensor.shape = tuple(shape)
    return op


def out(op: Op, index: int = 0) -> Tensor:
    return op.output(index)


def chain_ir(**placement) -> Ir:
    """x -> Relu -> Neg -> output, with a weight added in: the smallest useful model."""
    ir = Ir()
    main = ir.main_graph
    x = main.add_input("x", "float32", (2, 3))
    w = main.add_variable("w", np.ones((2, 3), np.float32))
    relu = add_op(main, "Relu", [x], **placement)
    add = add_op(main, "Add", [out(relu), w], **placement)
    neg = add_op(main, "Neg", [out(add)], **placement)
    main.mark_output(out(neg))
    return ir


def identity_subgraph(ir: Ir, graph_id: str, n_inputs: int = 2, op: str = "Relu") -> Graph:
    """A subgraph whose output i is ``op`` of input i."""
    graph = ir.create_graph(graph_id)
    for index in range(n_inputs):
        tensor = graph.add_input(f"{graph_id}/in{index}", "float32", (2, 3))
        graph.mark_output(out(add_op(graph, op, [tensor])))
    return graph


def call(graph: Graph, callee: Graph, inputs: list, n_outputs: int | None = None,
         **placement) -> Op:
    n_outputs = len(callee.output_ids) if n_outputs is None else n_outputs
    op = graph.create_op(CALL, inputs, n_outputs, {"callee": callee.id},
                         OpSettings(**placement))
    for tensor, inner in zip(op.outputs, callee.outputs, strict=False):
        tensor.dtype, tensor.shape = inner.dtype, inner.shape
    return op


def evaluate(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph outputs under numpy meanings of the elementwise test ops."""
    values = dict(feeds)
    for tensor in graph.tensors:
        if tensor.data is not None:
            values[tensor.id] = tensor.data
    for op in graph.schedule():
        args = [values[t.id] for t in op.inputs]
        values[op.output(0).id] = NUMPY_MEANING[op.type.name](*args)
    return [values[t] for t in graph.output_ids]


def pipeline_model(**settings) -> Ir:
    """A model with real ONNX ops and work for every transform of the default pipeline:
    unknown shapes, a foldable constant expression, duplicate ops and dead code.
    Deterministic: built the same way, it is the same IR."""
    ir = Ir(**settings)
    main = ir.main_graph
    rng = np.random.default_rng(0)
    x = main.add_input("x", "float32", (4, 8))
    w = main.add_variable("w", rng.normal(size=(8, 16)).astype(np.float32))
    bias = main.add_variable("bias", rng.normal(size=(16,)).astype(np.float32))
    two = main.add_constant("two", np.full((16,), 2.0, np.float32))
    three = main.add_constant("three", np.full((16,), 3.0, np.float32))
    shape = main.add_constant("shape", np.array([8, 8], np.int64))
    main.add_variable("unused_weight", np.zeros((3,), np.float32))  # dead

    def node(name, inputs, **attributes):
        return main.create_op(onnx(name), inputs, 1, attributes).output(0)

    scale = node("Add", [two, three])  # folds to a constant
    hidden = node("Add", [node("MatMul", [x, w]), bias])
    left = node("Mul", [node("Relu", [hidden]), scale])
    right = node("Mul", [node("Relu", [hidden]), scale])  # duplicates of the line above
    node("Sigmoid", [x])  # dead
    total = node("Add", [left, right])
    main.mark_output(node("Transpose", [node("Reshape", [total, shape])], perm=[1, 0]))
    return ir


def subgraph_model() -> Ir:
    """Subgraphs for Prune and MergeDuplicateOps (with TEST_OPS): a live call, a dead call,
    a never-called graph, duplicates inside a subgraph and across calls' outputs."""
    ir = chain_ir()
    main = ir.main_graph
    live = identity_subgraph(ir, "live", n_inputs=2)
    for _ in range(2):
        live.mark_output(out(add_op(live, "Neg", [live.inputs[1]])))
    dead = identity_subgraph(ir, "dead", n_inputs=1)
    identity_subgraph(ir, "never", n_inputs=1)
    site = call(main, live, [main.outputs[0], main.inputs[0]])
    call(main, dead, [main.inputs[0]])
    summed = out(add_op(main, "Add", [out(add_op(main, "Relu", [site.output(0)])),
                                     out(add_op(main, "Relu", [site.output(0)]))]))
    main.output_ids = [summed.id]
    return ir
