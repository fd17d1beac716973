"""A training step built in the IR, as PopART's ``TrainingSession`` builds it: the loss
(``losses``), the backward pass from each op family's gradient rule (``autodiff``), and
each weight's update with its optimizer's state (``optimizers``)."""

from popart_unwind.training.autodiff import (
    AutodiffError,
    RewriterGradientBuilder,
    build_backward,
    loss_forward_ops,
    trainable_weights,
)

__all__ = ["AutodiffError", "RewriterGradientBuilder", "build_backward", "loss_forward_ops",
           "trainable_weights"]
