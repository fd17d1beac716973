"""Typed errors of popart-unwind.

Every error the library raises on bad input derives from :class:`PopartUnwindError`, so a
caller (the CLI above all) can catch one type and print one line. Where Python users expect a
builtin type, the error also derives from it (``ValueError`` for bad values, ``TypeError``
for wrong kinds of argument, ``RuntimeError`` for internal limits being hit).
Messages name the tensor, op or shape involved and what was expected.
"""

from __future__ import annotations


class PopartUnwindError(Exception):
    """Base of every error raised by popart-unwind."""


class RegionError(PopartUnwindError, ValueError):
    """A Stripe, Sett or Region was built or combined with inconsistent arguments."""


class ChainError(PopartUnwindError, ValueError):
    """A Chain op does not fit the shape it is applied to."""


class CanonicalizationError(PopartUnwindError, RuntimeError):
    """Canonicalization did not reach a fixpoint within its cap: a rewrite rule is cycling."""


class ShapeError(PopartUnwindError, ValueError):
    """Shapes contradict each other (inference, broadcasting, einsum specs)."""


class ShapeUndecided(ShapeError):
    """A shape rule cannot decide (a data-dependent output, a shape input computed at run
    time): the op's outputs keep the shapes they were seeded with, or stay unknown.
    ``needs`` is the id of the input whose value the rule lacks, where one input is it."""

    def __init__(self, message: str, needs: str | None = None) -> None:
        super().__init__(message)
        self.needs = needs


class GraphError(PopartUnwindError, ValueError):
    """An UnwindGraph was used inconsistently (bad shapes, ids, permutations, ...)."""


class SolverError(PopartUnwindError, RuntimeError):
    """A solver could not produce a valid solution."""


class IrError(PopartUnwindError, ValueError):
    """The IR is malformed or an IR operation was misused."""


class ModelImportError(IrError):
    """A model file (ONNX, PyTorch program) could not be imported."""


class TransformError(PopartUnwindError, RuntimeError):
    """A transform's assumptions do not hold, or it broke a condition it preserves."""


class TargetError(PopartUnwindError, ValueError):
    """The target model (IPU Model) was asked for something it cannot provide."""


class PlanError(PopartUnwindError, ValueError):
    """A plan (tile mappings) is incomplete or inconsistent."""


class OptionError(PopartUnwindError, ValueError):
    """A session option was named or valued wrongly (``--option KEY=VALUE``)."""


class DynamicShapeError(ModelImportError):
    """A shape is not static: a graph input's dimension is left symbolic (give it with
    ``--dim`` or ``--input-shape``), or a shape, or the element map of an op whose layout
    needs an operand's value (a Slice's starts), depends on what a graph input holds, not
    only on its shape. PopART, and so the plan, needs these before running."""


class UnsupportedModelError(ModelImportError):
    """A model uses what the tool cannot read faithfully: an op type the registry does not
    know, a domain it does not model, or an opset or IR version outside the supported range."""


class ModelPathError(ModelImportError):
    """The MODEL path is no regular file (a folder, a FIFO, a device, a symbolic link loop)."""


class OutputError(PopartUnwindError, ValueError):
    """An output cannot be written safely: it would replace an input, a device, a folder the
    tool did not make, or its folder is missing or not writable."""


class ResourceError(PopartUnwindError, RuntimeError):
    """Planning would need more of the machine running the tool than it has: memory by the
    estimate made before the work, or memory that ran out during it."""


class UnknownOpsWarning(UserWarning):
    """Op types the registry does not know were imported as opaque barriers on request
    (``allow_unknown_ops``): the plan maps their results linearly and counts no exchange."""


class IgnoredAttributeWarning(UserWarning):
    """The model carries an attribute the planner understands but does not read (PopART's
    per-op ``__available_memory_proportion``): what applies instead is said."""


class TransformWarning(UserWarning):
    """A transform was asked for something the model does not allow (recomputation in a
    graph with no loss, say) and left the IR as it was."""


class OutputWarning(UserWarning):
    """An output was written, but something the tool did not write kept a folder it
    retired from being removed (it is left where the warning says)."""
