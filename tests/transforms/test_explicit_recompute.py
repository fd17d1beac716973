"""ExplicitRecompute: forward ops cloned into the backward pass of a training step.

The oracle of values is every op's own numpy fold: a step with recomputation computes
exactly what it computed without. The structure is held to PopART's rules: originals stay,
the backward reads only clones of what was marked, clones chain through clones, and every
clone runs after the loss.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from popart_unwind.transforms import run_pipeline
from popart_unwind.transforms.explicit_recompute import decreasing_intervals, marked_ops
from popart_unwind.transforms.registry import pipeline_names

from popart_unwind.errors import OptionError, TransformWarning
from popart_unwind.ir import Ir
from popart_unwind.ir.serialize import ir_from_json, ir_to_json
from popart_unwind.layers import fully_connected_layers
from popart_unwind.ops import REGISTRY
from popart_unwind.options import SessionOptions
from popart_unwind.training import loss_forward_ops

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "frontends"))
from fold_oracle import fold_all  # noqa: E402

MODES = ("standard", "norm_only", "recompute_all")


class Mlp(torch.nn.Module):
    """Two blocks of Linear, LayerNorm and GELU, then a Linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
            torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
            torch.nn.Linear(16, 4))

    def forward(self, x):
        return self.blocks(x)


_STEPS: dict[str, Ir] = {}


def _step(mode: str) -> Ir:
    """The MLP's training step after the pipeline, recomputed as ``mode`` says."""
    if mode not in _STEPS:
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1))
        ir = Ir.from_torch(Mlp(), (x,), training=True,
                           options=SessionOptions(enable_unwind_layouts=False,
                                                  check_transform_conditions=True))
        ir.options = dataclasses.replace(ir.options, recompute=mode)
        run_pipeline(ir)
        _STEPS[mode] = ir
    return _STEPS[mode]


def _values(ir: Ir) -> list[np.ndarray]:
    x = np.random.default_rng(2).standard_normal((6, 8)).astype(np.float32)
    return fold_all(ir, {ir.main_graph.inputs[-1].id: x})


def _clones(ir: Ir) -> list:
    return [op for op in ir.main_graph.ops if op.settings.recomputed_from >= 0]


@pytest.mark.parametrize("mode", MODES)
def test_a_recomputed_step_computes_exactly_what_it_did(mode):
    plain, recomputed = _step("none"), _step(mode)
    assert _clones(recomputed)
    assert [t.id for t in plain.main_graph.inputs] == [t.id for t in recomputed.main_graph.inputs]
    for before, after in zip(_values(plain), _values(recomputed), strict=True):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("mode", MODES)
def test_the_backward_reads_clones_and_clones_read_clones(mode):
    ir = _step(mode)
    graph = ir.main_graph
    forward = {op.id for op in loss_forward_ops(graph, graph.tensor(ir.final_loss_id))}
    clones = {op.settings.recomputed_from: op for op in _clones(ir)}
    for original_id, clone in clones.items():
        original = graph.op(original_id)
        assert original.id in forward and clone.id not in forward
        assert (clone.type, clone.attributes.keys()) == (original.type, original.attributes.keys())
        for tensor in original.outputs:  # the backward no longer reads the original
            assert all(reader.id in forward for reader in tensor.consumers)
        for index, tensor in clone.input_map().items():
            read = original.input(index)
            producer = read.producer
            if producer is not None and producer.id in clones:
                assert tensor.producer is clones[producer.id]
            else:
                assert tensor is read


@pytest.mark.parametrize("mode", MODES)
def test_every_clone_runs_after_the_loss(mode):
    ir = _step(mode)
    order = [op.id for op in ir.main_graph.schedule()]
    loss = order.index(ir.main_graph.tensor(ir.final_loss_id).producer.id)
    assert all(order.index(clone.id) > loss for clone in _clones(ir))


