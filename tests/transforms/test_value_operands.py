"""Operands that decide shapes or element maps (a reduction's axes, a Split's sizes, a
Slice's starts) given as graph inputs, whose values are not known before running.

Where the op's shapes alone decide its layout (a reduction's axes, a Split's sizes, read off
the declared output shapes) the model plans, with the layouts of the same model whose
operand is a constant. Where they do not (a Slice's starts; a reduction dropping one of two
equal dims), the pipeline refuses it with a DynamicShapeError naming the graph input.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as oh

from popart_unwind import transforms
from popart_unwind.cost.walk import computed_layouts
from popart_unwind.errors import DynamicShapeError
from popart_unwind.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import TensorType
from popart_unwind.machine.exchange import reduction_groups
from popart_unwind.ops.reduce import axes_from_shapes, layout_axes, reduced_axes
from popart_unwind.ops.registry import REGISTRY
from popart_unwind.target import IpuModel, TileTarget

TARGET = TileTarget(IpuModel(tiles_per_ipu=16))


def _model(node: onnx.NodeProto, data_shape: list[int], operands: dict[str, list[int]],
           outputs: dict[str, list[int] | None], as_inputs: bool, opset: int
           ) -> onnx.ModelProto:
    """One op reading ``data`` and int64 ``operands``, given as graph inputs or as
    initializers; outputs declared with the given shapes (None: undeclared)."""
    inputs = [oh.make_tensor_value_info("data", TensorProto.FLOAT, data_shape)]
    initializers = []
    for name, values in operands.items():
        if as_inputs:
            inputs.append(oh.make_tensor_value_info(name, TensorProto.INT64, [len(values)]))
        else:
            initializers.append(oh.make_tensor(name, TensorProto.INT64, [len(values)], values))
    graph = oh.make_graph([node], "operands", inputs,
                          [oh.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                           for name, shape in outputs.items()], initializer=initializers)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _planned(model: onnx.ModelProto, names: list[str]) -> tuple[Ir, dict[str, np.ndarray]]:
    """Run the pipeline and plan; the Ir and the layouts the cost walk computes for
    ``names``."""
    ir = Ir.from_onnx(model)
    transforms.run_pipeline(ir)
    plan = transforms.plan_ir(ir, TARGET)
    mappings = {(p.graph_id, p.tensor_id): p.tiles for p in plan.tensors}
    layouts = computed_layouts(ir, TARGET, mappings, set(names))
    assert set(layouts) == set(names)
    return ir, layouts


def _op(ir: Ir, op_type: str) -> Op:
    return next(op for op in ir.main_graph.ops if op.type.name == op_type)


def _both(node: onnx.NodeProto, data_shape, operands, outputs, opset: int) -> tuple[Op, Op]:
    """The op planned with its operands as constants, and as graph inputs."""
    names = ["data", *outputs]
    constant, _ = _planned(_model(node, data_shape, operands, outputs, False, opset), names)
    read, _ = _planned(_model(node, data_shape, operands, outputs, True, opset), names)
    assert _op(read, node.op_type).input(1).tensor_type is TensorType.STREAM
    return _op(constant, node.op_type), _op(read, node.op_type)


def _refused(model: onnx.ModelProto) -> str:
    ir = Ir.from_onnx(model)
    with pytest.raises(DynamicShapeError) as caught:
        transforms.run_pipeline(ir)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- reductions: the declared output shape decides the axes ------------------------------
@pytest.mark.parametrize(("op_type", "opset"), [("ReduceSum", 13), ("ReduceMean", 18),
                                                ("ReduceL2", 18), ("ReduceMax", 18)])
@pytest.mark.parametrize(("axes", "keepdims", "out_shape"), [
    ([1], 1, [4, 1, 6]),
    ([-1, 0], 1, [1, 3, 1]),
    ([1], 0, [4, 6]),       # only axis 1 has size 3
    ([0, 2], 0, [3]),
])
def test_a_reduction_over_axes_read_from_an_input_plans_as_with_constant_axes(
        op_type, opset, axes, keepdims, out_shape):
    """The planner groups the elements as the constant axes do (up to axes of size 1)."""
    node = oh.make_node(op_type, ["data", "axes"], ["y"], keepdims=keepdims)
    constant, read = _both(node, [4, 3, 6], {"axes": axes}, {"y": out_shape}, opset)
    rank = len(constant.input(0).shape)
    assert layout_axes(read, rank) == reduced_axes(constant, rank)
    assert reduction_groups(read.input(0).shape, layout_axes(read, rank)).tolist() == \
        reduction_groups(constant.input(0).shape, reduced_axes(constant, rank)).tolist()


def test_a_reduction_the_shapes_leave_open_is_refused_naming_the_axes_input():
    """Dropping one of two dims of size 2: the shapes fit two reductions."""
    node = oh.make_node("ReduceSum", ["data", "axes"], ["y"], keepdims=0)
    message = _refused(_model(node, [3, 2, 2], {"axes": [1]}, {"y": [3, 2]}, True, 13))
    assert "ReduceSum" in message and "graph input 'axes'" in message
    assert "'data'" not in message and "PopART" in message


def test_a_reduction_whose_output_shape_is_unknown_names_only_the_axes_input():
    """No declared output shape and ONNX cannot infer one: the shape depends on the axes'
    values, not on the data's."""
    node = oh.make_node("ReduceSum", ["data", "axes"], ["y"], keepdims=0)
    model = _model(node, [4, 3, 6], {"axes": [1]}, {"y": None}, True, 13)
    message = _refused(model)
    assert "output shape of op ReduceSum" in message and "graph input 'axes'" in message
    assert "'data'" not in message


