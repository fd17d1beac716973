"""The gradient rules of the reductions and normalisations against central differences."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients, loss_and_gradients
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

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


def _batch_norm_weights(shape, statistics_trained=False):
    channels = shape[1]
    weights = {"x": RNG.standard_normal(shape) * 2 + 1, "scale": RNG.standard_normal(channels),
               "b": RNG.standard_normal(channels)}
    statistics = {"mean": RNG.standard_normal(channels), "var": RNG.uniform(0.5, 2.0, channels)}
    return (weights | statistics, {}) if statistics_trained else (weights, statistics)


def _training_batch_norm(b, ids, version=18, momentum=0.8):
    inputs = [ids["x"], ids["scale"], ids["b"], ids["mean"], ids["var"]]
    attributes = {"epsilon": 1e-3, "momentum": momentum, "training_mode": 1}
    if version == 18:
        return b.ai_onnx.batchnormalization(inputs, num_outputs=3, **attributes)
    return b.op("BatchNormalization", inputs, attributes, num_outputs=3, version=version)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4), (2, 2, 3, 2), (3, 1, 2, 2, 2)])
@pytest.mark.parametrize("version", [14, 15, 18])
def test_batch_norm_training(shape, version):
    """The gradient flows to X through the batch's statistics; the running statistics
    are outputs the loss does not read."""
    weights, statistics = _batch_norm_weights(shape)
    check_gradients(lambda b, ids: _training_batch_norm(b, ids, version)[0], weights,
                    statistics)


@pytest.mark.parametrize("shape", [(4, 3), (2, 2, 3, 2)])
def test_batch_norm_training_with_a_loss_reading_the_running_statistics(shape):
    """A loss reading the running statistics too: they pass a gradient to the input
    statistics and, through the batch's, to X."""
    weights, _ = _batch_norm_weights(shape, statistics_trained=True)
    column = np.array([1, shape[1]] + [1] * (len(shape) - 2), dtype=np.int64)

    def forward(b, ids):
        y, mean, var = _training_batch_norm(b, ids)
        spread = [b.ai_onnx.reshape([t, b.add_constant(column)]) for t in (mean, var)]
        scaled = b.ai_onnx.mul([spread[1], b.add_constant(np.array(3.0))])
        return b.ai_onnx.add([b.ai_onnx.add([y, spread[0]]), scaled])

    check_gradients(forward, weights)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=2, max_size=4), st.integers(0, 2**16))
def test_batch_norm_training_gradient_sums_to_zero_per_channel(shape, seed):
    """Y does not move when a channel of X is shifted by a constant (the batch's mean
    moves with it), so each channel's gradient sums to zero."""
    shape[0] = max(shape[0], 2)
    weights, statistics = _batch_norm_weights(tuple(shape))
    grads = loss_and_gradients(lambda b, ids: _training_batch_norm(b, ids)[0], weights,
                               statistics, seed=seed)[1]
    axes = (0, *range(2, len(shape)))
    np.testing.assert_allclose(grads["x"].sum(axis=axes), 0.0, atol=1e-9)


def test_batch_norm_training_before_opset_14_is_refused_naming_the_op():
    """Opset 9's training form has five outputs whose saved statistics ONNX leaves open."""
    weights, statistics = _batch_norm_weights((2, 3))
    with pytest.raises(IrError, match=r"BatchNormalization\): no gradient rule for training "
                                      r"mode before opset 14"):
        check_gradients(lambda b, ids: b.op(
            "BatchNormalization", [ids[k] for k in ("x", "scale", "b", "mean", "var")], {},
            num_outputs=5, version=9)[0], weights, statistics)


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


def _reduce_prod(axes, keepdims):
    def forward(b, ids):
        inputs = [ids["x"]] + ([b.add_constant(np.array(axes, dtype=np.int64))]
                               if axes is not None else [])
        return b.ai_onnx.reduceprod(inputs, keepdims=keepdims)
    return forward


@pytest.mark.parametrize(("shape", "axes"), [
    ((5,), None), ((3, 4), [1]), ((3, 4), [0]), ((2, 3, 4), [0, 2]), ((2, 3, 4), [-2]),
    ((2, 3, 4), None), ((2, 1, 3), [1]), ((4, 9), [1]),
])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("zeros", [0, 1, 2])
def test_reduce_prod(shape, axes, keepdims, zeros):
    """With zeros in the input too: one zero in a group leaves that element a gradient
    (the product of the others), two leave none; a product is linear in each element, so
    central differences are exact there."""
    x = RNG.uniform(0.5, 1.5, shape) * RNG.choice([-1, 1], shape)
    flat = x.reshape(-1)
    flat[RNG.choice(flat.size, size=min(zeros, flat.size), replace=False)] = 0.0
    check_gradients(_reduce_prod(axes, keepdims), {"x": x})


def test_reduce_prod_zeros_in_one_group():
    """Row 0 has one zero (its gradient there is the product of the rest), row 1 two (no
    gradient), row 2 none."""
    x = np.array([[2.0, 0.0, 3.0, -1.0], [0.0, 5.0, 0.0, 2.0], [1.0, 2.0, -3.0, 0.5]])
    got = loss_and_gradients(_reduce_prod([1], 0), {"x": x}, seed=4)[1]["x"]
    mix = np.random.default_rng(4).standard_normal(3)
    want = np.array([[0, -6, 0, 0], [0, 0, 0, 0], [-3, -1.5, 1, -6]]) * mix[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 4)),
              elements=st.sampled_from([0.0, 0.5, -1.0, 1.5, 2.0, -0.25])),
       st.sets(st.integers(0, 2), min_size=1), st.integers(0, 2**16))
def test_reduce_prod_gradient_keeps_eulers_law(x, axes, seed):
    """A product of K elements is homogeneous of degree K in them, so Σ X·dX is K times
    the loss, zeros or not."""
    loss, grads = loss_and_gradients(_reduce_prod(sorted(axes), 1), {"x": x}, seed=seed)
    count = int(np.prod([x.shape[a] for a in axes]))
    np.testing.assert_allclose(np.sum(x * grads["x"]), count * loss, rtol=1e-9, atol=1e-9)
