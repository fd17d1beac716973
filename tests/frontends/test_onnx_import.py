"""The ONNX front end on hand-built models: tensor kinds, shapes agreeing with ONNX's own
inference, external data (and its refusal outside the model's folder), local functions,
Loop/If/Scan bodies with implicit inputs, opaque ops, placement, and clear errors."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

from popart_unwind.errors import (
    DynamicShapeError,
    ModelImportError,
    UnknownOpsWarning,
    UnsupportedModelError,
)
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.ir import Ir, TensorType
from popart_unwind.ops.shape_inference import check_shapes
from popart_unwind.options import SessionOptions


def model(nodes, inputs, outputs, initializers=(), value_info=(), opsets=(("", 18),),
          functions=()):
    graph = oh.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers),
                          value_info=list(value_info))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid(d, v) for d, v in opsets],
                         functions=list(functions))


def info(name, shape, elem=T.FLOAT):
    return oh.make_tensor_value_info(name, elem, shape)


def mlp():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w1"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([3, 2], np.int64), "shape")]
    nodes = [oh.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             oh.make_node("Add", ["h", "b1"], ["h_bias"]),
             oh.make_node("Relu", ["h_bias"], ["h_relu"]),
             oh.make_node("Constant", [], ["scale"],
                          value=numpy_helper.from_array(np.array(0.5, np.float32))),
             oh.make_node("Mul", ["h_relu", "scale"], ["h_scaled"]),
             oh.make_node("Gemm", ["h_scaled", "w2"], ["logits"], name="fc2"),
             oh.make_node("Reshape", ["logits", "shape"], ["y"]),
             oh.make_node("Softmax", ["y"], ["probs"], axis=0)]
    return model(nodes, [info("x", [2, 4])], [info("probs", None)], inits)


def test_mlp_imports_with_kinds_shapes_and_metadata():
    ir = Ir.from_onnx(mlp())
    ir.verify()
    check_shapes(ir)
    main = ir.main_graph
    kinds = {t.id: t.tensor_type for t in main.producerless_tensors()}
    assert kinds == {"w1": TensorType.VARIABLE, "b1": TensorType.VARIABLE,
                     "w2": TensorType.VARIABLE, "shape": TensorType.CONST,
                     "x": TensorType.STREAM, "scale": TensorType.CONST}
    assert main.input_ids == ["x"] and main.output_ids == ["probs"]
    assert main.tensor("probs").shape == (3, 2) and main.tensor("h").shape == (2, 8)
    assert [op.type.name for op in main.ops] == ["MatMul", "Add", "Relu", "Mul", "Gemm",
                                                 "Reshape", "Softmax"]
    assert {str(op.type) for op in main.ops} >= {"ai.onnx.MatMul:18", "ai.onnx.Gemm:18"}
    assert main.ops[0].name == "fc1" and main.ops[-1].attributes == {"axis": 0}
    assert ir.metadata["source"] == "<ModelProto 'g'>" and ir.metadata["format"] == "onnx"


def test_large_weights_keep_their_data_though_onnx_inference_never_sees_it(monkeypatch):
    """ONNX's shape inference copies what it is given twice; it is given the model with
    large initializers' type and dims only, and they are imported with their data."""
    import onnx.shape_inference

    from popart_unwind.frontends import onnx_import

    weight = np.arange(256 * 128, dtype=np.float32).reshape(256, 128)  # 128 KiB
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]),
             oh.make_node("Reshape", ["h", "shape"], ["flat"]),
             oh.make_node("Relu", ["flat"], ["y"])]
    proto = model(nodes, [info("x", [4, 256])], [info("y", None)],
                  [numpy_helper.from_array(weight, "w"),
                   numpy_helper.from_array(np.array([-1], np.int64), "shape")])
    given = []
    infer = onnx.shape_inference.infer_shapes

    def recording(light, **options):
        given.append(light.ByteSize())
        return infer(light, **options)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", recording)
    ir = import_onnx(proto)
    assert given and given[0] < onnx_import.INFERENCE_DATA_BYTES < weight.nbytes
    graph = ir.main_graph
    np.testing.assert_array_equal(graph.tensor("w").data, weight)
    assert graph.tensor("w").tensor_type == TensorType.VARIABLE
    assert graph.tensor("h").shape == (4, 128) and graph.tensor("y").shape == (512,)
    assert len(proto.graph.initializer[0].raw_data) == weight.nbytes  # the input untouched


def test_importing_twice_gives_identical_json():
    assert import_onnx(mlp()).to_json() == import_onnx(mlp()).to_json()


def save_with_external_data(proto, folder, location="weights.bin"):
    path = folder / "model.onnx"
    onnx.save_model(proto, str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=location, size_threshold=0)
    return path


