"""Op family: PopART's connectionist temporal classification ops, Ctc (its Builder's
``ctcloss``) and CtcBeamSearchDecoder, with PopART's shapes and types.

Ctc reads log-probabilities ``[T, N, C]`` (T the longest input, N the batch, C the classes
with the ``blank`` among them), uint32 targets ``[N, S]`` and uint32 input and target
lengths ``[N]``; it gives the loss (a scalar with a "Sum" or "Mean" ``reduction``, ``[N]``
with "None") and the loss's gradient with respect to the log-probabilities ``[T, N, C]``,
which its grad op reads. Both are of ``outDataType`` (an ONNX element type; 0, the default,
the log-probabilities' type). CtcBeamSearchDecoder reads log-probabilities ``[T, N, C]`` and
uint32 data lengths ``[N]`` and gives, for each of the ``top_paths`` best paths, its
probability ``[N, top_paths]``, its length and its labels (uint32 ``[N, top_paths]`` and
``[N, top_paths, T]``).

Shape rules only: the values (Poplibs' CTC loss and beam search, with their reductions) are
not restated, so neither folds; neither has a gradient rule here (the decoder has none in
PopART either), so Autodiff refuses a loss that reaches one, naming it. Layouts are not
modelled: both are barriers.
"""

from __future__ import annotations

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ops.common import input_shape
from popart_unwind.ops.registry import HIGH_OUTLINE_VALUE, InferredOutputs, OpDef, register

_FLOATS = ("float16", "float32")


def _log_probs(op: Op) -> tuple[int, int, int]:
    shape = input_shape(op, 0)
    if len(shape) != 3 or op.input(0).dtype not in _FLOATS:
        raise ShapeError(f"op {op.debug_name()}: log-probabilities must be a float16 or "
                         f"float32 [T, N, C] tensor, got {shape} ({op.input(0).dtype})")
    return shape[0], shape[1], shape[2]


def _uint32(op: Op, index: int, shape: tuple[int, ...], what: str) -> None:
    if input_shape(op, index) != shape or op.input(index).dtype != "uint32":
        raise ShapeError(f"op {op.debug_name()}: {what} must be uint32 of shape {shape}, got "
                         f"{input_shape(op, index)} ({op.input(index).dtype})")


def _infer_ctc(op: Op) -> InferredOutputs:
    steps, batch, classes = _log_probs(op)
    targets = input_shape(op, 1)
    if len(targets) != 2 or targets[0] != batch:
        raise ShapeError(f"op {op.debug_name()}: targets must be [N, S] with N = {batch}, got "
                         f"{targets}")
    _uint32(op, 1, targets, "the targets")
    _uint32(op, 2, (batch,), "the input lengths")
    _uint32(op, 3, (batch,), "the target lengths")
    reduction = op.attributes.get("reduction", "Mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("Sum", "Mean", "None"):
        raise ShapeError(f"op {op.debug_name()}: reduction {reduction!r} is not Sum, Mean or "
                         f"None")
    code = int(op.attributes.get("outDataType", 0))
    dtype = op.input(0).dtype if code == 0 else DTYPE_OF_ONNX.get(code)
    if dtype not in _FLOATS:
        raise ShapeError(f"op {op.debug_name()}: outDataType {code} is not float16 or float32")
    loss = () if reduction != "None" else (batch,)
    return [(dtype, loss), (dtype, (steps, batch, classes))]


def _infer_beam_search(op: Op) -> InferredOutputs:
    steps, batch, _ = _log_probs(op)
    _uint32(op, 1, (batch,), "the data lengths")
    paths = int(op.attributes.get("top_paths", 1))
    if paths < 1:
        raise ShapeError(f"op {op.debug_name()}: top_paths {paths} must be at least 1")
    return [(op.input(0).dtype, (batch, paths)), ("uint32", (batch, paths)),
            ("uint32", (batch, paths, steps))]


register(OpDef("Ctc", domain=GRAPHCORE_DOMAIN, infer=_infer_ctc, reduces_input=True))
register(OpDef("CtcBeamSearchDecoder", domain=GRAPHCORE_DOMAIN, infer=_infer_beam_search,
               outline_value=HIGH_OUTLINE_VALUE))
