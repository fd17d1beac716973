"""What each op type means: one module per op family registers its ``OpDef``s.

Importing this package registers every family, so ``REGISTRY`` is complete.
"""

from popart_unwind.ops import (  # noqa: F401  (imported to register their op definitions)
    constants,
    control,
    elementwise,
    indexing,
    linalg,
    nn,
    reduce,
    views,
)
from popart_unwind.ops.registry import REGISTRY, OpDef, OpRegistry, register

__all__ = ["REGISTRY", "OpDef", "OpRegistry", "register"]
