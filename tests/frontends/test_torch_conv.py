"""ATen's convolution backward and max pooling ops in the PyTorch front end, checked against
torch's values.

``convolution_backward`` becomes a ConvTranspose (the data gradient), a Conv over the
transposed input and gradient (the weight gradient) and a ReduceSum (the bias gradient),
each only when ``output_mask`` asks for it; ``max_pool2d_with_indices`` becomes MaxPool
(with its Indices output, taken modulo the plane, when the indices are read) and its
backward a ScatterElements adding into zeros. Each case imports a module, computes the
graph's outputs with every op's own numpy fold (the IR's reference semantics) and compares
them with what torch's own ATen op computes on the same random inputs.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from fold_oracle import fold_all  # noqa: E402

from popart_unwind.ir import Ir  # noqa: E402
from popart_unwind.ops.coverage import ops_without_rule  # noqa: E402
from popart_unwind.ops.shape_inference import check_shapes  # noqa: E402

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _run(module: torch.nn.Module, inputs: tuple, exact: bool = False) -> Ir:
    """Import ``module``, check the graph and compare its folded outputs with torch's."""
    ir = Ir.from_torch(module, inputs)
    ir.verify()
    check_shapes(ir)
    assert not any(op.type.domain == "aten" for op in ir.main_graph.ops), _names(ir)
    feeds = {t.id: x.numpy() for t, x in zip(ir.main_graph.inputs, inputs, strict=True)}
    values = fold_all(ir, feeds)
    expected = module(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(values) == len(expected)
    for value, reference in zip(values, expected, strict=True):
        assert value.shape == tuple(reference.shape)
        assert value.dtype == reference.numpy().dtype
        if exact:
            np.testing.assert_array_equal(value, reference.numpy())
        else:  # float sums in another order
            np.testing.assert_allclose(value, reference.numpy(), rtol=1e-4, atol=1e-4)
    return ir


def _names(ir: Ir) -> collections.Counter:
    return collections.Counter(op.type.name for op in ir.main_graph.ops)


# -- convolution_backward -----------------------------------------------------------------
class ConvolutionBackward(torch.nn.Module):
    def __init__(self, stride, padding, dilation, groups, mask) -> None:
        super().__init__()
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.groups, self.mask = groups, mask

    def forward(self, grad_out, x, weight):
        results = torch.ops.aten.convolution_backward.default(
            grad_out, x, weight, [weight.shape[0]], self.stride, self.padding, self.dilation,
            False, [0] * len(self.stride), self.groups, self.mask)
        return tuple(r for r, wanted in zip(results, self.mask, strict=True) if wanted)


@st.composite
def convolutions(draw):
    """A forward convolution's geometry (1-d or 2-d), with a field that fits its window."""
    rank = draw(st.integers(1, 2))
    groups = draw(st.integers(1, 3))
    per_group, cols = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    stride = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilation = [draw(st.integers(1, 2)) for _ in range(rank)]
    padding = [draw(st.integers(0, 2)) for _ in range(rank)]
    field = []
    for k, d, p in zip(kernel, dilation, padding, strict=True):
        window = (k - 1) * d + 1
        field.append(draw(st.integers(max(1, window - 2 * p), window - 2 * p + 7)))
    batch = draw(st.integers(1, 2))
    mask = draw(st.lists(st.booleans(), min_size=3, max_size=3).filter(any))
    return dict(batch=batch, channels=groups * per_group, out_channels=groups * cols,
                field=field, kernel=kernel, stride=stride, padding=padding,
                dilation=dilation, groups=groups, mask=mask)


def _backward_case(geometry: dict, seed: int):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(geometry["batch"], geometry["channels"], *geometry["field"],
                    generator=generator)
    weight = torch.randn(geometry["out_channels"], geometry["channels"] // geometry["groups"],
                         *geometry["kernel"], generator=generator)
    convolve = torch.nn.functional.conv1d if len(geometry["field"]) == 1 else \
        torch.nn.functional.conv2d
    y = convolve(x, weight, None, geometry["stride"], geometry["padding"],
                 geometry["dilation"], geometry["groups"])
    grad_out = torch.randn(y.shape, generator=generator)
    module = ConvolutionBackward(geometry["stride"], geometry["padding"],
                                 geometry["dilation"], geometry["groups"], geometry["mask"])
    return module, (grad_out, x, weight)


@SETTINGS
@given(convolutions(), st.integers(0, 2**16))
def test_convolution_backward_gives_torchs_gradients(geometry, seed):
    ir = _run(*_backward_case(geometry, seed))
    names = _names(ir)
    grad_input, grad_weight, grad_bias = geometry["mask"]
    assert names["ConvTranspose"] == int(grad_input)
    assert names["Conv"] == int(grad_weight)
    assert names["ReduceSum"] == int(grad_bias)
    assert set(names) <= {"ConvTranspose", "Conv", "ReduceSum", "Reshape", "Transpose",
                          "Slice"}


@pytest.mark.parametrize("padding, crops", [([0, 1], 1), ([1, 1], 0)])
def test_a_weight_gradient_computes_exactly_the_kernel_positions(padding, crops):
    """A stride that leaves the field's tail unread: the weight-delta convolution's upper
    pad is cut so that its windows end with the last kernel position's, and where no pad
    at all is still too many (here the first axis without padding), the data's unread
    tail is sliced off before it; its output is the kernel's positions, no more."""
    geometry = dict(batch=2, channels=2, out_channels=3, field=[10, 7], kernel=[2, 3],
                    stride=[3, 2], padding=padding, dilation=[1, 1], groups=1,
                    mask=[True, True, False])
    ir = _run(*_backward_case(geometry, 5))
    assert _names(ir)["Slice"] == crops
    [delta] = [op for op in ir.main_graph.ops if op.type.name == "Conv"]
    assert list(delta.output(0).shape[2:]) == geometry["kernel"]
    if crops:
        assert delta.input(0).producer.type.name == "Slice"
    assert ops_without_rule(ir) == {}


def test_a_transposed_convolutions_backward_stays_opaque():
    class Transposed(torch.nn.Module):
        def forward(self, grad_out, x, weight):
            return torch.ops.aten.convolution_backward.default(
                grad_out, x, weight, None, [2], [0], [1], True, [0], 1,
                [True, True, False])[:2]

    x, weight = torch.randn(1, 2, 5), torch.randn(2, 3, 3)
    grad_out = torch.randn(torch.nn.functional.conv_transpose1d(x, weight, stride=2).shape)
    ir = Ir.from_torch(Transposed(), (grad_out, x, weight))
    assert ops_without_rule(ir) == {"aten::convolution_backward": 1}


# -- max pooling --------------------------------------------------------------------------
class MaxPoolAndBackward(torch.nn.Module):
    """The pool's values and torch's indices, and the backward through those indices."""

    def __init__(self, kernel, stride, padding, dilation, ceil_mode) -> None:
        super().__init__()
        self.arguments = (kernel, stride, padding, dilation, ceil_mode)

    def forward(self, grad_out, x):
        values, indices = torch.ops.aten.max_pool2d_with_indices.default(x, *self.arguments)
        grad = torch.ops.aten.max_pool2d_with_indices_backward.default(
            grad_out, x, *self.arguments, indices)
        return values, indices, grad


class MaxPoolValues(torch.nn.Module):
    def __init__(self, kernel, stride) -> None:
        super().__init__()
        self.kernel, self.stride = kernel, stride

    def forward(self, x):
        return torch.ops.aten.max_pool2d_with_indices.default(x, self.kernel, self.stride)[0]


@st.composite
def pools(draw):
    kernel = [draw(st.integers(1, 3)) for _ in range(2)]
    stride = draw(st.one_of(st.just([]), st.lists(st.integers(1, 3), min_size=2,
                                                    max_size=2)))
    padding = [draw(st.integers(0, k // 2)) for k in kernel]
    dilation = [draw(st.integers(1, 2)) for _ in range(2)]
    field = [draw(st.integers((k - 1) * d + 1, (k - 1) * d + 7))
             for k, d in zip(kernel, dilation, strict=True)]
    return dict(kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                field=field, ceil_mode=draw(st.booleans()),
                batch=draw(st.integers(1, 2)), channels=draw(st.integers(1, 3)))


def _floor_count(geometry: dict) -> list[int]:
    stride = geometry["stride"] or geometry["kernel"]
    return [(f + 2 * p - (k - 1) * d - 1) // s + 1 for f, k, s, p, d in zip(
        geometry["field"], geometry["kernel"], stride, geometry["padding"],
        geometry["dilation"], strict=True)]


@SETTINGS
@given(pools(), st.integers(0, 2**16))
def test_max_pool_with_indices_and_its_backward_give_torchs_values(geometry, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(geometry["batch"], geometry["channels"], *geometry["field"],
                    generator=generator)
    module = MaxPoolAndBackward(geometry["kernel"], geometry["stride"], geometry["padding"],
                                geometry["dilation"], geometry["ceil_mode"])
    values, _ = torch.ops.aten.max_pool2d_with_indices.default(
        x, *module.arguments)
    if tuple(values.shape[2:]) != tuple(_floor_count(geometry)):
        # ceil mode kept a last window ONNX would count differently: the pool is declined,
        # its backward (where the indices point, whatever the geometry) is not
        ir = Ir.from_torch(module, (torch.randn(values.shape), x))
        assert ops_without_rule(ir)["aten::max_pool2d_with_indices"] == 1
        assert _names(ir)["ScatterElements"] == 1
        return
    grad_out = torch.randn(values.shape, generator=generator)
    ir = _run(module, (grad_out, x), exact=False)
    assert _names(ir)["MaxPool"] == 1 and _names(ir)["ScatterElements"] == 1
    [pool] = [op for op in ir.main_graph.ops if op.type.name == "MaxPool"]
    assert pool.has_output(1)  # the indices are read


def test_indices_torch_does_not_read_are_not_asked_of_max_pool():
    x = torch.randn(2, 3, 8, 6)
    ir = _run(MaxPoolValues([3, 2], [2, 2]), (x,), exact=True)
    [pool] = [op for op in ir.main_graph.ops if op.type.name == "MaxPool"]
    assert not pool.has_output(1) and _names(ir) == {"MaxPool": 1}


def test_max_pool_indices_are_exact_integers():
    """Indices are integers: torch's and ours agree exactly, not within a tolerance."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 2, 7, 9, generator=generator)
    module = MaxPoolAndBackward([3, 3], [2, 2], [1, 1], [1, 1], False)
    values, indices, _ = module(torch.zeros(2, 2, 4, 5), x)
    ir = Ir.from_torch(module, (torch.zeros(values.shape), x))
    feeds = {t.id: v.numpy() for t, v in zip(ir.main_graph.inputs,
                                             (torch.zeros(values.shape), x), strict=True)}
    ours = fold_all(ir, feeds)
    np.testing.assert_array_equal(ours[0], values.numpy())
    np.testing.assert_array_equal(ours[1], indices.numpy())


def test_ceil_mode_that_changes_nothing_is_imported():
    x = torch.randn(1, 2, 9, 9)
    module = MaxPoolAndBackward([3, 3], [2, 2], [0, 0], [1, 1], True)
    values, _, _ = module(torch.zeros(1, 2, 4, 4), x)
    assert tuple(values.shape) == (1, 2, 4, 4)  # the last window fits whole
    _run(module, (torch.randn(values.shape), x))