# -- Split: the outputs' shapes give the sizes ---------------------------------------------
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize(("axis", "split"), [(0, [1, 3]), (1, [2, 0, 4]), (-1, [3, 3])])
def test_a_split_with_sizes_read_from_an_input_plans_as_with_constant_sizes(opset, axis, split):
    data_shape = [4, 6]
    outputs = {}
    for index, size in enumerate(split):
        shape = list(data_shape)
        shape[axis] = size
        outputs[f"y{index}"] = shape
    node = oh.make_node("Split", ["data", "split"], list(outputs), axis=axis)
    constant, read = _both(node, data_shape, {"split": split}, outputs, opset)
    rule = REGISTRY.layout_rule(read)
    assert rule.all_steps(read) == rule.all_steps(constant)


def test_a_split_whose_outputs_are_not_declared_is_refused_naming_the_sizes_input():
    node = oh.make_node("Split", ["data", "split"], ["y0", "y1"], axis=0)
    model = _model(node, [4, 6], {"split": [1, 3]}, {"y0": None, "y1": None}, True, 13)
    assert "graph input 'split'" in _refused(model)


# -- Slice: the element map needs the starts ----------------------------------------------
def test_a_slice_with_starts_read_from_an_input_is_refused_naming_it():
    node = oh.make_node("Slice", ["data", "starts", "ends"], ["y"])
    model = _model(node, [4, 6], {"starts": [1], "ends": [3]}, {"y": [2, 6]}, True, 13)
    message = _refused(model)
    assert "op Slice" in message and "graph inputs 'starts', 'ends'" in message
    assert "inputs 1 ('starts'), 2 ('ends')" in message and "PopART" in message
    assert "'data'" not in message


def test_a_slice_with_constant_starts_plans():
    node = oh.make_node("Slice", ["data", "starts", "ends"], ["y"])
    model = _model(node, [4, 6], {"starts": [1], "ends": [3]}, {"y": [2, 6]}, False, 13)
    _planned(model, ["y"])


