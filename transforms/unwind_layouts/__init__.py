"""The layout planner: UnwindLayouts and ``plan_ir`` (see docs/planner.md).

``emit`` builds the unwinding problem from the IR through the op registry's layout rules,
``realize`` turns a solution into concrete tiles, ``plan`` runs the stages and returns the
``Plan``; ``transform`` is the pipeline's UnwindLayouts.
"""

from .emit import Emitter, emit_ir
from .plan import LINEAR, PARTLY, UNWOUND, Plan, PlannedTensor, plan_ir
from .realize import Realizer
from .transform import UnwindLayouts, default_target

__all__ = [
    "LINEAR", "PARTLY", "UNWOUND", "Emitter", "Plan", "PlannedTensor", "Realizer",
    "UnwindLayouts", "default_target", "emit_ir", "plan_ir",
]