def test_external_data_is_read_from_the_models_folder(tmp_path):
    path = save_with_external_data(mlp(), tmp_path)
    ir = import_onnx(path)
    expected = numpy_helper.to_array(mlp().graph.initializer[0])
    assert np.array_equal(ir.main_graph.tensor("w1").data, expected)
    assert ir.metadata["source"] == str(path)


def test_missing_external_file_is_a_model_import_error(tmp_path):
    path = save_with_external_data(mlp(), tmp_path)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelImportError, match=r"tensor 'w1'.*weights\.bin is missing"):
        import_onnx(path)


def relocated(tmp_path, location):
    proto = onnx.load(str(save_with_external_data(mlp(), tmp_path)), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    folder = tmp_path / "model_dir"
    folder.mkdir(exist_ok=True)
    onnx.save_model(proto, str(folder / "model.onnx"))
    return folder / "model.onnx"


def test_external_data_outside_the_models_folder_is_refused(tmp_path):
    (tmp_path / "evil.bin").write_bytes(b"\0" * 4096)
    with pytest.raises(ModelImportError, match=r"tensor 'w1'.*'\.\./evil\.bin'.*outside"):
        import_onnx(relocated(tmp_path, "../evil.bin"))
    with pytest.raises(ModelImportError, match=r"tensor 'w1'.*is absolute"):
        import_onnx(relocated(tmp_path, str(tmp_path / "evil.bin")))


def test_a_symlink_escaping_the_models_folder_is_refused(tmp_path):
    path = relocated(tmp_path, "link.bin")
    os.symlink(tmp_path / "weights.bin", path.parent / "link.bin")
    with pytest.raises(ModelImportError, match=r"tensor 'w1'.*outside the model's folder"):
        import_onnx(path)


def test_external_data_of_an_in_memory_model_needs_base_dir(tmp_path):
    proto = onnx.load(str(save_with_external_data(mlp(), tmp_path)), load_external_data=False)
    with pytest.raises(ModelImportError, match="pass base_dir"):
        import_onnx(proto)
    assert import_onnx(proto, base_dir=tmp_path).main_graph.tensor("w1").data is not None


def test_local_functions_are_inlined():
    function = oh.make_function("local", "Twice", ["a"], ["b"],
                                [oh.make_node("Add", ["a", "a"], ["b"])],
                                [oh.make_opsetid("", 18)])
    proto = model([oh.make_node("Twice", ["x"], ["y"], domain="local")], [info("x", [3])],
                  [info("y", [3])], opsets=(("", 18), ("local", 1)), functions=[function])
    ir = import_onnx(proto)
    assert [op.type.name for op in ir.main_graph.ops] == ["Add"]
    assert ir.main_graph.tensor("y").shape == (3,)


def loop_model():
    body = oh.make_graph(
        [oh.make_node("Identity", ["cond_in"], ["cond_out"]),
         oh.make_node("Add", ["acc_in", "outer"], ["acc_out"]),
         oh.make_node("Identity", ["acc_out"], ["scan_out"])],
        "body", [info("i", [], T.INT64), info("cond_in", [], T.BOOL), info("acc_in", [2, 3])],
        [info("cond_out", [], T.BOOL), info("acc_out", [2, 3]), info("scan_out", [2, 3])])
    nodes = [oh.make_node("Add", ["x", "x"], ["outer"]),
             oh.make_node("Loop", ["M", "", "x"], ["final", "stacked"], name="loop", body=body)]
    return model(nodes, [info("x", [2, 3])], [info("final", None), info("stacked", None)],
                 [numpy_helper.from_array(np.array(5, np.int64), "M")])


def test_loop_body_reads_outer_values_through_implicit_inputs():
    ir = import_onnx(loop_model())
    ir.verify()
    loop = ir.main_graph.ops[-1]
    body = ir.graph("loop.body")
    assert loop.attributes["body"] == "loop.body"
    assert loop.attributes["num_implicit_inputs"] == 1
    assert [t.id for t in loop.inputs] == ["M", "x", "outer"]
    assert body.input_ids == ["i", "cond_in", "acc_in", "outer"]
    assert loop.op_in_to_subgraph_in_index(body, 3) == 3
    assert [t.shape for t in loop.outputs] == [(2, 3), (5, 2, 3)]


def if_model(inner=None):
    then_graph = oh.make_graph([oh.make_node("Add", ["a", "b"], ["t"])], "then", [],
                               [info("t", [3])])
    else_graph = oh.make_graph([oh.make_node("Mul", ["b", "c"], ["e"])], "else", [],
                               [info("e", [3])])
    node = oh.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_graph,
                        else_branch=else_graph)
    return node


