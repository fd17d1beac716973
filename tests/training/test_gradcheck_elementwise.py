"""The elementwise family's gradient rules against central differences (inputs kept away
from kinks, ties and the edges of each map's domain)."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_gradients, ir_gradients

from popart_unwind.ir import Builder
from popart_unwind.ir.op import GRAPHCORE_DOMAIN
from popart_unwind.ops import REGISTRY
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import build_backward

RNG = np.random.default_rng(11)


def away_from(values: np.ndarray, points: list[float], gap: float = 0.1) -> np.ndarray:
    """``values`` moved at least ``gap`` away from each of ``points`` (a map's kinks)."""
    values = np.array(values, dtype=np.float64)
    for point in points:
        near = np.abs(values - point) < gap
        values[near] = point + np.where(values[near] >= point, gap, -gap)
    return values


def normal(shape, points=(0.0,)) -> np.ndarray:
    return away_from(RNG.standard_normal(shape), list(points))


def unary(name: str, **attributes):
    return lambda b, ids: b.op(name, [ids["x"]], attributes)


# name, attributes, the input (a function of the shape)
UNARY = [
    ("Relu", {}, normal),
    ("Tanh", {}, normal),
    ("Sigmoid", {}, normal),
    ("Erf", {}, normal),
    ("Sqrt", {}, lambda s: RNG.uniform(0.5, 2.0, s)),
    ("Exp", {}, normal),
    ("Log", {}, lambda s: RNG.uniform(0.5, 2.0, s)),
    ("Abs", {}, normal),
    ("Reciprocal", {}, lambda s: RNG.uniform(0.5, 2.0, s) * RNG.choice([-1, 1], s)),
    ("Softplus", {}, normal),
    ("Softsign", {}, normal),
    ("Sin", {}, normal),
    ("Cos", {}, normal),
    ("Neg", {}, normal),
    ("LeakyRelu", {}, normal),
    ("LeakyRelu", {"alpha": 0.3}, normal),
    ("Elu", {}, normal),
    ("Elu", {"alpha": 0.5}, normal),
    ("Selu", {}, normal),
    ("Selu", {"alpha": 1.2, "gamma": 0.8}, normal),
    ("HardSigmoid", {}, lambda s: normal(s, (-2.5, 2.5)) * 2),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.3}, lambda s: normal(s, (-0.6, 1.4))),
]


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
@pytest.mark.parametrize(("name", "attributes", "make"), UNARY,
                         ids=[f"{n}{a or ''}" for n, a, _ in UNARY])
def test_unary(name, attributes, make, shape):
    check_gradients(unary(name, **attributes), {"x": make(shape)})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_onnx_gelu(approximate):
    check_gradients(lambda b, ids: b.op("Gelu", [ids["x"]], {"approximate": approximate},
                                        version=20), {"x": normal((3, 4)) * 2})


@pytest.mark.parametrize(("name", "domain"), [("Gelu", GRAPHCORE_DOMAIN),
                                               ("GeluErf", GRAPHCORE_DOMAIN),
                                               ("Gelu", "com.microsoft")])
def test_domain_gelu(name, domain):
    check_gradients(lambda b, ids: b.op(name, [ids["x"]], domain=domain),
                    {"x": normal((2, 5)) * 2})


def test_graphcore_scale_and_nop():
    def forward(b, ids):
        scaled = b.op("Scale", [ids["x"]], {"scale": 2.5}, domain=GRAPHCORE_DOMAIN)
        return b.op("Nop", [scaled], domain=GRAPHCORE_DOMAIN)

    check_gradients(forward, {"x": normal((3, 2))})


