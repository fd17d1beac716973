"""Convolution layers recovered from a PyTorch training step: which convolutions are passes
of a forward convolution's cube, checked element for element against im2col computed on
index arrays (each pass's operands, as ids of the tensors they view, are the cube's
tensors in the pass's orientation)."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_conv_layout import im2col_reads  # noqa: E402

from popart_unwind import transforms  # noqa: E402
from popart_unwind.ir import Ir  # noqa: E402
from popart_unwind.layers import ConvolutionLayer, convolution_layers  # noqa: E402
from popart_unwind.layers.operand_views import view_of  # noqa: E402
from popart_unwind.machine.interface import pass_dims  # noqa: E402
from popart_unwind.ops import REGISTRY  # noqa: E402
from popart_unwind.ops.conv import ConvGeometry  # noqa: E402


class Convolutions(torch.nn.Module):
    """A patch embedding (kernel = stride, its input without a gradient), a pointwise
    convolution, a grouped 3x3 one, a strided 3x3 one and a strided pointwise one (whose
    weight gradient reads the field without its unread tail)."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 8, 4, stride=4)
        self.point = torch.nn.Conv2d(8, 12, 1, bias=False)
        self.grouped = torch.nn.Conv2d(12, 12, 3, padding=1, groups=3)
        self.strided = torch.nn.Conv2d(12, 6, 3, stride=2, padding=1)
        self.down = torch.nn.Conv2d(6, 4, 1, stride=2)

    def forward(self, x):
        return self.down(self.strided(self.grouped(self.point(self.patch(x)))))


class Siblings(torch.nn.Module):
    """Two pointwise convolutions of one shape reading one input."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(4, 6, 1)
        self.left = torch.nn.Conv2d(6, 6, 1)
        self.right = torch.nn.Conv2d(6, 6, 1)

    def forward(self, x):
        y = self.stem(x)
        return self.left(y) * self.right(y)


def training_ir(module: torch.nn.Module, shape: tuple[int, ...]) -> Ir:
    torch.manual_seed(0)
    ir = Ir.from_torch(module, (torch.randn(*shape),), training=True)
    transforms.run_pipeline(ir)
    return ir


@pytest.fixture(scope="module")
def convolutions() -> Ir:
    return training_ir(Convolutions(), (2, 3, 16, 16))


def forward_convs(ir: Ir, count: int) -> list:
    """The first ``count`` Convs of the schedule: the forward pass comes first."""
    return [op for op in ir.main_graph.schedule() if op.type.name == "Conv"][:count]


def passes_of(layer: ConvolutionLayer) -> list[tuple[str, str]]:
    return [(op.type.name, layer.axes_of(op)) for op in layer.ops()]


def test_each_convolution_gets_the_passes_of_its_cube(convolutions):
    patch, point, grouped, strided, down = forward_convs(convolutions, 5)
    layers = {layer.fwd.id: layer for layer in convolution_layers(convolutions)}
    assert passes_of(layers[patch.id]) == [("Conv", "mkn"), ("Conv", "kmn")]
    assert passes_of(layers[point.id]) == [("Conv", "mkn"), ("ConvTranspose", "mnk"),
                                          ("Conv", "kmn")]
    # a 3x3 or strided data gradient reads a flipped or dilated field: a cube of its own
    for conv in (grouped, strided, down):
        assert passes_of(layers[conv.id]) == [("Conv", "mkn"), ("Conv", "kmn")]
    assert layers[down.id].wu.input(0).producer.type.name == "Slice"
    assert set(layers) == {patch.id, point.id, grouped.id, strided.id, down.id}
    assert layers[patch.id].producerless == {"lhs", "rhs"}  # the input and the weights
    assert layers[point.id].producerless == {"rhs"}
    assert layers[patch.id].data_elements == 2 * 3 * 16 * 16
    for layer in layers.values():
        assert not layer.poplibs_joint
        for op in layer.ops():
            geometry = REGISTRY.layout_rule(op).geometry(op)
            assert geometry.dims == pass_dims(layer.cube, layer.axes_of(op))


# -- element for element: im2col of index arrays ------------------------------------------
def ids(tensor) -> np.ndarray:
    """Each element of ``tensor`` as the id of the element of the base tensor it views
    (through a Slice from position 0 with step 1, as a weight gradient crops its data)."""
    crop = tensor.producer
    if crop is not None and crop.type.name == "Slice":
        return ids(crop.input(0))[tuple(slice(0, size) for size in tensor.shape)]
    view = view_of(tensor, REGISTRY)
    base = np.arange(prod(view.base.shape)).reshape(view.base.shape)
    return view.chain.apply(base)


def im2col(geometry: ConvGeometry, data: np.ndarray) -> np.ndarray:
    """[G, M, K]: the data element each im2col position reads, -1 for padding."""
    groups, rows, inner, _ = geometry.dims
    lhs = np.full((groups, rows, inner), -1)
    flat = data.reshape(-1)
    for (g, m, k), element in im2col_reads(geometry).items():
        lhs[g, m, k] = flat[element]
    return lhs


def rhs(op, weights: np.ndarray) -> np.ndarray:
    """[G, K, N]: the weight element at each position of the op's im2col RHS."""
    rule = REGISTRY.layout_rule(op)
    geometry = rule.geometry(op)
    groups, _, inner, cols = geometry.dims
    out = np.empty(groups * inner * cols, dtype=weights.dtype)
    out[rule.rhs_index(geometry)] = weights.reshape(-1)
    return out.reshape(groups, inner, cols)


def output_order(geometry: ConvGeometry, y: np.ndarray) -> np.ndarray:
    """[G, M, N] of a tensor shaped as the convolution's output."""
    groups, rows, _, cols = geometry.dims
    return y.reshape(geometry.batch, groups, cols, -1).transpose(1, 0, 3, 2).reshape(
        groups, rows, cols)


