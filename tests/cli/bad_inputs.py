"""Generators of bad inputs for the command: ONNX models the tool must refuse, and a folder
of awkward things (FIFOs, symbolic link loops, hard links, foreign and earlier reports) to
aim outputs at. Each bad model is built from the good linear layer by one change."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import onnx
from conftest import linear_layer_model
from onnx import TensorProto, helper

from popart_unwind.report.output_targets import MARKER_HEADER, REPORT_MARKER


def _with_node_type(op_type: str, domain: str = "", imports: tuple = ()) -> onnx.ModelProto:
    """The linear layer with its Relu replaced by ``domain::op_type``."""
    model = linear_layer_model()
    relu = model.graph.node[3]
    relu.op_type, relu.domain = op_type, domain
    for name, version in imports:
        model.opset_import.append(helper.make_opsetid(name, version))
    return model


def _with_opset(version: int) -> onnx.ModelProto:
    model = linear_layer_model()
    model.opset_import[0].version = version
    return model


def _with_ir_version(version: int) -> onnx.ModelProto:
    model = linear_layer_model()
    model.ir_version = version
    return model


def _without_opsets(keep: tuple = ()) -> onnx.ModelProto:
    model = linear_layer_model()
    del model.opset_import[:]
    for name, version in keep:
        model.opset_import.append(helper.make_opsetid(name, version))
    return model


def _twice_default() -> onnx.ModelProto:
    model = linear_layer_model()
    model.opset_import.append(helper.make_opsetid("ai.onnx", 17))
    return model


def _unknown_op_in_a_branch() -> onnx.ModelProto:
    """An If whose then-branch holds an unknown op: subgraphs are checked too."""
    model = linear_layer_model()
    then = helper.make_graph([helper.make_node("Frobnicate", ["xwb"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4, 16])])
    other = helper.make_graph([helper.make_node("Identity", ["xwb"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4, 16])])
    relu = model.graph.node[3]
    model.graph.node.remove(relu)
    model.graph.node.append(helper.make_node("If", ["c"], ["y"], then_branch=then,
                                             else_branch=other, name="branch"))
    model.graph.input.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    return model


def _placed(attribute: str, value: object) -> onnx.ModelProto:
    """The linear layer with its MatMul placed by ``attribute`` = ``value``."""
    model = linear_layer_model()
    model.graph.node[1].attribute.append(helper.make_attribute(attribute, value))
    return model


def _input_named_like_the_weight(elem_type: int, shape: list[int]) -> onnx.ModelProto:
    """A graph input sharing its name with the [16, 8] float weight, declared otherwise."""
    model = linear_layer_model()
    model.graph.input.append(helper.make_tensor_value_info("w", elem_type, shape))
    return model


def _declared(where: str, elem_type: int, shape: list[int]) -> onnx.ModelProto:
    """A declared type and shape contradicting the rules': of the matmul's result ``xw``
    (a value info) or of the graph output ``y``."""
    model = linear_layer_model()
    if where == "output":
        del model.graph.output[:]
        model.graph.output.append(helper.make_tensor_value_info("y", elem_type, shape))
    else:
        model.graph.value_info.append(helper.make_tensor_value_info(where, elem_type, shape))
    return model


def _with_external_weight(location: str) -> onnx.ModelProto:
    """The linear layer whose weight ``w`` is external data at ``location``."""
    model = linear_layer_model()
    weight = model.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", location
    return model


#: name -> (the bad model, a word its error must contain)
BAD_MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "misspelled-op": (lambda: _with_node_type("Rleu"), "Rleu"),
    "lower-case-op": (lambda: _with_node_type("relu"), "relu"),
    "invented-op": (lambda: _with_node_type("Frobnicate"), "Frobnicate"),
    "custom-domain": (lambda: _with_node_type("Foo", "com.example", (("com.example", 1),)),
                      "com.example::Foo"),
    "unimported-domain": (lambda: _with_node_type("Foo", "com.example"), "com.example"),
    "aten-domain-in-onnx": (lambda: _with_node_type("relu", "aten", (("aten", 1),)),
                            "aten::relu"),
    "custom-domain-version-0": (lambda: _with_node_type("Foo", "com.example",
                                                        (("com.example", 0),)), "version 0"),
    "gelu-before-opset-20": (lambda: _with_node_type("Gelu"), "opset 20"),
    "unknown-op-in-a-branch": (_unknown_op_in_a_branch, "Frobnicate"),
    "opset-0": (lambda: _with_opset(0), "opset 0"),
    "opset-1": (lambda: _with_opset(1), "opset 1"),
    "opset-6": (lambda: _with_opset(6), "opset 6"),
    "opset-999": (lambda: _with_opset(999), "opset 999"),
    "opset-just-too-new": (lambda: _with_opset(onnx.defs.onnx_opset_version() + 1),
                           f"opset {onnx.defs.onnx_opset_version() + 1}"),
    "ir-version-99": (lambda: _with_ir_version(99), "IR version 99"),
    "ir-version-just-too-new": (lambda: _with_ir_version(onnx.IR_VERSION + 1),
                                f"IR version {onnx.IR_VERSION + 1}"),
    "ir-version-2": (lambda: _with_ir_version(2), "IR version 2"),
    "no-opset-import": (_without_opsets, "no opset import"),
    "only-a-custom-opset": (lambda: _without_opsets((("com.example", 1),)),
                            "no opset import"),
    "default-domain-twice": (_twice_default, "twice"),
    # placement is checked, never trusted (-1 is PopART's "unset", never a model's value)
    "ipu-number-negative": (lambda: _placed("__ipu_number", -1), "__ipu_number"),
    "ipu-number-text": (lambda: _placed("__ipu_number", "one"), "'one'"),
    "ipu-number-fraction": (lambda: _placed("__ipu_number", 1.5), "__ipu_number"),
    "ipu-number-list": (lambda: _placed("__ipu_number", [0, 1]), "__ipu_number"),
    "ipu-number-beyond-any-machine": (lambda: _placed("__ipu_number", 10**6), "1,024 IPUs"),
    "pipeline-stage-negative": (lambda: _placed("__pipeline_stage", -3), "__pipeline_stage"),
    "pipeline-stage-text": (lambda: _placed("__pipeline_stage", "first"), "'matmul'"),
    # an initializer is its input's default value (ONNX's IR): they must agree
    "input-and-initializer-shapes-differ": (
        lambda: _input_named_like_the_weight(TensorProto.FLOAT, [16, 9]), "[16, 9]"),
    "input-and-initializer-types-differ": (
        lambda: _input_named_like_the_weight(TensorProto.INT32, [16, 8]), "int32"),
    "input-and-initializer-ranks-differ": (
        lambda: _input_named_like_the_weight(TensorProto.FLOAT, [128]), "[128]"),
    # a declared shape or type that contradicts the rules' is refused, not taken on trust
    "declared-shape-contradicts-rule": (
        lambda: _declared("xw", TensorProto.FLOAT, [4, 17]), "(4, 17)"),
    "declared-output-shape-contradicts-rule": (
        lambda: _declared("output", TensorProto.FLOAT, [4, 15]), "(4, 15)"),
    "declared-output-type-contradicts-rule": (
        lambda: _declared("output", TensorProto.INT64, [4, 16]), "int64"),
    # a model's words reach the terminal escaped
    "escape-in-an-op-type": (lambda: _with_node_type("Re\x1b[2J\x1b[31mlu"),
                             "Re\\x1b[2J\\x1b[31mlu"),
    "bidi-override-in-an-op-type": (lambda: _with_node_type("Foo\u202eoof"),
                                    "Foo\\u202eoof"),
    "nul-in-an-external-data-location": (lambda: _with_external_weight("w\0.bin"),
                                         "NUL byte"),
    "external-data-is-a-fifo": (lambda: _with_external_weight("fifo"), "FIFO"),
    "external-data-is-missing": (lambda: _with_external_weight("nothing.bin"), "missing"),
}


def _write_model(name: str) -> Callable[[Path], Path]:
    def write(root: Path) -> Path:
        path = root / f"{name}.onnx"
        path.write_bytes(BAD_MODELS[name][0]().SerializeToString())
        return path
    return write


def _raw(name: str, data: bytes) -> Callable[[Path], Path]:
    def write(root: Path) -> Path:
        path = root / name
        path.write_bytes(data)
        return path
    return write


def _named(file_name: str, case: str) -> Callable[[Path], Path]:
    """Bad model ``case`` saved under ``file_name``."""
    def write(root: Path) -> Path:
        path = root / file_name
        path.write_bytes(BAD_MODELS[case][0]().SerializeToString())
        return path
    return write


def _truncated(root: Path) -> Path:
    path = root / "truncated.onnx"
    data = linear_layer_model().SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    return path


#: name -> (a function making the MODEL path in the test's folder, a word of its error)
BAD_MODEL_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    **{name: (_write_model(name), word) for name, (_, word) in BAD_MODELS.items()},
    "empty-file": (_raw("empty.onnx", b""), "empty.onnx"),
    "garbage": (_raw("garbage.onnx", b"\x08\x07 not a protobuf \xff\xff\xff"),
                "garbage.onnx"),
    "json-named-onnx": (_raw("plan.onnx", b'{"version": 1}\n'), "plan.onnx"),
    "truncated": (_truncated, "truncated.onnx"),
    "folder": (lambda root: root / "folder.onnx", "is a folder"),
    "fifo": (lambda root: root / "fifo", "FIFO"),
    "symlink-loop": (lambda root: root / "loop", "symbolic link loop"),
    "dangling-symlink": (lambda root: root / "dangling", "symbolic link to a missing file"),
    "missing": (lambda root: root / "missing.onnx", "no such file"),
    "character-device": (lambda root: Path("/dev/null"), "character device"),
    "through-a-file": (lambda root: root / "file.txt" / "model.onnx", "not a folder"),
    "name-too-long": (lambda root: root / ("m" * 300 + ".onnx"), "too long"),
    "escape-in-the-file-name": (_named("Re\x1b[31mlu.onnx", "misspelled-op"),
                                "Re\\x1b[31mlu.onnx"),
}


def make_world(root: Path) -> None:
    """The test's folder: a good model (with a symbolic and a hard link to it), an empty
    output folder, a foreign folder, an earlier report, one spoiled by a user's file, a
    FIFO, a symbolic link loop, a dangling link, a plain file and a folder named .onnx."""
    model_folder = root / "model"
    model_folder.mkdir()
    model = model_folder / "linear.onnx"
    onnx.save(linear_layer_model(), str(model))
    os.symlink(model, root / "link.onnx")
    os.link(model, root / "hard.onnx")
    (root / "out").mkdir()
    (root / "notes").mkdir()
    (root / "notes" / "notes.txt").write_text("keep me")
    for name, extra in (("old_report", ()), ("spoiled_report", ("notes.txt",))):
        folder = root / name
        folder.mkdir()
        (folder / "index.html").write_text("an earlier report")
        (folder / REPORT_MARKER).write_text(f"{MARKER_HEADER}\nindex.html\n")
        for file in extra:
            (folder / file).write_text("a user's file")
    os.mkfifo(root / "fifo")
    os.symlink("loop", root / "loop")
    os.symlink("nothing-here", root / "dangling")
    (root / "file.txt").write_text("a plain file")
    (root / "folder.onnx").mkdir()
    (root / "existing.json").write_text("an earlier plan")
    (root / "factories.py").write_text("import sys\n\n\ndef exits():\n    sys.exit(0)\n"
                                       "\n\ndef fails():\n    raise RuntimeError('broken')\n")
    (root / "exits_on_import.py").write_text("raise SystemExit(3)\n")
    os.link(root / "existing.json", root / "existing-hard.json")


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (hidden ones included, links not followed) with its kind
    and, for files, a hash of the content."""
    entries: dict[str, str] = {}
    for folder, names, files in os.walk(root):
        for name in names + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                entries[key] = f"link -> {os.readlink(path)}"
            elif path.is_fifo():
                entries[key] = "fifo"
            elif path.is_dir():
                entries[key] = "folder"
            else:
                entries[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


