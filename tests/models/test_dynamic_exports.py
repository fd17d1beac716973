"""Tiny transformers exported with dynamic axes, as users export them, import and plan once
their symbolic dimensions are given: the shape computations the exporters write are folded
at import (docs/ir.md, *The ONNX front end*)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

sys.path.insert(0, str(Path(__file__).parent))
import make_models
from popart_unwind.transforms import plan_ir, run_pipeline

from popart_unwind.errors import DynamicShapeError
from popart_unwind.ir import Ir
from popart_unwind.target import IpuModel, TileTarget

BATCH, SEQUENCE = 2, 16
IMAGE = (3, 32, 32)  # the tiny ViT's channels and side

#: (model, exporter): the exports users make of each, one per exporter where both are common.
EXPORTS = [("bert", "torchscript"), ("bert", "dynamo"), ("gpt2", "dynamo"),
           ("llama", "dynamo"), ("t5", "torchscript"), ("vit", "torchscript"), ("vit", "dynamo")]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each export made once for the module, on first use."""
    folder, made = tmp_path_factory.mktemp("dynamic"), {}

    def export(name: str, exporter: str) -> Path:
        if (name, exporter) not in made:
            path = folder / f"{name}-{exporter}.onnx"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    make_models.export_with_dynamic_axes(name, path,
                                                         dynamo=exporter == "dynamo")
                except Exception as error:  # the exporter's own limits, not ours
                    pytest.skip(f"torch cannot export {name} ({exporter}): "
                                f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")
            made[name, exporter] = path
        return made[name, exporter]

    return export


def _plan(ir: Ir) -> None:
    run_pipeline(ir)
    plan = plan_ir(ir, TileTarget(IpuModel(tiles_per_ipu=16)))
    assert plan.tensors


@pytest.mark.parametrize("name, exporter", EXPORTS)
def test_a_dynamic_export_plans_with_its_dims_named(exported, name, exporter):
    path = exported(name, exporter)
    dims = {make_models.BATCH: BATCH}
    if name != "vit":
        dims[make_models.SEQUENCE] = SEQUENCE
    ir = Ir.from_onnx(path, dims=dims)
    graph = ir.main_graph
    assert all(t.shape is not None for op in graph.ops for t in op.outputs)
    [logits] = [graph.tensor(name) for name in graph.output_ids]
    assert logits.shape[0] == BATCH
    _plan(ir)
    assert not any(op.type.name == "Shape" for op in graph.ops)  # folded before planning


def test_input_shapes_plan_the_same_graph_as_dims(exported):
    path = exported("bert", "torchscript")
    by_dims = Ir.from_onnx(path, dims={"batch": BATCH, "sequence": SEQUENCE})
    by_shapes = Ir.from_onnx(path, input_shapes={name: (BATCH, SEQUENCE)
                                                 for name in make_models.input_names("bert")})
    shapes = [{t.id: t.shape for t in ir.main_graph.tensors} for ir in (by_dims, by_shapes)]
    assert shapes[0] == shapes[1]
    assert by_dims.main_graph.tensor(by_dims.main_graph.output_ids[0]).shape == (
        BATCH, SEQUENCE, make_models.make_config("bert").vocab_size)
    _plan(by_shapes)


def test_a_dim_left_symbolic_is_refused_naming_it(exported):
    with pytest.raises(DynamicShapeError, match=r"'input_ids'.*\['sequence'\].*--dim sequence="):
        Ir.from_onnx(exported("bert", "torchscript"), dims={"batch": BATCH})