@pytest.mark.parametrize("name", ["Floor", "Ceil", "Round", "Sign"])
def test_steps_pass_no_gradient(name):
    """A step function's partial is 0: the weight's only path to the loss carries none,
    while a second path still carries its own."""
    x = normal((4,)) + 0.25  # away from the steps of Floor, Ceil and Round too
    x = away_from(x, [-1.5, -1, -0.5, 0.5, 1, 1.5, 2, 2.5])

    def forward(b, ids):
        return b.ai_onnx.add([b.op(name, [ids["x"]]), b.ai_onnx.mul([ids["x"], ids["x"]])])

    check_gradients(forward, {"x": x})
    b = Builder()
    weight = b.add_initialized_input_tensor(x, "x")
    loss = b.ai_onnx.reducesum([b.op(name, [weight])], keepdims=0)
    graph = b.ir().main_graph
    assert build_backward(graph, graph.tensor(loss), Rewriter(REGISTRY)) == {}


def test_graphcore_detach_stops_the_gradient():
    def forward(b, ids):
        held = b.op("Detach", [ids["x"]], domain=GRAPHCORE_DOMAIN)
        return b.ai_onnx.mul([held, ids["x"]])

    x = normal((3,))
    got = ir_gradients(forward, {"x": x})
    np.testing.assert_allclose(got["x"], x * mix(3))


SHAPE_PAIRS = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 5)), ((), (2, 2)),
               ((2, 1, 3), (4, 1))]


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPE_PAIRS)
def test_pow_both_operands(a_shape, b_shape):
    check_gradients(lambda b, ids: b.ai_onnx.pow([ids["a"], ids["b"]]),
                    {"a": RNG.uniform(0.5, 2.0, a_shape), "b": RNG.uniform(-2, 2, b_shape)})


@pytest.mark.parametrize("exponent", [np.array(3.0), np.array([2.0, 0.5, -1.0]),
                                      np.array(2, dtype=np.int64)])
def test_pow_constant_exponent(exponent):
    """Only the base gets a gradient; a negative base is fine for an integral exponent."""
    base = RNG.uniform(0.5, 2.0, (2, 3))
    if exponent.dtype.kind == "i" or np.all(exponent == np.round(exponent)):
        base = base * RNG.choice([-1, 1], base.shape)
    check_gradients(lambda b, ids: b.ai_onnx.pow([ids["a"], ids["e"]]), {"a": base},
                    {"e": exponent})


@pytest.mark.parametrize(("name", "a_shape", "b_shape"),
                         [(n, *pair) for n in ("Add", "Sub", "Mul", "Div") for pair in
                          SHAPE_PAIRS[:3]])
def test_arithmetic_with_a_constant(name, a_shape, b_shape):
    """A constant operand gets no gradient; the other still does."""
    check_gradients(lambda b, ids: b.op(name, [ids["a"], ids["k"]]),
                    {"a": normal(a_shape)}, {"k": RNG.uniform(0.5, 2, b_shape)})


@pytest.mark.parametrize("name", ["Max", "Min", "Mean", "Sum"])
@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3), (2, 3)], [(2, 3), (3,), (2, 1)],
                                    [(4, 1, 2), (3, 1), ()]])
def test_variadic(name, shapes):
    """Max and Min: values drawn apart, so no two operands tie for an element."""
    count = sum(int(np.prod(s)) for s in shapes)
    values = RNG.permutation(count) * 0.5 + RNG.uniform(0, 0.1, count)
    weights, begin = {}, 0
    for k, shape in enumerate(shapes):
        size = int(np.prod(shape))
        weights[f"x{k}"] = values[begin:begin + size].reshape(shape)
        begin += size
    check_gradients(lambda b, ids: b.op(name, [ids[f"x{k}"] for k in range(len(shapes))]),
                    weights)


def test_max_with_a_constant():
    x = normal((3, 4))
    check_gradients(lambda b, ids: b.ai_onnx.max([ids["x"], ids["k"]]), {"x": x},
                    {"k": np.array(0.0)})


def mix(shape) -> np.ndarray:
    """The weighting of the output gradcheck's loss applies (its seed 0)."""
    return np.random.default_rng(0).standard_normal(shape)


