"""Sliding windows: convolution, transposed convolution and pooling shapes agree with ONNX's
own shape inference on random geometries; bad geometries name the op."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as oh
from onnx_cases import (
    agrees_with_onnx,
    backend_cases,
    check_backend_case,
    folded,
    onnx_output_shapes,
    reference_outputs,
)
from onnx_node_cases import expected_types, import_every_way, node_cases, output_types
from op_building import build, shapes_of

from popart_unwind.errors import ShapeError
from popart_unwind.ops import REGISTRY
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=120, deadline=None)


def onnx_shapes(op_type, specs, attributes, outputs, version):
    """Output shapes by onnx.shape_inference (strict), or ShapeError if it refuses."""
    names = [f"x{i}" for i in range(len(specs))]
    outs = [f"y{i}" for i in range(outputs)]
    node = oh.make_node(op_type, names, outs, **attributes)
    inputs = [oh.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in zip(names, specs, strict=True)]
    graph = oh.make_graph([node], "g", inputs, [onnx.ValueInfoProto(name=o) for o in outs])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", version)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:
        return ShapeError
    found = {v.name: v for v in [*inferred.graph.output, *inferred.graph.value_info]}
    return [tuple(d.dim_value for d in found[o].type.tensor_type.shape.dim) for o in outs]


def ours(op_type, specs, attributes, outputs, version):
    try:
        return [shape for _, shape in shapes_of(op_type, specs, attributes, outputs, version)]
    except ShapeError:
        return ShapeError


@st.composite
def conv_case(draw):
    spatial = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2]))
    channels, maps = group * draw(st.integers(1, 2)), group * draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    sizes = [draw(st.integers(5, 9)) for _ in range(spatial)]  # the window always fits
    attributes = {"group": group, "strides": [draw(st.integers(1, 3)) for _ in kernel],
                  "dilations": [draw(st.integers(1, 2)) for _ in kernel]}
    auto_pad = draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad == "NOTSET":
        attributes["pads"] = [draw(st.integers(0, 2)) for _ in range(2 * spatial)]
    else:
        attributes["auto_pad"] = auto_pad
    if draw(st.booleans()):
        attributes["kernel_shape"] = kernel
    x = (2, channels, *sizes)
    w = (maps, channels // group, *kernel)
    return [x, w] + ([(maps,)] if draw(st.booleans()) else []), attributes


@SETTINGS
@given(conv_case())
def test_conv_shape_agrees_with_onnx_inference(case):
    specs, attributes = case
    assert ours("Conv", specs, attributes, 1, 18) == onnx_shapes("Conv", specs, attributes,
                                                                 1, 18)


@st.composite
def pool_case(draw):
    spatial = draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    attributes = {"kernel_shape": kernel, "strides": [draw(st.integers(1, 3)) for _ in kernel],
                  "ceil_mode": int(draw(st.booleans()))}
    if draw(st.booleans()):
        attributes["pads"] = [draw(st.integers(0, k - 1)) for k in kernel * 2]
    op_type = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    if op_type == "MaxPool" and draw(st.booleans()):
        attributes["dilations"] = [draw(st.integers(1, 2)) for _ in kernel]
    x = (1, 3, *(draw(st.integers(5, 9)) for _ in kernel))  # the window always fits
    return op_type, [x], attributes


@SETTINGS
@given(pool_case(), st.sampled_from([19, 22]))
def test_pool_shape_agrees_with_onnx_inference(case, version):
    op_type, specs, attributes = case
    assert ours(op_type, specs, attributes, 1, version) == onnx_shapes(
        op_type, specs, attributes, 1, version)


@SETTINGS
@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(0, 1),
       st.booleans())
def test_conv_transpose_agrees_with_onnx_inference(spatial, stride, kernel, pad, extra):
    x, w = (1, 2, *[4] * spatial), (2, 3, *[kernel] * spatial)
    attributes = {"strides": [stride] * spatial, "pads": [pad] * 2 * spatial}
    if extra and stride > 1:
        attributes["output_padding"] = [1] * spatial
    expected = onnx_shapes("ConvTranspose", [x, w], attributes, 1, 18)
    assert ours("ConvTranspose", [x, w], attributes, 1, 18) == expected


@pytest.mark.parametrize(("module", "name"), [
    ("averagepool", "test_averagepool_2d_ceil"),
    ("averagepool", "test_averagepool_2d_ceil_last_window_starts_on_pad"),
    ("averagepool", "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True"),
    ("maxpool", "test_maxpool_2d_ceil"),
    ("maxpool", "test_maxpool_2d_ceil_output_size_reduce_by_one"),
])
def test_ceil_mode_pools_give_the_shapes_of_onnx_node_tests(module, name):
    case = node_cases(module)[name]
    for ir in import_every_way(case.model):
        assert output_types(ir) == expected_types(case)


def test_ceil_mode_drops_a_last_window_that_would_start_in_the_end_padding_from_opset_22():
    # 2 elements, pads 1 and 1, windows of 3 every 3: the second window would start at
    # padded position 3, past the data (1 and 2) and in the end padding
    attributes = {"kernel_shape": [3], "strides": [3], "pads": [1, 1], "ceil_mode": 1}
    assert shapes_of("AveragePool", [(1, 1, 2)], attributes, version=22) == [
        ("float32", (1, 1, 1))]
    # a window starting on the last element stays, although it reaches past the padding
    attributes = {"kernel_shape": [3], "strides": [2], "ceil_mode": 1}
    assert shapes_of("MaxPool", [(1, 1, 5)], attributes, version=22) == [("float32", (1, 1, 2))]
    assert shapes_of("MaxPool", [(1, 1, 6)], attributes, version=22) == [("float32", (1, 1, 3))]
    # before opset 22, ONNX (its spec and its inference) counts the window in the padding
    attributes = {"kernel_shape": [1], "strides": [2], "ceil_mode": 1}
    assert shapes_of("MaxPool", [(1, 1, 2)], attributes, version=19) == [("float32", (1, 1, 2))]
    assert shapes_of("MaxPool", [(1, 1, 2)], attributes, version=22) == [("float32", (1, 1, 1))]


def test_max_pool_indices_are_int64_and_global_pool_keeps_rank():
    assert shapes_of("MaxPool", [(1, 2, 6, 6)], {"kernel_shape": [2, 2], "strides": [2, 2]},
                     outputs=2) == [("float32", (1, 2, 3, 3)), ("int64", (1, 2, 3, 3))]
    assert shapes_of("GlobalAveragePool", [(2, 5, 7, 3)]) == [("float32", (2, 5, 1, 1))]


def test_conv_with_mismatched_channels_or_oversized_window_names_the_op():
    with pytest.raises(ShapeError, match=r"Conv#0.*do not fit"):
        shapes_of("Conv", [(1, 3, 8, 8), (4, 2, 3, 3)])
    with pytest.raises(ShapeError, match="window 5 is larger"):
        shapes_of("Conv", [(1, 1, 3, 3), (1, 1, 3, 1)], {"dilations": [2, 1]})


# -- folds against torch ------------------------------------------------------------------
@st.composite
def window_case(draw):
    """A 1-d or 2-d geometry with symmetric explicit pads (torch's form), groups and bias."""
    spatial = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2]))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    strides = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilations = [draw(st.integers(1, 2)) for _ in range(spatial)]
    pads = [draw(st.integers(0, 1)) for _ in range(spatial)]
    sizes = [draw(st.integers((k - 1) * d + 1, (k - 1) * d + 5))
             for k, d in zip(kernel, dilations, strict=True)]
    return dict(spatial=spatial, group=group, kernel=kernel, strides=strides,
                dilations=dilations, pads=pads, sizes=sizes,
                channels=group * draw(st.integers(1, 2)), maps=group * draw(st.integers(1, 2)),
                bias=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


def _fold(op_type, arrays, attributes, outputs=1, version=18):
    op = build(op_type, [a.shape if a is not None else None for a in arrays], attributes,
               outputs, version)
    infer_op(op)
    return REGISTRY.lookup(op).fold(op, [None if a is None else np.asarray(a)
                                         for a in arrays])


@settings(max_examples=40, deadline=None)
@given(window_case())
def test_conv_and_conv_transpose_folds_agree_with_torch(case):
    torch = pytest.importorskip("torch")

    functional = torch.nn.functional
    generator = torch.Generator().manual_seed(case["seed"])
    x = torch.randn(2, case["channels"], *case["sizes"], generator=generator)
    w = torch.randn(case["maps"], case["channels"] // case["group"], *case["kernel"],
                    generator=generator)
    b = torch.randn(case["maps"], generator=generator) if case["bias"] else None
    attributes = {"group": case["group"], "strides": case["strides"],
                  "dilations": case["dilations"], "pads": case["pads"] * 2}
    conv = [functional.conv1d, functional.conv2d][case["spatial"] - 1]
    expected = conv(x, w, b, case["strides"], case["pads"], case["dilations"], case["group"])
    [y] = _fold("Conv", [x.numpy(), w.numpy(), None if b is None else b.numpy()], attributes)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-4)
    # the transpose of that convolution, from its output back to the input's channels
    extra = [0 if s == 1 else min(s, d) - 1 for s, d in zip(case["strides"], case["dilations"],
                                                          strict=True)]
    back_sizes = [s * (o - 1) + e + (k - 1) * d + 1 - 2 * p for s, o, e, k, d, p in zip(
        case["strides"], expected.shape[2:], extra, case["kernel"], case["dilations"],
        case["pads"], strict=True)]
    if min(back_sizes) < 1:  # the pads crop the whole transposed output
        return
    transpose = [functional.conv_transpose1d, functional.conv_transpose2d][case["spatial"] - 1]
    bias_t = torch.randn(w.shape[1] * case["group"], generator=generator) if case["bias"] \
        else None
    back = transpose(expected, w, bias_t, case["strides"], case["pads"], extra,
                     case["group"], case["dilations"])
    [y] = _fold("ConvTranspose", [expected.numpy(), w.numpy(),
                                  None if bias_t is None else bias_t.numpy()],
                {**attributes, "output_padding": extra})
    np.testing.assert_allclose(y, back.numpy(), rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(window_case())
def test_max_pool_fold_gives_torchs_values_and_flat_indices(case):
    torch = pytest.importorskip("torch")

    x = torch.randn(2, case["channels"], *case["sizes"],
                    generator=torch.Generator().manual_seed(case["seed"]))
    kernel, pads = case["kernel"], [min(p, k // 2) for p, k in zip(case["pads"],
                                                                 case["kernel"], strict=True)]
    pool = [torch.nn.functional.max_pool1d, torch.nn.functional.max_pool2d][case["spatial"] - 1]
    values, indices = pool(x, kernel, case["strides"], pads, case["dilations"],
                           return_indices=True)
    result = _fold("MaxPool", [x.numpy()], {"kernel_shape": kernel, "strides": case["strides"],
                                            "dilations": case["dilations"], "pads": pads * 2},
                   outputs=2)
    np.testing.assert_array_equal(result[0], values.numpy())
    plane = int(np.prod(case["sizes"]))  # ONNX counts over the whole tensor, torch per plane
    np.testing.assert_array_equal(result[1] % plane, indices.numpy())
    base = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1],
                                                      *[1] * case["spatial"]) * plane
    np.testing.assert_array_equal(result[1] - indices.numpy(), np.broadcast_to(
        base, indices.shape))