def test_every_pass_reads_the_cube_element_for_element(convolutions):
    layers = convolution_layers(convolutions)
    assert len(layers) == 5
    for layer in layers:
        fwd = REGISTRY.layout_rule(layer.fwd).geometry(layer.fwd)
        lhs = im2col(fwd, ids(layer.fwd.input(0)))
        weights = rhs(layer.fwd, ids(layer.fwd.input(1)))
        if layer.wu is not None:
            wu = REGISTRY.layout_rule(layer.wu).geometry(layer.wu)
            assert np.array_equal(im2col(wu, ids(layer.wu.input(0))), lhs.transpose(0, 2, 1))
            gradient = rhs(layer.wu, ids(layer.wu.input(1)))  # the output gradient, [G, M, N]
        if layer.bwd is not None:
            bwd = REGISTRY.layout_rule(layer.bwd).geometry(layer.bwd)
            assert np.array_equal(rhs(layer.bwd, ids(layer.bwd.input(1))),
                                  weights.transpose(0, 2, 1))
            read = im2col(bwd, ids(layer.bwd.input(0)))
            assert np.array_equal(read, output_order(fwd, ids(layer.bwd.input(0))))
            assert np.array_equal(read, gradient)  # one output gradient for both


def test_sibling_convolutions_each_pair_with_their_own_gradients():
    ir = training_ir(Siblings(), (2, 4, 3, 3))
    stem, left, right = forward_convs(ir, 3)
    layers = {layer.fwd.id: layer for layer in convolution_layers(ir)}
    assert set(layers) == {stem.id, left.id, right.id}
    assert passes_of(layers[stem.id]) == [("Conv", "mkn"), ("Conv", "kmn")]  # x: no gradient
    for layer in (layers[left.id], layers[right.id]):
        assert [layer.axes_of(op) for op in layer.ops()] == ["mkn", "mnk", "kmn"]
        # the data gradient reads the weights of its own forward convolution ...
        assert view_of(layer.bwd.input(1), REGISTRY).base is \
            view_of(layer.fwd.input(1), REGISTRY).base
        # ... and the weight gradient the output gradient the data gradient reads
        gradient = view_of(layer.bwd.input(0), REGISTRY).base
        assert view_of(layer.wu.input(1), REGISTRY).base is gradient
    assert len({layer.wu.id for layer in layers.values()}) == 3


def test_an_inference_graph_has_no_convolution_layer():
    torch.manual_seed(0)
    ir = Ir.from_torch(Convolutions().eval(), (torch.randn(2, 3, 16, 16),))
    transforms.run_pipeline(ir)
    assert convolution_layers(ir) == []


def crop_step(kept: int) -> Ir:
    """A pointwise convolution over a field of 4 and a would-be weight gradient whose data
    keeps the field's first ``kept`` positions (upper padding makes up its windows)."""
    from popart_unwind.frontends.builder import Builder

    b = Builder()
    x = b.add_input_tensor("float32", (1, 1, 4), "x")
    w = b.add_initialized_input_tensor(np.ones((1, 1, 1), np.float32), "w")
    dy = b.add_input_tensor("float32", (1, 1, 4), "dy")
    b.add_output_tensor(b.op("Conv", [x, w], {"kernel_shape": [1]}, debug_name="fwd"))
    cropped = b.op("Slice", [x, np.array([0]), np.array([kept]),
                             np.array([2])])
    b.add_output_tensor(b.op("Conv", [cropped, dy], {"kernel_shape": [4],
                                                     "pads": [0, 4 - kept]}, debug_name="wu"))
    ir = b.ir()
    transforms.run_pipeline(ir)
    return ir


def test_a_crop_that_drops_a_position_the_forward_reads_is_no_weight_gradient():
    """Kept 4 of 4, the data is x itself: the weight gradient is the cube's pass. Kept 3,
    the would-be gradient reads zeros where the forward convolution reads x[3]."""
    [layer] = convolution_layers(crop_step(4))
    assert [op.name for op in layer.ops()] == ["fwd", "wu"]
    assert convolution_layers(crop_step(3)) == []


def test_every_convolution_of_the_tiny_resnet_training_step_is_in_a_layer():
    """The PyTorch ResNet's training step: each forward convolution has its weight
    gradient as the cube's weight-update pass (strided ones through a cropped field), the
    pointwise stride-1 ones their data gradient too; our plan shares some layers' cubes,
    PopART's shares none (Poplibs plans convolution passes alone)."""
    pytest.importorskip("transformers")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    import make_models

    from popart_unwind.layers import choose_plans
    from popart_unwind.machine import IpuModel, TileTarget

    module, example = make_models.tiny_model("resnet")
    ir = Ir.from_torch(module, example, training=True)
    transforms.run_pipeline(ir)
    layers = convolution_layers(ir)
    in_layers = {op.id for layer in layers for op in layer.ops()}
    convs = [op for op in ir.main_graph.ops if op.type.name == "Conv"]
    forward = {layer.fwd.id for layer in layers}
    weight_updates = {layer.wu.id for layer in layers if layer.wu is not None}
    assert len(forward) == len(weight_updates) == len(convs) // 2  # every one paired
    assert {op.id for op in convs} <= in_layers
    assert any(layer.bwd is not None for layer in layers)
    target = TileTarget(IpuModel(tiles_per_ipu=256))
    ours = choose_plans(ir, target, REGISTRY, "with_layouts")
    assert any(plan.joint for plan in ours.values())
    popart = choose_plans(ir, target, REGISTRY, "poplibs")
    assert not any(key[1] in in_layers for key in popart)