def test_cast_to_the_same_type():
    check_gradients(lambda b, ids: b.ai_onnx.mul([b.ai_onnx.cast([ids["x"]], to=11), ids["x"]]),
                    {"x": normal((3, 2))})


def test_cast_through_float32():
    """float64 -> float32 -> float64: the gradient is cast down and back (central
    differences would only see float32's rounding steps, so the oracle is the product
    rule on the rounded value)."""
    def forward(b, ids):
        narrowed = b.ai_onnx.cast([ids["x"]], to=1)
        return b.ai_onnx.mul([b.ai_onnx.cast([narrowed], to=11), ids["x"]])

    x = normal((3, 2))
    got = ir_gradients(forward, {"x": x})["x"]
    rounded = x.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(got, mix(x.shape) * (rounded + x), rtol=1e-6)
    assert not np.allclose(got, 2 * mix(x.shape) * x, rtol=1e-12, atol=0)  # rounding seen


def test_cast_to_an_integer_carries_no_gradient():
    def forward(b, ids):
        rounded = b.ai_onnx.cast([b.ai_onnx.cast([ids["x"]], to=7)], to=11)
        return b.ai_onnx.add([rounded, b.ai_onnx.sin([ids["x"]])])

    check_gradients(forward, {"x": normal((4,)) * 3 + 0.5})


def test_cast_like():
    def forward(b, ids):
        return b.ai_onnx.mul([b.ai_onnx.cast_like([ids["x"], ids["t"]]), ids["x"]])

    check_gradients(forward, {"x": normal((2, 3))}, {"t": np.zeros((), np.float64)})


@pytest.mark.parametrize(("c_shape", "x_shape", "y_shape"),
                         [((2, 3), (2, 3), (2, 3)), ((2, 3), (3,), (2, 1)),
                          ((3,), (2, 3), ()), ((4, 1, 3), (2, 1), (1, 3))])
def test_where(c_shape, x_shape, y_shape):
    condition = RNG.random(c_shape) > 0.5
    check_gradients(lambda b, ids: b.ai_onnx.where([ids["c"], ids["x"], ids["y"]]),
                    {"x": normal(x_shape), "y": normal(y_shape)}, {"c": condition})


@pytest.mark.parametrize(("low", "high"), [(-0.5, 0.7), (None, 0.3), (-0.2, None),
                                           (None, None)])
def test_clip_constant_bounds(low, high):
    x = away_from(RNG.standard_normal((3, 4)), [v for v in (low, high) if v is not None])
    inputs = [None if v is None else np.array(v) for v in (low, high)]
    while inputs and inputs[-1] is None:
        inputs.pop()
    check_gradients(lambda b, ids: b.ai_onnx.clip([ids["x"], *inputs]), {"x": x})


def test_clip_trained_bounds():
    x = away_from(RNG.standard_normal((3, 4)), [-0.5, 0.6])
    check_gradients(lambda b, ids: b.ai_onnx.clip([ids["x"], ids["lo"], ids["hi"]]),
                    {"x": x, "lo": np.array(-0.5), "hi": np.array(0.6)})


def test_clip_attribute_bounds():
    """Clip before opset 11 takes its bounds as attributes."""
    x = away_from(RNG.standard_normal((5,)), [-0.4, 0.4])
    check_gradients(lambda b, ids: b.op("Clip", [ids["x"]], {"min": -0.4, "max": 0.4},
                                        version=6), {"x": x})


@pytest.mark.parametrize(("x_shape", "slope_shape"),
                         [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 3, 4), (3, 1)), ((4,), ())])
def test_prelu(x_shape, slope_shape):
    check_gradients(lambda b, ids: b.ai_onnx.prelu([ids["x"], ids["slope"]]),
                    {"x": normal(x_shape), "slope": RNG.uniform(0.05, 0.5, slope_shape)})
