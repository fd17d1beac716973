"""Graph outputs keep their ids through every rewrite (the main graph's outputs are the
model's interface, as PopART keeps a model's anchors): folds, removed identities and
merged duplicates leave ``output_ids`` and the values computed for them as they were."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from popart_unwind.transforms import registry
from transform_testing import evaluate
from transform_testing import onnx as onnx_type

from popart_unwind.cli import main
from popart_unwind.ir import Ir, Op, TensorType
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import canonicalize

PIPELINE = ["InferShapes", "Canonicalize", "Prune", "MergeDuplicateOps"]
UNARY = ["Relu", "Neg", "Identity"]
BINARY = ["Add", "Mul"]


def node(graph, name: str, inputs: list) -> str:
    return graph.create_op(onnx_type(name), inputs, 1).output(0).id


def holders(graph) -> list[Op]:
    return [op for op in graph.ops if op.is_type("Identity")]


def run(ir: Ir) -> None:
    registry.run_pipeline(ir, PIPELINE)
    ir.verify()


# -- the law ------------------------------------------------------------------------------
@st.composite
def small_models(draw):
    """A random main graph of Add/Mul/Relu/Neg/Identity over inputs, a weight and
    constants (units, so x + 0 folds; constant-only subtrees, so whole outputs fold),
    whose outputs are any distinct tensors: op results, inputs, the weight, constants."""
    ir = Ir()
    graph = ir.main_graph
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    names = [graph.add_input("x", "float32", (2, 3)).id,
             graph.add_input("x2", "float32", (2, 3)).id,
             graph.add_variable("w", rng.normal(size=(2, 3)).astype(np.float32)).id]
    for index, value in enumerate([0.0, 1.0, 2.0, 2.0]):  # two equal ones: pooled
        names.append(graph.add_constant(f"c{index}", np.full((2, 3), value, np.float32)).id)
    for _ in range(draw(st.integers(1, 10))):
        if draw(st.booleans()):
            names.append(node(graph, draw(st.sampled_from(UNARY)),
                              [draw(st.sampled_from(names))]))
        else:
            operands = [draw(st.sampled_from(names)) for _ in range(2)]
            names.append(node(graph, draw(st.sampled_from(BINARY)), operands))
    computed = [t.id for t in graph.tensors if t.producer is not None]
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True))
    for tensor_id in [computed[-1], *chosen] if computed[-1] not in chosen else chosen:
        graph.mark_output(tensor_id)
    return ir


FEEDS = {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
         "x2": np.linspace(2, -3, 6, dtype=np.float32).reshape(2, 3)}


@settings(max_examples=150, deadline=None)
@given(small_models())
def test_the_pipeline_keeps_output_ids_and_values(ir):
    graph = ir.main_graph
    before_ids, before = list(graph.output_ids), evaluate(graph, FEEDS)
    run(ir)
    assert graph.output_ids == before_ids
    for old, new in zip(before, evaluate(graph, FEEDS), strict=True):
        np.testing.assert_allclose(new, old, rtol=1e-6)
    assert not any(registry.run_pipeline(ir, PIPELINE).values())  # a fixpoint


# -- each case ----------------------------------------------------------------------------
def test_an_identity_of_a_graph_input_stays_to_hold_the_name():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    relu = graph.create_op(onnx_type("Relu"), [node(graph, "Identity", [x])], ["r"])
    graph.mark_output(relu.output(0).id)
    graph.mark_output(node(graph, "Identity", [x]))
    graph.mark_output(node(graph, "Identity", [node(graph, "Identity", [x])]))
    before = list(graph.output_ids)
    stats = canonicalize(ir, REGISTRY, test_convergence=True)
    assert stats.converged and graph.output_ids == before
    assert relu.input(0) is x  # readers skip the identities
    assert [op.input(0).id for op in holders(graph)] == ["x", "x"]
    assert not canonicalize(ir, REGISTRY, test_convergence=True).changed


def test_an_identity_of_an_intermediate_passes_the_name_to_it():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    hidden = graph.create_op(onnx_type("Relu"), [x], ["hidden"])
    neg = graph.create_op(onnx_type("Neg"), ["hidden"], ["n"])
    graph.create_op(onnx_type("Identity"), ["hidden"], ["y"])
    graph.mark_output("n")
    graph.mark_output("y")
    run(ir)
    assert graph.output_ids == ["n", "y"] and not holders(graph)
    assert hidden.output(0).id == "y" and neg.input(0) is hidden.output(0)


def test_identities_of_a_weight_a_constant_and_another_output():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    w = graph.add_variable("w", np.ones((2, 3), np.float32))
    c = graph.add_constant("c", np.full((2, 3), 3.0, np.float32))
    graph.create_op(onnx_type("Relu"), [x], ["r"])
    for source, name in ((w, "from_w"), (c, "from_c"), ("r", "from_r")):
        graph.create_op(onnx_type("Identity"), [source], [name])
    graph.create_op(onnx_type("Add"), [x, "from_c"], ["sum"])
    graph.output_ids = ["r", "from_w", "from_c", "from_r", "sum"]
    run(ir)
    assert graph.output_ids == ["r", "from_w", "from_c", "from_r", "sum"]
    assert [(op.input(0).id, op.output(0).id) for op in holders(graph)] == \
        [("w", "from_w"), ("r", "from_r")]
    copy = graph.tensor("from_c")  # a constant output: a copy under the output's id
    assert copy.tensor_type is TensorType.CONST and np.array_equal(copy.data, c.data)
    assert graph.tensor("w").tensor_type is TensorType.VARIABLE and graph.has_tensor("c")


def test_folded_outputs_become_constants_of_their_own_ids_outside_the_pool():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (3,))
    two = graph.add_constant("two", np.full(3, 2.0, np.float32))
    one = graph.add_constant("one", np.ones(3, np.float32))
    graph.create_op(onnx_type("Add"), [one, one], ["y1"])  # 2, equal to `two`
    graph.create_op(onnx_type("Mul"), [two, one], ["y2"])  # 2 again
    graph.create_op(onnx_type("Mul"), [x, "y1"], ["z"])
    graph.create_op(onnx_type("Mul"), [x, two], ["z2"])
    graph.output_ids = ["y1", "y2", "z", "z2"]
    run(ir)
    assert graph.output_ids == ["y1", "y2", "z", "z2"]
    y1, y2 = graph.tensor("y1"), graph.tensor("y2")
    assert y1 is not y2 and y1.tensor_type is y2.tensor_type is TensorType.CONST
    assert np.array_equal(y1.data, np.full(3, 2.0)) and np.array_equal(y2.data, y1.data)
    # z and z2 stay two ops: y1 is an interface, not merged with the equal `two`
    assert graph.tensor("z").producer.input(1) is y1
    assert graph.tensor("z2").producer.input(1).id == "two"


def test_merged_duplicates_keep_both_output_names():
    ir = Ir()
    graph = ir.main_graph
    x = graph.add_input("x", "float32", (2, 3))
    for name in ("a", "b", "c"):
        graph.create_op(onnx_type("Relu"), [x], [name])
    graph.create_op(onnx_type("Neg"), ["c"], ["d"])
    graph.output_ids = ["a", "b", "d"]
    before = evaluate_real(graph)
    run(ir)
    assert graph.output_ids == ["a", "b", "d"]
    assert [v.tolist() for v in evaluate_real(graph)] == [v.tolist() for v in before]
    assert sum(op.is_type("Relu") for op in graph.ops) <= 2


def evaluate_real(graph) -> list[np.ndarray]:
    return evaluate(graph, {"x": FEEDS["x"]})


def test_subgraph_outputs_are_positional_and_may_name_other_tensors():
    ir = Ir()
    body = ir.create_graph("body")
    x = body.add_input("body/x", "float32", (2,))
    body.mark_output(node(body, "Identity", [x]))
    canonicalize(ir, REGISTRY, test_convergence=True)
    assert body.output_ids == ["body/x"] and not body.ops


# -- through ONNX and the command line --------------------------------------------------------
def identity_and_fold_model() -> onnx.ModelProto:
    """Outputs made by an Identity of the input, by a foldable Add of constants, and by an
    Identity of an intermediate."""
    one = numpy_helper.from_array(np.ones((4, 8), np.float32), "one")
    nodes = [
        helper.make_node("Constant", [], ["one"], value=one),
        helper.make_node("Identity", ["x"], ["passed"]),
        helper.make_node("Add", ["one", "one"], ["folded"]),
        helper.make_node("Relu", ["x"], ["hidden"]),
        helper.make_node("Mul", ["hidden", "folded"], ["scaled"]),
        helper.make_node("Identity", ["scaled"], ["result"]),
    ]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 8])
               for name in ("passed", "folded", "result")]
    graph = helper.make_graph(
        nodes, "names", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_onnx_output_names_survive_import_and_the_pipeline():
    ir = Ir.from_onnx(identity_and_fold_model())
    run(ir)
    graph = ir.main_graph
    assert graph.output_ids == ["passed", "folded", "result"]
    assert graph.tensor("folded").tensor_type is TensorType.CONST
    assert graph.tensor("result").producer.is_type("Mul")
    assert graph.tensor("passed").producer.input(0).id == "x"


def test_the_plan_and_the_annotated_model_name_the_outputs(tmp_path):
    model = tmp_path / "names.onnx"
    onnx.save(identity_and_fold_model(), model)
    plan, annotated = tmp_path / "plan.json", tmp_path / "annotated.onnx"
    out, err = io.StringIO(), io.StringIO()
    status = main(["plan", str(model), "--out", str(plan), "--onnx-out", str(annotated),
                   "--tiles", "8", "--quiet"], stdout=out, stderr=err)
    assert (status, err.getvalue()) == (0, "")
    document = json.loads(plan.read_text())
    assert "folded" in document["tensors"]  # the folded output, under its own name
    written = onnx.load(str(annotated))
    assert [o.name for o in written.graph.output] == ["passed", "folded", "result"]