@settings(max_examples=60, deadline=None)
@given(window_case(), st.sampled_from(["MaxPool", "AveragePool"]))
def test_ceil_mode_pool_shapes_and_max_pool_fold_agree_with_torch_from_opset_22(case, op_type):
    torch = pytest.importorskip("torch")

    x = torch.randn(1, case["channels"], *case["sizes"],
                    generator=torch.Generator().manual_seed(case["seed"]))
    kernel, pads = case["kernel"], [min(p, k // 2) for p, k in zip(case["pads"],
                                                                 case["kernel"], strict=True)]
    attributes = {"kernel_shape": kernel, "strides": case["strides"], "pads": pads * 2,
                  "ceil_mode": 1}
    functional = torch.nn.functional
    if op_type == "AveragePool":
        pool = [functional.avg_pool1d, functional.avg_pool2d][case["spatial"] - 1]
        expected = pool(x, kernel, case["strides"], pads, ceil_mode=True)
        assert shapes_of(op_type, [tuple(x.shape)], attributes, version=22) == [
            ("float32", tuple(expected.shape))]
        return
    pool = [functional.max_pool1d, functional.max_pool2d][case["spatial"] - 1]
    expected = pool(x, kernel, case["strides"], pads, case["dilations"], ceil_mode=True)
    [values] = _fold("MaxPool", [x.numpy()], {**attributes, "dilations": case["dilations"]},
                     version=22)
    np.testing.assert_array_equal(values, expected.numpy())