def test_a_slice_with_starts_computed_from_a_shape_plans():
    """``starts = Shape(data)[1:2] - 4``: computed from the data's shape only, so known."""
    nodes = [oh.make_node("Shape", ["data"], ["shape"], start=1, end=2),
             oh.make_node("Sub", ["shape", "four"], ["starts"]),
             oh.make_node("Slice", ["data", "starts", "ends"], ["y"])]
    graph = oh.make_graph(
        nodes, "computed", [oh.make_tensor_value_info("data", TensorProto.FLOAT, [4, 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        initializer=[oh.make_tensor("four", TensorProto.INT64, [1], [4]),
                     oh.make_tensor("ends", TensorProto.INT64, [1], [4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15)])  # Shape's start
    _, layouts = _planned(model, ["y"])
    assert layouts["y"].size == 12


def test_a_slice_in_a_loop_body_at_the_iteration_is_refused_naming_the_body_input():
    """ONNX's ``loop11`` pattern: each iteration slices at its own index."""
    body = oh.make_graph(
        [oh.make_node("Identity", ["cond_in"], ["cond_out"]),
         oh.make_node("Add", ["iter", "one"], ["end"]),
         oh.make_node("Unsqueeze", ["iter", "zero"], ["start1"]),
         oh.make_node("Unsqueeze", ["end", "zero"], ["end1"]),
         oh.make_node("Slice", ["x", "start1", "end1"], ["piece"]),
         oh.make_node("Add", ["y_in", "piece"], ["y_out"])],
        "body",
        [oh.make_tensor_value_info("iter", TensorProto.INT64, []),
         oh.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         oh.make_tensor_value_info("y_in", TensorProto.FLOAT, [1])],
        [oh.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         oh.make_tensor_value_info("y_out", TensorProto.FLOAT, [1])],
        initializer=[oh.make_tensor("one", TensorProto.INT64, [], [1]),
                     oh.make_tensor("zero", TensorProto.INT64, [1], [0]),
                     oh.make_tensor("x", TensorProto.FLOAT, [5], [1.0] * 5)])
    graph = oh.make_graph(
        [oh.make_node("Loop", ["trips", "cond", "y"], ["y_final"], body=body)], "loop",
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [oh.make_tensor_value_info("y_final", TensorProto.FLOAT, [1])],
        initializer=[oh.make_tensor("trips", TensorProto.INT64, [], [5]),
                     oh.make_tensor("cond", TensorProto.BOOL, [], [True])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    message = _refused(model)
    assert "op Slice" in message and "input 'iter' of subgraph" in message


# -- the axes the shapes decide ------------------------------------------------------------
def _groups(shape: tuple[int, ...], axes: tuple[int, ...]) -> list[list[int]]:
    """Which flat input elements each flat result element reduces, in result order."""
    index = np.arange(int(np.prod(shape))).reshape(shape)
    kept = [a for a in range(len(shape)) if a not in axes]
    moved = np.moveaxis(index, kept + list(axes), range(len(shape)))
    rows = int(np.prod([shape[a] for a in kept]))
    return moved.reshape(rows, -1).tolist()


@given(st.lists(st.integers(1, 3), min_size=0, max_size=5).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)),
                            st.sets(st.integers(0, max(len(shape) - 1, 0)),
                                    max_size=len(shape)),
                            st.booleans())))
def test_axes_from_shapes_group_the_elements_as_the_true_axes(case):
    """Whatever axes the shapes give group the input elements as the axes that made the
    output shape do; with keepdims the shapes always give them; without, they give them
    exactly when no other choice of dropped dims fits with other groups (brute force)."""
    shape, axes, keepdims = case
    axes = tuple(sorted(a for a in axes if a < len(shape)))
    out = tuple(1 if a in axes else d for a, d in enumerate(shape)) if keepdims else tuple(
        d for a, d in enumerate(shape) if a not in axes)
    found = axes_from_shapes(shape, out, keepdims)
    fits = {tuple(c) for c in itertools.combinations(range(len(shape)), len(axes))
            if tuple(d for a, d in enumerate(shape) if a not in c) == out}
    groupings = {str(_groups(shape, c)) for c in fits} if not keepdims else {None}
    if keepdims or len(groupings) == 1:
        assert found is not None
        assert _groups(shape, found) == _groups(shape, axes)
    else:
        assert found is None


# -- a subgraph's inputs: a value the callers bind the same on every run -------------------
def _loop_model(axes_carried: bool) -> onnx.ModelProto:
    """A Loop whose body unsqueezes and sums back its carried ``y`` over ``axes``: the
    outer-scope constant itself (the same on every iteration), or a carried copy of it."""
    axes = "axes_in" if axes_carried else "axes"
    body_nodes = [oh.make_node("Identity", ["cond_in"], ["cond_out"]),
                  oh.make_node("Unsqueeze", ["y_in", axes], ["u"]),
                  oh.make_node("ReduceSum", ["u", axes], ["y_out"], keepdims=0)]
    body_inputs = [oh.make_tensor_value_info("iter", TensorProto.INT64, []),
                   oh.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                   oh.make_tensor_value_info("y_in", TensorProto.FLOAT, [2, 3])]
    body_outputs = [oh.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                    oh.make_tensor_value_info("y_out", TensorProto.FLOAT, [2, 3])]
    loop_inputs, loop_outputs = ["trips", "cond", "y"], ["y_final"]
    if axes_carried:
        body_nodes.append(oh.make_node("Identity", ["axes_in"], ["axes_out"]))
        body_inputs.append(oh.make_tensor_value_info("axes_in", TensorProto.INT64, [1]))
        body_outputs.append(oh.make_tensor_value_info("axes_out", TensorProto.INT64, [1]))
        loop_inputs.append("axes")
        loop_outputs.append("axes_final")
    body = oh.make_graph(body_nodes, "body", body_inputs, body_outputs)
    graph = oh.make_graph(
        [oh.make_node("Loop", loop_inputs, loop_outputs, body=body)], "loop",
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [oh.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in loop_outputs],
        initializer=[oh.make_tensor("trips", TensorProto.INT64, [], [3]),
                     oh.make_tensor("cond", TensorProto.BOOL, [], [True]),
                     oh.make_tensor("axes", TensorProto.INT64, [1], [1])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def test_a_constant_a_loop_body_reads_from_the_outer_scope_decides_its_shapes():
    """The body's ``axes`` is an implicit input bound to a constant: the same value on
    every iteration, so the body's shapes are known and the loop plans."""
    ir, _ = _planned(_loop_model(axes_carried=False), ["y_final"])
    body = next(graph for graph in ir.graphs if graph is not ir.main_graph)
    assert body.tensor("u").shape == (2, 1, 3)


def test_a_loop_carried_value_deciding_a_shape_is_refused_naming_the_body_input():
    """A carried value may change from one iteration to the next: not known before running,
    however it starts."""
    message = _refused(_loop_model(axes_carried=True))
    assert "Unsqueeze" in message and "input 'axes_in' of subgraph" in message
