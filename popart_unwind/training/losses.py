"""The loss of a training step, as PopART's Builder adds one to an ONNX model.

- ``nll`` — PopART's ``nllloss`` over a softmax of the model's first output: the last axis
  holds the classes, every other axis is a sample; a labels input (int32, the output's
  shape without its last axis) is added to the graph, named ``labels`` (suffixed if the
  model has one). Built as ``LogSoftmax`` then the picked log-probability
  (``GatherElements``), averaged over the samples and negated (PopART's default reduction,
  mean); PopART's NllLoss reads the softmax's probabilities and takes their log, which is
  the same value.
- ``l1`` — PopART's ``l1loss`` of the first output with λ = 1: the sum of its absolute
  values (PopART's default reduction, sum).
- any other name — a tensor of the model that is already a loss: floating point, one
  element.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ModelImportError
from popart_unwind.ir import Graph, Tensor
from popart_unwind.ops.gradient import DIFFERENTIABLE_DTYPES, int64s, one
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import RewriterGradientBuilder

__all__ = ["BUILT_LOSSES", "LABELS", "add_loss"]

#: The losses built from the model's first output.
BUILT_LOSSES = ("nll", "l1")
#: The name of the labels input ``nll`` adds.
LABELS = "labels"


def add_loss(graph: Graph, rewriter: Rewriter, loss: str) -> Tensor:
    """The loss tensor ``loss`` names (module docstring), built when it is ``nll`` or
    ``l1``. ModelImportError names what does not fit."""
    if loss not in BUILT_LOSSES:
        return _named_loss(graph, loss)
    if not graph.outputs:
        raise ModelImportError(f"--loss {loss} is taken over the model's first output, and "
                               f"the model has no output")
    out = graph.outputs[0]
    if out.dtype not in DIFFERENTIABLE_DTYPES or out.shape is None:
        raise ModelImportError(f"--loss {loss} needs a floating-point first output of known "
                               f"shape; {out.id!r} is {out.dtype} {out.shape}")
    builder = RewriterGradientBuilder(graph, rewriter, out.producer)
    if loss == "l1":
        return one(builder, "ReduceSum", [one(builder, "Abs", [out])], {"keepdims": 0})
    return _nll(graph, rewriter, builder, out)


def _nll(graph: Graph, rewriter: Rewriter, builder: RewriterGradientBuilder,
         out: Tensor) -> Tensor:
    if len(out.shape) < 2:
        raise ModelImportError(f"--loss nll reads the first output's last axis as classes and "
                               f"the others as samples; {out.id!r} has shape {out.shape}")
    classes = out.shape[-1]
    samples = int(np.prod(out.shape[:-1]))
    labels = rewriter.add_graph_input(graph, graph.unique_id(LABELS), "int32", out.shape[:-1])
    logits = one(builder, "Reshape", [out, int64s(builder, (samples, classes))])
    log_probs = one(builder, "LogSoftmax", [logits], {"axis": -1})
    picks = one(builder, "Reshape", [labels, int64s(builder, (samples, 1))])
    picked = one(builder, "GatherElements", [log_probs, picks], {"axis": 1})
    mean = one(builder, "ReduceMean", [picked], {"keepdims": 0})
    return one(builder, "Neg", [mean])


def _named_loss(graph: Graph, name: str) -> Tensor:
    if not graph.has_tensor(name):
        raise ModelImportError(f"--loss {name!r}: no such tensor in the model; give nll, l1 or "
                               f"the name of a scalar tensor the model computes")
    tensor = graph.tensor(name)
    if tensor.dtype not in DIFFERENTIABLE_DTYPES or tensor.shape is None or \
            int(np.prod(tensor.shape)) != 1:
        raise ModelImportError(f"--loss {name!r}: a loss must be a floating-point tensor of "
                               f"one element; it is {tensor.dtype} of shape {tensor.shape}")
    return tensor
