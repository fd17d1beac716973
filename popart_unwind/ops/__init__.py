"""What each op type means: one module per op family states every rule of its ops (shape
rule, folds, canonicalization patterns, side effects, layout rule) and registers their
``OpDef``s. The families are imported here, from this one list, so ``REGISTRY`` is complete
whenever the package is imported."""

from popart_unwind.ops import (  # noqa: F401  (imported to register their op definitions)
    constants,
    control,
    conv,
    depth_space,
    elementwise,
    graphcore,
    graphcore_compute,
    graphcore_ctc,
    graphcore_flip_weights,
    graphcore_float8,
    graphcore_grouped_gather,
    graphcore_losses,
    graphcore_packed,
    graphcore_runtime,
    graphcore_spline,
    indexing,
    ipu_copy,
    linalg,
    multiconv,
    norms,
    pools,
    positional,
    recurrent,
    reduce,
    resizing,
    sampling,
    slicing,
    stash,
    stochastic,
    views,
)
from popart_unwind.ops.registry import REGISTRY, OpDef, OpRegistry, register

__all__ = ["REGISTRY", "OpDef", "OpRegistry", "register"]
