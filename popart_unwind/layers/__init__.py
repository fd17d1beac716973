"""The layers of a training step, between the op families and the transforms.

A fully connected or convolution layer computes one cube of work in up to three passes
(forward, input gradient, weight gradient). ``fully_connected`` and ``convolution`` find
which ops are one layer's passes (through ``operand_views``), ``plan_options`` plans a
layer's passes jointly or separately (and makes Poplibs' choice between the two), and
``plan_choice`` estimates what each option costs and chooses among them;
``tied_embedding`` finds the embedding tables an LM head also reads. The planner and the
PopART baseline both ask here.
"""

from popart_unwind.layers.convolution import ConvolutionLayer, convolution_layers
from popart_unwind.layers.fully_connected import FullyConnectedLayer, fully_connected_layers
from popart_unwind.layers.optimizer_state import state_layouts, state_updaters
from popart_unwind.layers.plan_choice import (
    LayerKeys,
    OpPlans,
    choose_plans,
    estimated_bytes,
    estimated_cycles,
    layer_plans,
    with_recomputed,
)
from popart_unwind.layers.plan_options import (
    LayerPlans,
    PassOp,
    broadcast_elements,
    joint_plans,
    poplibs_plans,
    rearranged_elements,
    separate_plans,
)
from popart_unwind.layers.tied_embedding import tied_embeddings

__all__ = [
    "ConvolutionLayer", "FullyConnectedLayer", "LayerKeys", "LayerPlans", "OpPlans", "PassOp",
    "broadcast_elements", "choose_plans", "convolution_layers", "estimated_bytes",
    "estimated_cycles", "fully_connected_layers", "joint_plans", "layer_plans",
    "poplibs_plans", "rearranged_elements", "separate_plans", "state_layouts", "state_updaters",
    "tied_embeddings",
    "with_recomputed",
]