def test_each_mode_marks_what_popart_marks():
    ir = _step("none")
    graph = ir.main_graph
    forward = loss_forward_ops(graph, graph.tensor(ir.final_loss_id))
    norms = [op for op in marked_ops(forward, "norm_only", REGISTRY)]
    assert [op.type.name for op in norms] == ["LayerNormalization"] * 2
    assert marked_ops(forward, "recompute_all", REGISTRY) == forward
    standard = marked_ops(forward, "standard", REGISTRY)
    assert 0 < len(standard) < len(forward)
    assert {op.type.name for op in _clones(_step("norm_only"))} == {"LayerNormalization"}


def test_the_layers_are_recognised_through_recomputed_operands():
    def layers(ir):
        return [(layer.fwd.id, layer.bwd and layer.bwd.id, layer.wu and layer.wu.id)
                for layer in fully_connected_layers(ir)]

    plain = layers(_step("none"))
    assert len(plain) == 3
    assert layers(_step("recompute_all"))[:3] == plain
    assert layers(_step("norm_only")) == plain


@pytest.mark.parametrize("count,expected", [
    (1, [(0, 1)]), (4, [(0, 1), (1, 2), (2, 3), (3, 4)]),
    (8, [(0, 2), *((i, i + 1) for i in range(2, 8))]),
    (25, [(0, 4), (4, 7), (7, 9), (9, 10), *((i, i + 1) for i in range(10, 25))]),
    (200, [(0, 14), (14, 27), (27, 39), (39, 50), (50, 60), (60, 69), (69, 77), (77, 84),
           (84, 90), (90, 95), (95, 99), (99, 102), (102, 104), (104, 105),
           *((i, i + 1) for i in range(105, 200))]),
])
def test_decreasing_intervals_are_popart_s(count, expected):
    """PopART's code: k = floor(sqrt(2n)) - 1, then times 0.75 (the examples in its
    comments predate the factor)."""
    assert decreasing_intervals(count) == expected


@pytest.mark.parametrize("count", range(1, 200))
def test_decreasing_intervals_cut_the_range(count):
    intervals = decreasing_intervals(count)
    assert intervals[0][0] == 0 and intervals[-1][1] == count
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(intervals))


def test_the_pipeline_gains_the_transform_only_when_asked():
    assert "ExplicitRecompute" not in pipeline_names(SessionOptions())
    names = pipeline_names(SessionOptions(recompute="standard"))
    assert names.index("ExplicitRecompute") > names.index("MergeDuplicateOps")
    assert names[-1] == "UnwindLayouts"
    with pytest.raises(OptionError, match="recompute must be one of"):
        SessionOptions(recompute="some")


def test_a_graph_with_no_loss_is_left_alone_with_a_warning():
    ir = Ir.from_torch(Mlp(), (torch.randn(6, 8),),
                       options=SessionOptions(enable_unwind_layouts=False, recompute="standard"))
    before = ir_to_json(ir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_pipeline(ir, ["ExplicitRecompute"])
    assert ir_to_json(ir) == before
    assert any(issubclass(w.category, TransformWarning) for w in caught)


def test_clones_and_the_loss_survive_json():
    ir = _step("standard")
    again = ir_from_json(ir_to_json(ir, include_data=True))
    assert again.final_loss_id == ir.final_loss_id
    assert sorted((op.id, op.settings.recomputed_from) for op in _clones(again)) == \
        sorted((op.id, op.settings.recomputed_from) for op in _clones(ir))
    assert ir_to_json(again, include_data=True) == ir_to_json(ir, include_data=True)


def test_reruns_give_the_same_ir():
    first = ir_to_json(_step("standard"))
    _STEPS.pop("standard")
    assert ir_to_json(_step("standard")) == first


def test_the_loss_of_a_step_updating_buffers_comes_after_their_outputs():
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                 torch.nn.ReLU())
    ir = Ir.from_torch(module, (torch.randn(2, 3, 6, 6),), training=True)
    loss = ir.main_graph.tensor(ir.final_loss_id)
    # running mean, running variance and the batch counter come first
    assert ir.main_graph.output_ids.index(ir.final_loss_id) == 3
    assert loss.shape == ()
    forward = loss_forward_ops(ir.main_graph, loss)
    assert any(op.type.name == "Conv" for op in forward)
