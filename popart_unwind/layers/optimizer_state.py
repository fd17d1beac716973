"""An optimizer's states beside the gradient each one accumulates.

PopART's SGD, Adam and Lamb optimizers keep each state (a momentum, a first or second
moment, a gradient accumulator) in an Accumulate op's variable, and ``AccumulateBaseOpx``
(``willow/src/popx/op/accumulatex.cpp``) creates that variable as a clone of its updater,
the gradient it accumulates, once the gradient exists: every element of the state lies
where the gradient's does, so the accumulation exchanges nothing. ``training.optimizers``
builds each state's update with its first reader pairing the state with its updater
(``Sub(g, m)``, ``Add(a, g)``); that reader is how the updater is found here. The PopART
baseline lays the states out so, and so does the planner, whose solver sees a state only
as an elementwise partner and could leave a few of its elements elsewhere, each costing an
exchange (and its syncs) at every update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from popart_unwind.ir.graph import Graph
from popart_unwind.ir.names import OPTIMIZER_STATE_PREFIXES, is_optimizer_state
from popart_unwind.ir.tensor import Tensor, TensorType

__all__ = ["state_bytes_per_element", "state_layouts", "state_updaters"]


def state_updaters(graph: Graph) -> dict[str, Tensor]:
    """Each optimizer state of ``graph`` (by its reserved name) -> its updater: the computed
    tensor of its shape its first two-operand reader pairs it with. States without one are
    left out."""
    found = {}
    for state in graph.producerless_tensors():
        if state.tensor_type is not TensorType.VARIABLE or not is_optimizer_state(state.id):
            continue
        updater = _updater(state)
        if updater is not None:
            found[state.id] = updater
    return found


def state_layouts(graph: Graph,
                  layouts_of: Callable[[set[str]], Mapping[str, np.ndarray]]
                  ) -> dict[str, tuple[str, np.ndarray]]:
    """Each optimizer state of ``graph`` -> (its updater's id, the updater's tiles, flat):
    the layout the state takes as a clone of its updater. ``layouts_of(ids)`` gives the
    computed layouts of the updaters named (the cost walk's, under some plan)."""
    updaters = {state: updater.id for state, updater in state_updaters(graph).items()}
    if not updaters:
        return {}
    layouts = layouts_of(set(updaters.values()))
    return {state: (updater, np.asarray(layouts[updater]).reshape(-1))
            for state, updater in updaters.items() if updater in layouts}


def state_bytes_per_element(graph: Graph, weights: str,
                            dtype_size: Callable[[str], int]) -> int:
    """Bytes the optimizer states of ``weights`` (by their reserved names) hold per element
    of it: what each element of the weight gradient, whose layout the states clone, brings
    to its tile for the whole program."""
    return sum(dtype_size(graph.tensor(prefix + weights).dtype)
               for prefix in OPTIMIZER_STATE_PREFIXES if graph.has_tensor(prefix + weights))


def _updater(state: Tensor) -> Tensor | None:
    for op in state.consumers:
        others = [t for t in op.inputs if t is not state]
        if len(op.inputs) == 2 and len(others) == 1 and others[0].producer is not None \
                and others[0].shape == state.shape:
            return others[0]
    return None
