"""The gradient rules of the whole-tensor views (Reshape, Flatten, Squeeze, Unsqueeze,
Transpose, Identity, Expand) and of the part views (Slice, Split, Concat) against central
differences. Each view's result is multiplied by itself, so that a gradient put in the
wrong place shows."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

RNG = np.random.default_rng(5)


def squared(b, out: str) -> str:
    return b.ai_onnx.mul([out, b.ai_onnx.sin([out])])


@pytest.mark.parametrize(("shape", "target"), [((2, 3, 4), (6, 4)), ((2, 3, 4), (0, -1)),
                                                ((6,), (1, 2, 3)), ((), (1, 1))])
def test_reshape(shape, target):
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.reshape(
        [ids["x"], np.array(target, np.int64)])), {"x": RNG.standard_normal(shape)})


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis):
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.flatten([ids["x"]], axis=axis)),
                    {"x": RNG.standard_normal((2, 3, 2))})


@pytest.mark.parametrize("axes", [None, [1], [-1, 1]])
def test_squeeze(axes):
    def forward(b, ids):
        inputs = [ids["x"]] + ([] if axes is None else [np.array(axes, np.int64)])
        return squared(b, b.ai_onnx.squeeze(inputs))

    check_gradients(forward, {"x": RNG.standard_normal((3, 1, 2, 1))})


@pytest.mark.parametrize("axes", [[0], [1, -1], [0, 3]])
def test_unsqueeze(axes):
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.unsqueeze(
        [ids["x"], np.array(axes, np.int64)])), {"x": RNG.standard_normal((2, 3))})


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 2, 0]])
def test_transpose(perm):
    attributes = {} if perm is None else {"perm": perm}
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.transpose([ids["x"]], **attributes)),
                    {"x": RNG.standard_normal((2, 3, 4))})


def test_identity():
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.identity([ids["x"]])),
                    {"x": RNG.standard_normal((3, 2))})


@pytest.mark.parametrize(("shape", "target"), [((3, 1), (3, 4)), ((3,), (2, 3)),
                                                ((1, 3, 1), (2, 1, 1, 4)), ((2, 3), (1, 1)),
                                                ((), (2, 2))])
def test_expand(shape, target):
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.expand(
        [ids["x"], np.array(target, np.int64)])), {"x": RNG.standard_normal(shape)})


# starts, ends, axes, steps (None: absent) on an input of shape (5, 6, 4)
SLICES = [
    ([1], [4], None, None),
    ([1, 2], [4, 5], [0, 1], None),
    ([-3], [-1], [1], None),
    ([0, -100], [100, 3], [2, 0], None),  # clamped
    ([4, 5], [0, -100], [0, 1], [-1, -1]),  # reversed
    ([3], [1], [-1], [-1]),
    ([0, 1], [5, 6], [0, 1], [2, 3]),  # strided
    ([5, 3], [-100, 0], [1, 2], [-2, -1]),  # strided and reversed
    ([2], [2], [0], None),  # empty
    ([1, 0], [2, 4], [0, 2], [5, -1]),  # one element taken by a long step
]


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), SLICES)
def test_slice(starts, ends, axes, steps):
    def forward(b, ids):
        inputs = [ids["x"], np.array(starts, np.int64), np.array(ends, np.int64)]
        if axes is not None or steps is not None:
            inputs.append(np.array(axes if axes is not None else range(len(starts)),
                                   np.int64))
        if steps is not None:
            inputs.append(np.array(steps, np.int64))
        return b.ai_onnx.add([squared(b, b.ai_onnx.slice(inputs)), np.array(0.5)])

    check_gradients(forward, {"x": RNG.standard_normal((5, 6, 4))})


def test_slice_attributes_before_opset_10():
    check_gradients(lambda b, ids: squared(b, b.op(
        "Slice", [ids["x"]], {"starts": [1, -2], "ends": [3, 100], "axes": [0, 1]},
        version=9)), {"x": RNG.standard_normal((4, 5))})


@pytest.mark.parametrize(("axis", "split", "used"), [
    (0, [2, 3], [0, 1]), (1, [1, 2, 3], [0, 1, 2]), (-1, [4, 2], [1]),
    (1, [1, 2, 3], [0, 2]), (1, [0, 6], [0, 1]),
])
def test_split(axis, split, used):
    """Outputs the loss does not read get zeros."""
    def forward(b, ids):
        outs = b.ai_onnx.split([ids["x"], np.array(split, np.int64)], num_outputs=len(split),
                               axis=axis)
        parts = [b.ai_onnx.reducesum([squared(b, outs[k])], keepdims=0) for k in used]
        return b.ai_onnx.sum(parts)

    shape = [5, 6] if axis == 0 else [3, 6]
    check_gradients(forward, {"x": RNG.standard_normal(shape)})


@pytest.mark.parametrize(("axis", "shapes"), [
    (0, [(2, 3), (1, 3)]), (1, [(2, 1), (2, 3), (2, 2)]), (-1, [(2, 2, 3), (2, 2, 1)]),
    (0, [(3,)]), (1, [(2, 0), (2, 3)]),
])
def test_concat(axis, shapes):
    weights = {f"x{k}": RNG.standard_normal(s) for k, s in enumerate(shapes)}
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.concat(
        [ids[f"x{k}"] for k in range(len(shapes))], axis=axis)), weights)


def test_concat_with_a_constant():
    check_gradients(lambda b, ids: squared(b, b.ai_onnx.concat([ids["k"], ids["x"]], axis=0)),
                    {"x": RNG.standard_normal((2, 3))}, {"k": np.ones((1, 3))})
