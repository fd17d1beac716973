"""Reserved prefixes for tensors the tool creates, as PopART's ``tensornames.hpp`` has.

Transforms name every tensor they introduce with one of these, so a tensor's origin can be
told from its id and user names never collide with generated ones.
"""

from __future__ import annotations

from popart_unwind.errors import IrError

CONSTANT_PREFIX = "Constant___"
FOLDED_PREFIX = "Folded___"
GRADIENT_PREFIX = "Gradient___"
UPDATED_PREFIX = "Updated___"
TRANSFORM_PREFIX = "Transform___"
#: An optimizer's state, named as PopART names it: SGD's velocity, Adam's and LAMB's first
#: and second moments, a gradient accumulator.
ACCL_PREFIX = "Accl___"
ACCL1_PREFIX = "Accl1___"
ACCL2_PREFIX = "Accl2___"
ACCUM_PREFIX = "Accum___"

#: The prefixes of an optimizer's states (module names above).
OPTIMIZER_STATE_PREFIXES = (ACCL_PREFIX, ACCL1_PREFIX, ACCL2_PREFIX, ACCUM_PREFIX)

RESERVED_PREFIXES = (CONSTANT_PREFIX, FOLDED_PREFIX, GRADIENT_PREFIX, UPDATED_PREFIX,
                     TRANSFORM_PREFIX, ACCL_PREFIX, ACCL1_PREFIX, ACCL2_PREFIX, ACCUM_PREFIX)


def reserved_id(graph, prefix: str, stem: str) -> str:
    """A fresh id ``prefix + stem`` in ``graph`` (suffixed if taken)."""
    if prefix not in RESERVED_PREFIXES:
        raise IrError(f"{prefix!r} is not a reserved prefix")
    return graph.unique_id(prefix + stem)


def is_optimizer_state(tensor_id: str) -> bool:
    """Whether a tensor is an optimizer's state or a gradient accumulator, by its name."""
    return tensor_id.startswith(OPTIMIZER_STATE_PREFIXES)
