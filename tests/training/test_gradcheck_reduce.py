"""The gradient rules of the reductions and normalisations against central differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients

from popart_unwind.errors import IrError

RNG = np.random.default_rng(13)


def untied(shape):
    return RNG.permutation(np.arange(int(np.prod(shape)))).reshape(shape) * 0.1 - 1.0


@pytest.mark.parametrize("op", ["softmax", "logsoftmax"])
@pytest.mark.parametrize(("shape", "axis", "version"), [
    ((5,), -1, 18), ((3, 4), 0, 18), ((2, 3, 4), 1, 18), ((2, 3, 4), -1, 18),
    ((2, 3, 4), 1, 11),  # before opset 13: the axes from ``axis`` on, seen as one
])
def test_softmax(op, shape, axis, version):
    def forward(b, ids):
        if version == 18:
            return getattr(b.ai_onnx, op)([ids["x"]], axis=axis)
        name = {"softmax": "Softmax", "logsoftmax": "LogSoftmax"}[op]
        return b.op(name, [ids["x"]], {"axis": axis}, version=version)

    check_gradients(forward, {"x": RNG.standard_normal(shape)})


@pytest.mark.parametrize(("shape", "axis", "scale_shape"), [
    ((3, 4), -1, (4,)), ((2, 3, 4), 1, (3, 4)), ((2, 3, 4), -1, (1,)),
    ((2, 3, 4), 0, (2, 3, 4)), ((2, 3, 2, 2), 2, (1, 2)),
])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("statistics", [False, True])
def test_layer_norm(shape, axis, scale_shape, bias, statistics):
    weights = {"x": RNG.standard_normal(shape), "scale": RNG.standard_normal(scale_shape)}
    if bias:
        weights["b"] = RNG.standard_normal(scale_shape)

    def forward(b, ids):
        inputs = [ids["x"], ids["scale"]] + ([ids["b"]] if bias else [])
        outs = b.ai_onnx.layernormalization(inputs, num_outputs=3 if statistics else 1,
                                            axis=axis, epsilon=1e-3, stash_type=11)
        return outs[0] if statistics else outs

    check_gradients(forward, weights)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4), (2, 2, 3, 2)])
def test_batch_norm_inference(shape):
    channels = shape[1]
    check_gradients(
        lambda b, ids: b.ai_onnx.batchnormalization(
            [ids["x"], ids["scale"], ids["b"], ids["mean"], ids["var"]], epsilon=1e-3),
        {"x": RNG.standard_normal(shape), "scale": RNG.standard_normal(channels),
         "b": RNG.standard_normal(channels)},
        {"mean": RNG.standard_normal(channels), "var": RNG.uniform(0.5, 2.0, channels)})


def test_batch_norm_training_is_refused_naming_the_op():
    with pytest.raises(IrError, match=r"BatchNormalization.*training mode"):
        check_gradients(
            lambda b, ids: b.ai_onnx.batchnormalization(
                [ids["x"], ids["scale"], ids["b"], ids["mean"], ids["var"]],
                num_outputs=3, training_mode=1)[0],
            {"x": RNG.standard_normal((2, 3)), "scale": RNG.standard_normal(3),
             "b": RNG.standard_normal(3)},
            {"mean": np.zeros(3), "var": np.ones(3)})


REDUCTIONS = ["reducemax", "reducemin", "reducel2", "reducesumsquare", "reducelogsumexp",
              "reducel1"]


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize(("shape", "axes"), [
    ((5,), None), ((3, 4), [1]), ((2, 3, 4), [0, 2]), ((2, 3, 4), [-2]), ((2, 3, 4), None),
])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions(op, shape, axes, keepdims):
    def forward(b, ids):
        inputs = [ids["x"]] + ([b.add_constant(np.array(axes, dtype=np.int64))]
                               if axes is not None else [])
        return getattr(b.ai_onnx, op)(inputs, keepdims=keepdims)

    check_gradients(forward, {"x": untied(shape)})


def test_reduce_log_sum():
    check_gradients(lambda b, ids: b.ai_onnx.reducelogsum(
        [ids["x"], b.add_constant(np.array([1], dtype=np.int64))]),
        {"x": RNG.uniform(0.5, 2.0, (3, 4))})


@pytest.mark.parametrize("op", ["reducemax", "reducemin"])
def test_tied_extremes_share_the_gradient(op):
    """A subgradient: each of the tied elements gets an equal part, the parts summing to
    the result's gradient (central differences are undefined there)."""
    from gradcheck import ir_gradients

    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    if op == "reducemin":
        x = -x
    got = ir_gradients(lambda b, ids: getattr(b.ai_onnx, op)(
        [ids["x"], b.add_constant(np.array([1], dtype=np.int64))], keepdims=0),
        {"x": x}, seed=3)["x"]
    mix = np.random.default_rng(3).standard_normal(2)
    want = np.array([[0, 0.5, 0.5, 0], [0.25] * 4]) * mix[:, None]
    np.testing.assert_allclose(got, want)
