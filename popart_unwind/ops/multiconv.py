"""Op family: PopART's ai.graphcore MultiConv — several independent convolutions in one op
(its Builder's ``multiconv``), which PopART lowers to Poplibs' ``multiconv`` so that they run
side by side.

Inputs come in threes, one per convolution: data ``[N, C, ...]``, weights and an optional
bias (an empty name); outputs one per convolution. The window attributes are the
convolutions' own, concatenated: ``strides`` and ``dilations`` one value per spatial axis of
each, ``pads`` a begin and an end per axis of each (ONNX's order); groups come from the
shapes (data channels over weight input channels). Input dilations and output padding,
which PopART's Builder also takes, are refused unless trivial.

Before planning Canonicalize rewrites the op into one ONNX Conv per convolution, each with
Conv's layout rule (``ops/conv.py``). That is an approximation of PopART: Poplibs plans a
multi-convolution jointly and runs its convolutions on shares of the tiles at once, while
here each is planned alone over the whole IPU and they run one after another, in both our
plan and PopART's baseline (docs/ipu-model.md states the single convolution's model). The
gradient rule is Conv's, applied to each convolution.
"""

from __future__ import annotations

from collections.abc import Sequence

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import DEFAULT_ONNX_OPSET, GRAPHCORE_DOMAIN, ONNX_DOMAIN, Op, OpType
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import input_shape, ints
from popart_unwind.ops.conv import conv_bias_gradient, conv_data_gradient, conv_weight_gradient
from popart_unwind.ops.gradient import GradientBuilder, is_differentiable
from popart_unwind.ops.registry import HIGH_OUTLINE_VALUE, InferredOutputs, OpDef, register
from popart_unwind.rewrite import Rewriter, pattern

#: One convolution's window: strides, pads (begins then ends), dilations, groups.
Window = tuple[list[int], list[int], list[int], int]


def _count(op: Op) -> int:
    count = len(op.outputs)
    if count < 1 or max(op.input_map(), default=-1) >= 3 * count:
        raise ShapeError(f"op {op.debug_name()}: {count} outputs need inputs in threes "
                         f"(data, weights, optional bias), one three per output")
    return count


def _flat(op: Op, name: str) -> list[int]:
    return ints(op.attributes.get(name, []))


def windows(op: Op) -> list[Window]:
    """Each convolution's window, read off the concatenated attributes (defaults: stride 1,
    no padding, dilation 1)."""
    count = _count(op)
    ranks = [len(input_shape(op, 3 * i)) - 2 for i in range(count)]
    for name in ("inDilations", "outPads"):
        trivial = 1 if name == "inDilations" else 0
        if any(v != trivial for v in _flat(op, name)):
            raise ShapeError(f"op {op.debug_name()}: {name} {_flat(op, name)} are not "
                             f"modelled")
    flat = {name: _flat(op, name) for name in ("strides", "pads", "dilations")}
    width = {"strides": 1, "pads": 2, "dilations": 1}
    for name, values in flat.items():
        if values and len(values) != width[name] * sum(ranks):
            raise ShapeError(f"op {op.debug_name()}: {name} has {len(values)} values, the "
                             f"convolutions' {sum(ranks)} spatial axes need "
                             f"{width[name] * sum(ranks)}")
    found, at = [], 0
    for i, n in enumerate(ranks):
        x, w = input_shape(op, 3 * i), input_shape(op, 3 * i + 1)
        if n < 1 or len(w) != n + 2 or w[1] < 1 or x[1] % w[1] or w[0] % (x[1] // w[1]):
            raise ShapeError(f"op {op.debug_name()}: convolution {i}: weights {w} do not fit "
                             f"data {x}")
        strides = flat["strides"][at:at + n] or [1] * n
        pads = flat["pads"][2 * at:2 * at + 2 * n] or [0] * (2 * n)
        dilations = flat["dilations"][at:at + n] or [1] * n
        found.append((strides, pads, dilations, x[1] // w[1]))
        at += n
    return found


def _infer_multiconv(op: Op) -> InferredOutputs:
    results = []
    for i, (strides, pads, dilations, _) in enumerate(windows(op)):
        x, w = input_shape(op, 3 * i), input_shape(op, 3 * i + 1)
        n = len(x) - 2
        if op.has_input(3 * i + 2) and input_shape(op, 3 * i + 2) != (w[0],):
            raise ShapeError(f"op {op.debug_name()}: convolution {i}: bias "
                             f"{input_shape(op, 3 * i + 2)} is not one per output channel")
        spatial = [(x[2 + a] + pads[a] + pads[a + n] - dilations[a] * (w[2 + a] - 1) - 1)
                   // strides[a] + 1 for a in range(n)]
        if min(spatial) < 1:
            raise ShapeError(f"op {op.debug_name()}: convolution {i} has no output position")
        results.append((op.input(3 * i).dtype, (x[0], w[0], *spatial)))
    return results


@pattern("MultiConv", name="split-multiconv")
def _split_multiconv(op: Op, rewriter: Rewriter) -> bool:
    """One ONNX Conv per convolution (module docstring: an approximation)."""
    if any(t.shape is None for t in op.inputs):
        return False
    outputs = []
    for i, (strides, pads, dilations, group) in enumerate(windows(op)):
        inputs = [op.input(3 * i), op.input(3 * i + 1)]
        if op.has_input(3 * i + 2):
            inputs.append(op.input(3 * i + 2))
        conv = rewriter.create_op(
            op.graph, OpType(ONNX_DOMAIN, "Conv", DEFAULT_ONNX_OPSET), inputs,
            {"strides": strides, "pads": pads, "dilations": dilations, "group": group},
            like=op)
        outputs.append(conv.output(0))
    rewriter.replace_op(op, outputs)
    return True


def _multiconv_gradient(builder: GradientBuilder, op: Op,
                        grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Each convolution's dX, dW and dB, as Conv's rule builds them (PopART's
    MultiConvDataGradOp and MultiConvWeightsGradOp compute the same, side by side)."""
    found: list[Tensor | None] = [None] * (max(op.input_map()) + 1)
    for i, (strides, pads, dilations, group) in enumerate(windows(op)):
        grad = grads[i] if i < len(grads) else None
        if grad is None:
            continue
        x, w = op.input(3 * i), op.input(3 * i + 1)
        n = len(x.shape) - 2
        if is_differentiable(x):
            found[3 * i] = conv_data_gradient(builder, grad, w, x.shape[2:], strides, pads,
                                              dilations, group)
        if is_differentiable(w):
            found[3 * i + 1] = conv_weight_gradient(builder, grad, x, w.shape, strides,
                                                    pads[:n], dilations, group)
        if op.has_input(3 * i + 2) and is_differentiable(op.input(3 * i + 2)):
            found[3 * i + 2] = conv_bias_gradient(builder, grad)
    return found


register(OpDef("MultiConv", domain=GRAPHCORE_DOMAIN, infer=_infer_multiconv,
               patterns=(_split_multiconv,), outline_value=HIGH_OUTLINE_VALUE,
               gradient=_multiconv_gradient))
