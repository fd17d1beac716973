"""Autodiff: a forward model becomes one training step — its loss, the backward pass and
each weight's update with its optimizer's state — as PopART's ``TrainingSession`` prepares
an ONNX model (``Ir::constructBackwards``, then the optimizer's VarUpdate ops).

With ``SessionOptions.loss`` set (``nll``, ``l1`` or a tensor's name; see
``popart_unwind.training.losses``), the transform adds the loss (a graph output, and the
IR's ``final_loss_id``), builds every trainable weight's gradient from the op families'
gradient rules (``popart_unwind.training.autodiff``) and adds the updates of
``SessionOptions.optimizer`` (``popart_unwind.training.optimizers``), with gradient
accumulation and loss scaling as the options say. What follows it in the pipeline sees a
training step as the PyTorch front end makes one: DecomposeGradSum, recomputation and
pipelining work on it alike.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.errors import TransformError
from popart_unwind.training import build_backward
from popart_unwind.training.losses import add_loss
from popart_unwind.training.optimizers import add_updates, optimizer_of

from .base import Transform
from .conditions import Condition
from .registry import AUTODIFF, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph
    from popart_unwind.rewrite import Rewriter


#: A model's initializer is trained when it has at least this many elements. One of a
#: single element is an exporter's constant (a scale such as 1/√d, an epsilon), not a
#: parameter: PopART would hold it as a Variable and train it too, but its update is
#: worth nothing to plan, and training it would make a scalar that layers on several IPUs
#: share a weight no pipeline may copy.
WEIGHT_MIN_ELEMENTS = 2


@register
@dataclasses.dataclass(frozen=True)
class Autodiff(Transform):
    """Make the main graph a training step (module docstring). Reads
    ``SessionOptions.loss``; empty (the default), it changes nothing.

    Assumes shapes are known (the gradient rules read them) and no op on several IPUs yet
    (it runs before any split: every op it adds inherits its forward op's placement, so
    VGRAPH and PSTAGE are kept when they held). Guarantees nothing more; preserves every
    condition.
    """

    id = 16
    name = AUTODIFF
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = frozenset(Condition)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        options = ir.options
        if not options.loss:
            return False
        main = ir.main_graph
        if ir.final_loss_id is not None:
            raise TransformError(f"the model is already a training step (its loss is "
                                 f"{ir.final_loss_id!r}); --loss builds one from a forward "
                                 f"model")
        loss = add_loss(main, rewriter, options.loss)
        if loss.id not in main.output_ids:
            rewriter.add_graph_output(main, loss)
        ir.final_loss_id = loss.id
        optimizer = optimizer_of(options)
        gradients = build_backward(main, loss, rewriter, loss_scaling=optimizer.loss_scaling,
                                   min_elements=WEIGHT_MIN_ELEMENTS,
                                   registry=self.op_registry)
        add_updates(main, gradients, rewriter, optimizer)
        ir.metadata["kind"] = "training"
        return True
