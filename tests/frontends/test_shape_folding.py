"""Shape computations written for dynamic axes fold at import once the inputs are static:
each hand-built pattern's shapes equal numpy's, its Shape ops are gone, and a shape read
from an input's values is refused naming the input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx_node_cases import expected_types, import_alone, node_cases, output_types

from popart_unwind import transforms
from popart_unwind.errors import DynamicShapeError, ModelImportError
from popart_unwind.frontends import onnx_import
from popart_unwind.ir import Ir
from popart_unwind.ir.tensor import TensorType

BATCH, SEQUENCE, WIDTH = 3, 5, 4


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return oh.make_tensor(name, TensorProto.INT64, [len(values)], values)


def _model(nodes: list[onnx.NodeProto], outputs: list[str], initializers=(),
           inputs: list[onnx.ValueInfoProto] | None = None) -> onnx.ModelProto:
    inputs = inputs or [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                  ["batch", "sequence", WIDTH])]
    graph = oh.make_graph(nodes, "dynamic", inputs,
                          [oh.make_tensor_value_info(name, TensorProto.UNDEFINED, None)
                           for name in outputs], initializer=list(initializers))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.fixture(params=["onnx-seeds", "our-rules-alone"])
def importer(request, monkeypatch):
    """Import with ONNX's shape inference seeding shapes (its data propagation follows some
    of these patterns itself), or without it: then our rules and folds find every shape.
    Either way, no Shape op is left once the pipeline's canonicalizer has run."""
    seeded = request.param == "onnx-seeds"
    if not seeded:
        monkeypatch.setattr(onnx_import, "_with_inferred_shapes",
                            lambda proto: (proto, proto.graph.initializer))

    def imported(model: onnx.ModelProto) -> Ir:
        ir = Ir.from_onnx(model, dims={"batch": BATCH, "sequence": SEQUENCE})
        transforms.run_pipeline(ir, ["InferShapes", "Canonicalize"])
        assert not any(op.type.name == "Shape" for op in ir.main_graph.ops)
        return ir

    return imported


def _shape(ir: Ir, name: str) -> tuple[int, ...]:
    return ir.main_graph.tensor(name).shape


def test_gather_unsqueeze_concat_reshape(importer):
    """x.reshape(x.shape[0], -1), as exporters write it."""
    nodes = [oh.make_node("Shape", ["x"], ["shape"]),
             oh.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
             oh.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
             oh.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
             oh.make_node("Reshape", ["x", "target"], ["y"]),
             oh.make_node("Relu", ["y"], ["z"])]
    model = _model(nodes, ["z"], [oh.make_tensor("zero", TensorProto.INT64, [], [0]),
                                  _ints("axes", [0]), _ints("minus_one", [-1])])
    ir = importer(model)
    x = np.zeros((BATCH, SEQUENCE, WIDTH), np.float32)
    assert _shape(ir, "z") == x.reshape(x.shape[0], -1).shape
    reshape = ir.main_graph.tensor("y").producer
    target = reshape.input(1)
    assert target.tensor_type is TensorType.CONST
    assert target.data.tolist() == [BATCH, -1]


def test_slice_constant_of_shape(importer):
    """ones(x.shape[:2]) added to x's first channel."""
    nodes = [oh.make_node("Shape", ["x"], ["shape"]),
             oh.make_node("Slice", ["shape", "start", "end"], ["leading"]),
             oh.make_node("ConstantOfShape", ["leading"], ["ones"],
                          value=oh.make_tensor("one", TensorProto.FLOAT, [1], [1.0])),
             oh.make_node("Unsqueeze", ["ones", "last"], ["ones3"]),
             oh.make_node("Add", ["x", "ones3"], ["y"])]
    model = _model(nodes, ["y", "ones"], [_ints("start", [0]), _ints("end", [2]),
                                          _ints("last", [2])])
    ir = importer(model)
    x = np.zeros((BATCH, SEQUENCE, WIDTH), np.float32)
    ones = np.ones(x.shape[:2], np.float32)
    assert _shape(ir, "ones") == ones.shape
    assert _shape(ir, "y") == (x + ones[:, :, None]).shape
    np.testing.assert_array_equal(ir.main_graph.tensor("ones").data, ones)


def test_range_from_shape(importer):
    """Position ids: arange(x.shape[1]) expanded to (batch, sequence)."""
    nodes = [oh.make_node("Shape", ["x"], ["shape"]),
             oh.make_node("Gather", ["shape", "one"], ["length"], axis=0),
             oh.make_node("Range", ["zero", "length", "step"], ["positions"]),
             oh.make_node("Unsqueeze", ["positions", "axes"], ["row"]),
             oh.make_node("Slice", ["shape", "start", "end"], ["leading"]),
             oh.make_node("Expand", ["row", "leading"], ["ids"]),
             oh.make_node("Gather", ["table", "ids"], ["embedded"], axis=0),
             oh.make_node("Add", ["x", "embedded"], ["y"])]
    table = oh.make_tensor("table", TensorProto.FLOAT, [16, WIDTH], [0.5] * 16 * WIDTH)
    scalar = lambda name, v: oh.make_tensor(name, TensorProto.INT64, [], [v])  # noqa: E731
    model = _model(nodes, ["y", "ids"], [scalar("zero", 0), scalar("one", 1),
                                         scalar("step", 1), _ints("axes", [0]),
                                         _ints("start", [0]), _ints("end", [2]), table])
    ir = importer(model)
    ids = np.broadcast_to(np.arange(SEQUENCE)[None], (BATCH, SEQUENCE))
    assert _shape(ir, "ids") == ids.shape
    np.testing.assert_array_equal(ir.main_graph.tensor("ids").data, ids)
    assert _shape(ir, "y") == (BATCH, SEQUENCE, WIDTH)


