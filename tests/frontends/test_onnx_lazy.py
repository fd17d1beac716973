"""Large weights left in the model file (frontends/onnx_lazy.py): the wire-format scan
against protobuf's own parser, and imports from a file against imports of the same bytes
held in memory (numpy's equality as the oracle)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

from popart_unwind.errors import ModelImportError
from popart_unwind.frontends import onnx_lazy
from popart_unwind.frontends.onnx_import import import_onnx
from popart_unwind.frontends.onnx_lazy import WireFormatError, read_without_large_data

DTYPES = (np.float32, np.float16, np.int64, np.int32, np.uint8, np.float64, np.bool_)


@st.composite
def weighted_models(draw):
    """A chain of Identity ops over initializers of random types, sizes and names (some
    stored as raw data, some in typed fields), with doc strings and metadata around."""
    count = draw(st.integers(1, 6))
    initializers, nodes, outputs = [], [], []
    for index in range(count):
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 9), min_size=0, max_size=3)))
        values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) % 7
        tensor = numpy_helper.from_array(values.astype(dtype), f"w{index}_{'é' * index}")
        if draw(st.booleans()) and dtype == np.float32:
            tensor = oh.make_tensor(tensor.name, T.FLOAT, shape,
                                    values.astype(np.float32).reshape(-1).tolist())
        initializers.append(tensor)
        nodes.append(oh.make_node("Identity", [tensor.name], [f"y{index}"],
                                  doc_string="d" * draw(st.integers(0, 300))))
        outputs.append(oh.make_tensor_value_info(f"y{index}", tensor.data_type, shape))
    graph = oh.make_graph(nodes, "lazy", [], outputs, initializer=initializers)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    oh.set_model_props(model, {"note": "n" * draw(st.integers(0, 200))})
    return model


@settings(max_examples=40, deadline=None)
@given(weighted_models(), st.integers(0, 64))
def test_the_scan_leaves_out_exactly_the_large_raw_data(tmp_path_factory, model, min_bytes):
    path = tmp_path_factory.mktemp("lazy") / "model.onnx"
    onnx.save(model, str(path))
    light, spans = read_without_large_data(path, min_bytes)
    parsed = onnx.load_model_from_string(light)
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    data = path.read_bytes()
    for tensor in expected.graph.initializer:
        if tensor.HasField("raw_data") and len(tensor.raw_data) >= min_bytes:
            span = spans.pop(tensor.name)
            assert data[span.offset:span.offset + span.length] == tensor.raw_data
            tensor.ClearField("raw_data")
    assert not spans  # nothing else was left out
    assert parsed == expected


@settings(max_examples=25, deadline=None)
@given(weighted_models())
def test_a_file_imports_the_same_values_as_its_bytes(tmp_path_factory, model):
    path = tmp_path_factory.mktemp("lazy") / "model.onnx"
    onnx.save(model, str(path))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnx_lazy, "LAZY_BYTES", 1)  # every raw payload left in the file
        from_file = import_onnx(path)
    from_bytes = import_onnx(path.read_bytes())
    for tensor in from_bytes.main_graph.producerless_tensors():
        mapped = from_file.main_graph.tensor(tensor.id)
        assert mapped.dtype == tensor.dtype
        assert np.asarray(mapped.data).shape == np.asarray(tensor.data).shape
        assert np.array_equal(mapped.data, tensor.data)


def test_large_weights_are_mapped_not_read(tmp_path):
    big = np.arange(1 << 15, dtype=np.float32).reshape(64, 512)  # 128 KiB: left in the file
    small = np.ones(4, np.float32)
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["x", "big"], ["h"]), oh.make_node("Add", ["h", "small"], ["y"])],
        "g", [oh.make_tensor_value_info("x", T.FLOAT, [2, 64])],
        [oh.make_tensor_value_info("y", T.FLOAT, [2, 512])],
        initializer=[numpy_helper.from_array(big, "big"),
                     numpy_helper.from_array(small, "small")])
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), str(path))
    ir = import_onnx(path)
    data = ir.main_graph.tensor("big").data
    assert isinstance(data, np.memmap) and not data.flags.writeable
    assert np.array_equal(data, big)
    assert not isinstance(ir.main_graph.tensor("small").data, np.memmap)


def test_external_data_is_mapped_too(tmp_path):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph = oh.make_graph([oh.make_node("Identity", ["w"], ["y"])], "g", [],
                          [oh.make_tensor_value_info("y", T.FLOAT, [3, 4])],
                          initializer=[numpy_helper.from_array(values, "w")])
    path = tmp_path / "m.onnx"
    onnx.save_model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), str(path),
                    save_as_external_data=True, location="w.bin", size_threshold=0)
    data = import_onnx(path).main_graph.tensor("w").data
    assert isinstance(data, np.memmap)
    assert np.array_equal(data, values)


def test_data_of_the_wrong_length_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_lazy, "LAZY_BYTES", 1)
    tensor = numpy_helper.from_array(np.zeros((4, 4), np.float32), "w")
    tensor.dims[:] = [4, 5]  # 64 bytes of data for 80
    graph = oh.make_graph([oh.make_node("Identity", ["w"], ["y"])], "g", [],
                          [oh.make_tensor_value_info("y", T.FLOAT, [4, 5])], initializer=[tensor])
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), str(path))
    with pytest.raises(ModelImportError, match=r"tensor 'w' holds 64 bytes .* need 80"):
        import_onnx(path)


@pytest.mark.parametrize("data", [b"\x00", b"\x0b", b"\x3a\x05ab", b"\xff\xff\xff"],
                         ids=["field 0", "wire type 3", "past the end", "endless varint"])
def test_bytes_the_scan_cannot_follow_are_refused_by_it(tmp_path, data):
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(WireFormatError):
        read_without_large_data(path)
    with pytest.raises(ModelImportError, match="cannot read ONNX model"):
        import_onnx(path)  # ONNX's reader then says what is wrong