# -- folds against ONNX's reference evaluator ---------------------------------------------
@pytest.mark.parametrize("window", [
    dict(kernel_shape=[3], strides=[2], pads=[1, 1]),
    dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 1, 0, 1]),
    dict(kernel_shape=[2, 2], strides=[1, 2], dilations=[2, 1], pads=[0, 1, 1, 0]),
    dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 1, 2], strides=[1, 1, 2], pads=[0, 0, 1, 1, 0, 0]),
])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_fold_agrees_with_onnx(window, count_include_pad):
    x = np.random.default_rng(3).standard_normal((2, 3, *[6, 5, 3][:len(
        window["kernel_shape"])])).astype(np.float32)
    agrees_with_onnx("AveragePool", [x], dict(window, count_include_pad=count_include_pad),
                     19)


@pytest.mark.parametrize("window", [
    dict(kernel_shape=[3], strides=[2]),
    dict(kernel_shape=[2, 3], strides=[2, 1]),
    dict(kernel_shape=[2, 2], strides=[1, 2], dilations=[2, 1]),
    dict(kernel_shape=[2, 1, 2], strides=[1, 1, 2]),
])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_fold_agrees_with_onnx_without_padding(window, p):
    # ONNX's reference LpPool averages over a window's data elements and multiplies by the
    # kernel's size, which is the sum only where no window overlaps padding
    x = np.random.default_rng(6).standard_normal((2, 3, *[6, 5, 3][:len(
        window["kernel_shape"])])).astype(np.float32)
    agrees_with_onnx("LpPool", [x], dict(window, p=p), 18)