def test_a_static_model_keeps_its_shape_ops():
    """Nothing waits for a fold: the import leaves the graph as it was (the canonicalizer
    folds later, as before)."""
    nodes = [oh.make_node("Shape", ["x"], ["shape"]),
             oh.make_node("Reshape", ["x", "shape"], ["y"])]
    model = _model(nodes, ["y"])
    ir = Ir.from_onnx(model, dims={"batch": BATCH, "sequence": SEQUENCE})
    assert [op.type.name for op in ir.main_graph.ops] == ["Shape", "Reshape"]


def test_a_shape_read_from_an_input_imports_but_is_refused_for_planning_naming_it():
    """As ONNX's inference does, the import keeps a shape it cannot know; the pipeline's
    InferShapes, which guarantees known shapes, refuses it naming the input."""
    nodes = [oh.make_node("Reshape", ["x", "target"], ["y"])]
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH]),
              oh.make_tensor_value_info("target", TensorProto.INT64, [2])]
    ir = Ir.from_onnx(_model(nodes, ["y"], inputs=inputs))
    with pytest.raises(DynamicShapeError, match=r"Reshape.*values of graph input 'target'"):
        transforms.run_pipeline(ir)


def test_dims_fill_every_input_that_names_them():
    inputs = [oh.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", "sequence"]),
              oh.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 1])]
    ir = Ir.from_onnx(_model([oh.make_node("Add", ["a", "b"], ["y"])], ["y"], inputs=inputs),
                      dims={"batch": 2, "sequence": 7})
    assert (_shape(ir, "a"), _shape(ir, "b"), _shape(ir, "y")) == ((2, 7), (2, 1), (2, 7))


@pytest.mark.parametrize("dims, words", [
    ({"batch": BATCH}, ["'x'", "['sequence']", "--dim sequence="]),
    ({"batch": BATCH, "sequence": SEQUENCE, "width": 4}, ["'width'", "['batch', 'sequence']"]),
    ({"batch": 0, "sequence": SEQUENCE}, ["'batch'", "below 1"]),
])
def test_wrong_dims_are_refused_in_one_line(dims, words):
    model = _model([oh.make_node("Relu", ["x"], ["y"])], ["y"])
    with pytest.raises(ModelImportError) as caught:
        Ir.from_onnx(model, dims=dims)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("name", ["test_rms_normalization_2d_axis_negative_1_expanded",
                                  "test_rms_normalization_4d_axis_negative_3_expanded",
                                  "test_rms_normalization_2d_axis0_expanded",
                                  "test_rms_normalization_4d_axis1_expanded"])
def test_a_reduction_over_axes_computed_from_a_shape_is_typed_by_the_import_folds(name):
    """RMSNormalization's expansion reduces over ``Range(axis, Size(Shape(X)))``. Folded at
    import, the output gets ONNX's shape with our rules alone. A non-negative axis reaches
    the Range through an ``Identity`` of a Constant, whose value is folded too."""
    case = node_cases("rmsnormalization")[name]
    assert output_types(import_alone(case.model)) == expected_types(case)


@pytest.mark.parametrize("name", ["test_rms_normalization_2d_axis0_expanded",
                                  "test_rms_normalization_4d_axis_negative_3_expanded"])
def test_the_reductions_rule_computes_the_same_axes_without_the_import_folds(name, monkeypatch):
    """The lazy path (``computed_value``, through the same fold hooks) gives the reduction's
    axes with nothing folded, so the import folds and the rules agree; and the model
    plans-ready through the pipeline's InferShapes, no input being named."""
    monkeypatch.setattr(onnx_import, "fold_shape_computations", lambda ir: False)
    case = node_cases("rmsnormalization")[name]
    ir = import_alone(case.model)
    assert any(op.type.name == "Shape" for op in ir.main_graph.ops)  # nothing was folded
    assert output_types(ir) == expected_types(case)
    transforms.run_pipeline(ir, ["InferShapes"])


@pytest.mark.parametrize("folds", [True, False])
def test_axes_computed_from_a_shape_and_an_input_name_only_the_input(folds, monkeypatch):
    """``axes = Concat(Size(Shape(x)) - 1, k)``: the first part is known before running
    (it reads only x's shape), so only ``k`` decides the shape, and only ``k`` is named,
    whether the import folded that part or the refusal computes it."""
    if not folds:
        monkeypatch.setattr(onnx_import, "fold_shape_computations", lambda ir: False)
    nodes = [oh.make_node("Shape", ["x"], ["shape"]),
             oh.make_node("Size", ["shape"], ["rank"]),
             oh.make_node("Sub", ["rank", "one"], ["last"]),
             oh.make_node("Unsqueeze", ["last", "zero"], ["last1"]),
             oh.make_node("Concat", ["last1", "k"], ["axes"], axis=0),
             oh.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)]
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, SEQUENCE, WIDTH]),
              oh.make_tensor_value_info("k", TensorProto.INT64, [1])]
    model = oh.make_model(
        oh.make_graph(nodes, "named", inputs,
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      initializer=[oh.make_tensor("one", TensorProto.INT64, [], [1]),
                                   oh.make_tensor("zero", TensorProto.INT64, [1], [0])]),
        opset_imports=[oh.make_opsetid("", 18)])
    for ir in (Ir.from_onnx(model), import_alone(model)):
        with pytest.raises(DynamicShapeError) as caught:
            transforms.run_pipeline(ir)
        assert "ReduceMean" in str(caught.value) and "graph input 'k'" in str(caught.value)
        assert "'x'" not in str(caught.value)