def test_if_branches_capture_outer_values_with_branch_index_maps():
    proto = model([if_model()], [info(n, [3]) for n in "abc"] + [info("cond", [], T.BOOL)],
                  [info("y", [3])])
    ir = import_onnx(proto)
    ir.verify()
    op = ir.main_graph.ops[0]
    then_graph, else_graph = op.called_graphs()
    assert (then_graph.id, else_graph.id) == ("branch.then_branch", "branch.else_branch")
    for graph in (then_graph, else_graph):
        for graph_in, name in enumerate(graph.input_ids):
            op_in = op.subgraph_in_to_op_in_index(graph, graph_in)
            assert op.input(op_in).id == name
    assert op.output(0).shape == (3,)


def test_nested_bodies_capture_through_every_level():
    then_graph = oh.make_graph([oh.make_node("Add", ["acc_in", "far"], ["t"])], "then", [],
                               [info("t", [2])])
    else_graph = oh.make_graph([oh.make_node("Identity", ["acc_in"], ["e"])], "else", [],
                               [info("e", [2])])
    body = oh.make_graph(
        [oh.make_node("If", ["cond_in"], ["acc_out"], then_branch=then_graph,
                      else_branch=else_graph),
         oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [info("i", [], T.INT64), info("cond_in", [], T.BOOL), info("acc_in", [2])],
        [info("cond_out", [], T.BOOL), info("acc_out", [2])])
    proto = model([oh.make_node("Loop", ["M", "go", "x"], ["y"], body=body)],
                  [info("x", [2]), info("far", [2]), info("M", [], T.INT64),
                   info("go", [], T.BOOL)], [info("y", [2])])
    ir = import_onnx(proto)
    ir.verify()
    assert [g.id for g in ir.graphs] == ["", "Loop0.body", "Loop0.body/If0.else_branch",
                                         "Loop0.body/If0.then_branch"]
    assert ir.graph("Loop0.body").input_ids[-1] == "far"
    assert ir.main_graph.ops[0].input(3).id == "far"
    assert ir.main_graph.tensor("y").shape == (2,)


def scan_model():
    body = oh.make_graph(
        [oh.make_node("Add", ["s_in", "x_t"], ["s_sum"]),
         oh.make_node("Mul", ["s_sum", "scale"], ["s_out"]),
         oh.make_node("Identity", ["s_out"], ["y_t"])],
        "scan_body", [info("s_in", [4]), info("x_t", [4])], [info("s_out", [4]),
                                                             info("y_t", [4])])
    node = oh.make_node("Scan", ["s0", "xs"], ["s_final", "ys"], name="scan", body=body,
                        num_scan_inputs=1, scan_input_axes=[1])
    return model([node], [info("s0", [4]), info("xs", [4, 7]), info("scale", [4])],
                 [info("s_final", None), info("ys", None)])


def test_scan_bodies_get_implicit_inputs_and_stacked_outputs():
    ir = import_onnx(scan_model())
    op = ir.main_graph.ops[0]
    assert op.attributes["num_implicit_inputs"] == 1
    assert ir.graph("scan.body").input_ids == ["s_in", "x_t", "scale"]
    assert [t.shape for t in op.outputs] == [(4,), (7, 4)]
    check_shapes(ir)


def test_scan_imports_verify():
    import_onnx(scan_model()).verify()


@pytest.mark.parametrize("domain", ["com.example", ""])
def test_unknown_ops_stay_opaque_with_their_value_info_shapes(domain):
    nodes = [oh.make_node("Frobnicate", ["x"], ["f", "g"], domain=domain, level=3),
             oh.make_node("Neg", ["f"], ["y"])]
    proto = model(nodes, [info("x", [2, 2])], [info("y", None)],
                  value_info=[info("f", [4, 1]), info("g", [7], T.INT32)],
                  opsets=(("", 18), ("com.example", 2)))
    with pytest.raises(UnsupportedModelError, match=r"Frobnicate \(node 'Frobnicate'\)"):
        import_onnx(proto)
    with pytest.warns(UnknownOpsWarning, match="Frobnicate"):
        ir = import_onnx(proto, allow_unknown_ops=True)
    ir.verify()
    opaque = ir.main_graph.ops[0]
    assert opaque.type.domain == (domain or "ai.onnx") and opaque.attributes == {"level": 3}
    assert opaque.type.version == (2 if domain else 18)
    assert [(t.dtype, t.shape) for t in opaque.outputs] == [("float32", (4, 1)),
                                                            ("int32", (7,))]
    assert ir.main_graph.tensor("y").shape == (4, 1)


def test_a_value_info_with_a_negative_dim_leaves_the_shape_to_the_rules():
    """ONNX's inference writes -1 for a value it cannot size (AffineGrid's expansion, in a
    branch that never runs on these shapes): no tensor has it, so the shape is unknown to
    the import and the rules find it."""
    nodes = [oh.make_node("Relu", ["x"], ["h"]), oh.make_node("Neg", ["h"], ["y"])]
    proto = model(nodes, [info("x", [2, 3])], [info("y", None)], value_info=[info("h", [-1])])
    ir = import_onnx(proto)
    assert ir.main_graph.tensor("h").shape == ir.main_graph.tensor("y").shape == (2, 3)


def test_a_negative_dim_drops_the_seeds_of_every_output_of_its_node():
    """A Split of 5 into 4 as ONNX's inference sizes it (2, 2, 2, -1): the -1 shows the
    sizes are wrong, so none is kept and the rule's (ONNX's reference: 2, 2, 1, 0) stand."""
    node = oh.make_node("Split", ["x"], ["a", "b", "c", "d"], num_outputs=4)
    proto = model([node], [info("x", [5])], [info(n, None) for n in "abcd"],
                  value_info=[info("a", [2]), info("b", [2]), info("c", [2]), info("d", [-1])])
    ir = import_onnx(proto)
    assert [ir.main_graph.tensor(n).shape for n in "abcd"] == [(2,), (2,), (1,), (0,)]


def test_a_graph_input_with_a_negative_dim_is_refused_as_not_static():
    with pytest.raises(DynamicShapeError, match="'x'"):
        import_onnx(model([oh.make_node("Relu", ["x"], ["y"])], [info("x", [2, -1])],
                          [info("y", None)]))


def test_placement_attributes_become_settings_and_attributes_become_python_values():
    node = oh.make_node("Frob", ["x"], ["y"], domain="custom", name="frob", __ipu_number=2,
                        __pipeline_stage=1, __execution_phase=3, ints=[1, 2], f=0.5, s="hi",
                        strings=["a", "b"], t=numpy_helper.from_array(np.eye(2, dtype=np.int32)))
    proto = model([node], [info("x", [2])], [info("y", [2])], value_info=[info("y", [2])],
                  opsets=(("", 18), ("custom", 1)))
    with pytest.warns(UnknownOpsWarning, match="custom::Frob"):
        op = import_onnx(proto, SessionOptions(allow_unknown_ops=True)).main_graph.ops[0]
    assert (op.settings.name, op.settings.vgraph_id, op.settings.pipeline_stage,
            op.settings.execution_phase) == ("frob", 2, 1, 3)
    attributes = op.attributes
    assert set(attributes) == {"ints", "f", "s", "strings", "t"}
    assert attributes["ints"] == [1, 2] and attributes["f"] == 0.5 and attributes["s"] == "hi"
    assert attributes["strings"] == ["a", "b"]
    assert attributes["t"].dtype == np.int32 and np.array_equal(attributes["t"], np.eye(2))


def test_symbolic_input_dims_need_input_shapes():
    proto = model([oh.make_node("Relu", ["x"], ["y"])], [info("x", ["batch", 4])],
                  [info("y", ["batch", 4])])
    with pytest.raises(ModelImportError, match=r"input 'x'.*\['batch'\].*input_shapes"):
        import_onnx(proto)
    ir = import_onnx(proto, input_shapes={"x": [8, 4]})
    assert ir.main_graph.tensor("y").shape == (8, 4)
    with pytest.raises(ModelImportError, match="not a graph input"):
        import_onnx(proto, input_shapes={"z": [1]})


def test_unreadable_or_invalid_models_raise_one_clear_line(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x12\xff\xff\xff\xff\x0fthis is not a protobuf")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for path, message in ((tmp_path / "missing.onnx", "no such file"),
                          (garbage, "cannot read ONNX model"), (empty, "no IR version")):
        with pytest.raises(ModelImportError, match=message) as caught:
            import_onnx(path)
        assert "\n" not in str(caught.value)
    with pytest.raises(ModelImportError, match="expected a path"):
        import_onnx(42)


def test_models_with_inconsistent_shapes_or_undefined_names_are_refused():
    bad_shapes = model([oh.make_node("MatMul", ["a", "b"], ["y"])],
                       [info("a", [2, 3]), info("b", [4, 5])], [info("y", None)])
    with pytest.raises(ModelImportError, match="MatMul#0"):
        import_onnx(bad_shapes)
    undefined = model([oh.make_node("Relu", ["nowhere"], ["y"])], [], [info("y", None)])
    with pytest.raises(ModelImportError, match="reads 'nowhere'"):
        import_onnx(undefined)