def _lp_norms_by_windows(x, kernel, strides, dilations, pads, out_field, p):
    """Each window's p-norm of the data elements it covers, window by window."""
    n = len(kernel)
    y = np.zeros(x.shape[:2] + tuple(out_field))
    for o in np.ndindex(*out_field):
        total = np.zeros(x.shape[:2])
        for kk in np.ndindex(*kernel):
            at = [o[a] * strides[a] - pads[a] + kk[a] * dilations[a] for a in range(n)]
            if all(0 <= at[a] < x.shape[2 + a] for a in range(n)):
                total += np.abs(x[(slice(None), slice(None), *at)]) ** p
        y[(slice(None), slice(None), *o)] = total ** (1 / p)
    return y


@settings(max_examples=40, deadline=None)
@given(window_case(), st.integers(1, 3), st.booleans())
def test_lp_pool_fold_is_each_windows_p_norm(case, p, ceil_mode):
    """Padded and ceil-mode windows too, against the definition window by window; the
    shape is ONNX's inference's."""
    x = np.random.default_rng(case["seed"]).standard_normal(
        (2, case["channels"], *case["sizes"]))
    pads = [min(q, k // 2) for q, k in zip(case["pads"], case["kernel"], strict=True)]
    attributes = {"kernel_shape": case["kernel"], "strides": case["strides"],
                  "dilations": case["dilations"], "pads": pads * 2, "p": p,
                  "ceil_mode": int(ceil_mode)}
    [shape], [y] = folded("LpPool", [x], attributes, 18)
    assert [shape] == onnx_output_shapes("LpPool", [x.astype(np.float32)], attributes, 18)
    np.testing.assert_allclose(y, _lp_norms_by_windows(
        x, case["kernel"], case["strides"], case["dilations"], pads, shape[2:], p),
        rtol=1e-12, atol=1e-12)


#: ONNX's LpPool node tests whose values the fold gives (the others: an auto_pad, or too
#: many elements to fold); each one's shapes are checked
LP_POOL_FOLDED = {"test_lppool_1d_default", "test_lppool_2d_default", "test_lppool_2d_pads",
                  "test_lppool_2d_strides", "test_lppool_2d_dilations"}


def test_lp_pool_backend_node_tests_import_with_onnx_shapes_and_values():
    cases = backend_cases("LpPool")
    assert {case.name for case in cases} >= LP_POOL_FOLDED
    for case in cases:
        check_backend_case(case, fold=case.name in LP_POOL_FOLDED)


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 2, 3, 4), (2, 1, 2, 2, 3)])
def test_global_pool_folds_agree_with_onnx(op_type, shape):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    if op_type == "GlobalAveragePool" or len(shape) == 4:
        agrees_with_onnx(op_type, [x], {}, 18)
        return
    # ONNX's reference GlobalMaxPool reduces the wrong axes but for 4-D inputs: its
    # ReduceMax over the spatial axes is the oracle there
    [want] = reference_outputs("ReduceMax", [x, np.arange(2, len(shape))], {}, 18)
    [got_shape], [got] = folded(op_type, [x], {}, 18)
    assert got_shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("strides", [[1, 1], [2, 3]])
def test_conv_fold_resolves_auto_pad_as_onnx(auto_pad, strides):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 6, 7)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 3)).astype(np.float32)
    agrees_with_onnx("Conv", [x, w], {"auto_pad": auto_pad, "strides": strides}, 18)
