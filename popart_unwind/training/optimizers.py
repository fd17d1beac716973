"""Each weight's update and its optimizer's state, built in the IR as PopART's optimizers
build their VarUpdate ops.

A weight's new value, and each state's, is a graph output computed by an elementwise op
that reads the old value directly (``Sub(w, step)``, ``Add(m, change)``): the op families'
rules take such a result for the in-place update PopART makes (``updated_weight``), laid out
as the weight it overwrites. The states are Variables of the weight's shape, zero at the
start, in float32 whatever the weight's type (PopART's Adam and Lamb take the states' type
as an argument; its documented example and Graphcore's mixed-precision recipes choose
float32); so they are producer-less tensors the planner lays out, elementwise partners of
their weight and gradient.

The optimizers, by PopART's names:

- ``sgd`` — PopART's default (``ConstSGD``): ``w ← w − lr·g``;
- ``sgd_momentum`` — ``SGD`` with momentum μ (PopART's SGD1, one velocity state
  ``Accl___w``): ``v ← μ·v + g``, ``w ← w − lr·v`` (``torch.optim.SGD`` without dampening);
- ``adam``, ``adamw`` — two moments ``Accl1___w``, ``Accl2___w``: ``m ← β1·m + (1−β1)·g``,
  ``v ← β2·v + (1−β2)·g²``, ``w ← w − lr·(m̂ / (√v̂ + ε) + λ·w)`` with ``λ`` the weight
  decay (0 for ``adam``, decoupled for ``adamw`` as ``torch.optim.AdamW``);
- ``lamb`` — Adam's moments, the step ``r = m̂ / (√v̂ + ε) + λ·w`` scaled by the trust
  ratio ``‖w‖ / ‖r‖`` (1 where either norm is 0), as You et al. publish LAMB (its norms
  are ``ReduceL2`` reductions here). PopART's Lamb clips ``‖w‖`` at a maximum weight norm
  (10 by default), a scalar that changes no layout; it is not modelled.

Approximate: the bias corrections ``m̂ = m / (1 − β1ᵗ)``, ``v̂ = v / (1 − β2ᵗ)`` are
constants of step ``t = 1``, where PopART keeps a step counter; they are scalars, so the
layouts, bytes and cycles do not depend on ``t``.

With gradient accumulation over N micro-batches (PopART's ``accumulationFactor``), each
weight also has an accumulator ``Accum___w`` of its own type: the step adds the gradient
to it (``a ← a + g``), and the update reads ``a / N`` (PopART's mean reduction). The graph
is one micro-batch's step followed by the update; on the IPU the update runs once per N
micro-batches, which the cycles of the step do not divide out (they count it every time).
The loss scaling factor (PopART's ``lossScaling``) seeds the backward pass and is divided
out of the gradient here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from popart_unwind.errors import OptionError
from popart_unwind.ir import Graph, Tensor
from popart_unwind.ir.dtypes import ONNX_DTYPES
from popart_unwind.ir.names import ACCL1_PREFIX, ACCL2_PREFIX, ACCL_PREFIX, ACCUM_PREFIX
from popart_unwind.ops.gradient import one, scalar
from popart_unwind.options import OPTIMIZER_CHOICES, SessionOptions
from popart_unwind.rewrite import Rewriter
from popart_unwind.training.autodiff import RewriterGradientBuilder

__all__ = ["OPTIMIZERS", "STATE_DTYPE", "Optimizer", "add_updates", "optimizer_of"]

#: The optimizers by PopART's names (module docstring).
OPTIMIZERS = OPTIMIZER_CHOICES
#: The type of every optimizer state (the accumulator takes the weight's).
STATE_DTYPE = "float32"


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """One optimizer and its hyperparameters. ``weight_decay`` None takes the optimizer's
    default: 0.01 for ``adamw`` and ``lamb`` (torch's AdamW default), 0 otherwise."""

    name: str = "sgd"
    learning_rate: float = 0.01
    momentum: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8  # torch.optim's default (PopART's Adam: 1e-6)
    weight_decay: float | None = None
    loss_scaling: float = 1.0
    gradient_accumulation: int = 1

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise OptionError(f"unknown optimizer {self.name!r}; expected one of "
                              f"{', '.join(OPTIMIZERS)}")
        if isinstance(self.gradient_accumulation, bool) or \
                not isinstance(self.gradient_accumulation, int) or self.gradient_accumulation < 1:
            raise OptionError(f"gradient accumulation must be an integer >= 1, got "
                              f"{self.gradient_accumulation!r}")
        for field in ("learning_rate", "loss_scaling"):
            value = getattr(self, field)
            if not np.isfinite(value) or value <= 0:
                raise OptionError(f"{field} must be a finite number > 0, got {value!r}")

    @property
    def decay(self) -> float:
        if self.weight_decay is not None:
            return float(self.weight_decay)
        return 0.01 if self.name in ("adamw", "lamb") else 0.0

    def state_count(self) -> int:
        """How many float32 states each weight has."""
        return {"sgd": 0, "sgd_momentum": 1}.get(self.name, 2)


def optimizer_of(options: SessionOptions) -> Optimizer:
    """The optimizer a session's options describe."""
    return Optimizer(options.optimizer, learning_rate=options.learning_rate,
                     loss_scaling=options.loss_scaling,
                     gradient_accumulation=options.gradient_accumulation)


def add_updates(graph: Graph, gradients: Mapping[str, Tensor], rewriter: Rewriter,
                optimizer: Optimizer) -> dict[str, Tensor]:
    """Add each weight's update (and its states') to ``graph``; the new values become graph
    outputs. Returns weight id -> its new value, in the order of ``gradients``."""
    updated = {}
    for weight_id, grad in gradients.items():
        weight = graph.tensor(weight_id)
        updater = _Updater(graph, rewriter, optimizer, weight, grad)
        updated[weight_id] = updater.update()
    return updated


class _Updater:
    """The ops of one weight's update, each placed as the weight's gradient."""

    def __init__(self, graph: Graph, rewriter: Rewriter, optimizer: Optimizer,
                 weight: Tensor, grad: Tensor) -> None:
        self.graph, self.rewriter, self.optimizer = graph, rewriter, optimizer
        self.weight, self.grad = weight, grad
        self.builder = RewriterGradientBuilder(graph, rewriter, grad.producer)

    def op(self, op_type: str, *inputs: Tensor, **attributes: object) -> Tensor:
        return one(self.builder, op_type, list(inputs), dict(attributes) or None)

    def const(self, value: float, like: Tensor) -> Tensor:
        return scalar(self.builder, value, like)

    def output(self, tensor: Tensor) -> Tensor:
        self.rewriter.add_graph_output(self.graph, tensor)
        return tensor

    def state(self, prefix: str, dtype: str) -> Tensor:
        return self.rewriter.variable(self.graph, prefix, self.weight.id, dtype,
                                      self.weight.shape)

    def cast(self, tensor: Tensor, dtype: str) -> Tensor:
        return tensor if tensor.dtype == dtype else self.op("Cast", tensor, to=ONNX_DTYPES[dtype])

    def update(self) -> Tensor:
        opt, w = self.optimizer, self.weight
        grad, scale = self.grad, 1.0 / opt.loss_scaling
        if opt.gradient_accumulation > 1:
            accumulator = self.state(ACCUM_PREFIX, w.dtype)
            grad = self.output(self.op("Add", accumulator, grad))
            scale /= opt.gradient_accumulation
        if opt.name == "sgd":
            step = self.op("Mul", grad, self.const(opt.learning_rate * scale, grad))
            return self.output(self.op("Sub", w, step))
        g = self.cast(grad, STATE_DTYPE)
        g = g if scale == 1.0 else self.op("Mul", g, self.const(scale, g))
        if opt.name == "sgd_momentum":
            if opt.decay:
                g = self.op("Add", g, self.op("Mul", self.cast(w, STATE_DTYPE),
                                              self.const(opt.decay, g)))
            velocity = self.state(ACCL_PREFIX, STATE_DTYPE)
            # v + ((g - v) + μ·v): the velocity's first reader pairs it with its updater, g
            change = self.op("Add", self.op("Sub", g, velocity),
                             self.op("Mul", velocity, self.const(opt.momentum, g)))
            new_velocity = self.output(self.op("Add", velocity, change))
            return self._apply(new_velocity, opt.learning_rate)
        first = self.state(ACCL1_PREFIX, STATE_DTYPE)
        second = self.state(ACCL2_PREFIX, STATE_DTYPE)
        new_first = self.output(self.op("Add", first, self.op(
            "Mul", self.op("Sub", g, first), self.const(1.0 - opt.beta1, g))))
        squared = self.op("Mul", g, g)
        new_second = self.output(self.op("Add", second, self.op(
            "Mul", self.op("Sub", squared, second), self.const(1.0 - opt.beta2, g))))
        # bias corrections at step 1 (module docstring)
        first_hat = self.op("Mul", new_first, self.const(1.0 / (1.0 - opt.beta1), g))
        second_hat = self.op("Mul", new_second, self.const(1.0 / (1.0 - opt.beta2), g))
        denominator = self.op("Add", self.op("Sqrt", second_hat), self.const(opt.eps, g))
        step = self.op("Div", first_hat, denominator)
        if opt.decay:
            step = self.op("Add", step, self.op("Mul", self.cast(w, STATE_DTYPE),
                                                self.const(opt.decay, g)))
        if opt.name == "lamb":
            step = self.op("Mul", step, self._trust_ratio(step))
        return self._apply(step, opt.learning_rate)

    def _trust_ratio(self, step: Tensor) -> Tensor:
        """``‖w‖ / ‖r‖``, or 1 where either norm is 0 (LAMB's trust ratio)."""
        weight_norm = self.op("ReduceL2", self.cast(self.weight, STATE_DTYPE), keepdims=0)
        step_norm = self.op("ReduceL2", step, keepdims=0)
        zero = self.const(0.0, step)
        either_zero = self.op("Or", self.op("Equal", weight_norm, zero),
                              self.op("Equal", step_norm, zero))
        return self.op("Where", either_zero, self.const(1.0, step),
                       self.op("Div", weight_norm, step_norm))

    def _apply(self, step: Tensor, learning_rate: float) -> Tensor:
        """``w − lr·step``, in the weight's type."""
        scaled = self.cast(self.op("Mul", step, self.const(learning_rate, step)),
                           self.weight.dtype)
        return self.output(self.op("Sub", self.weight, scaled))

