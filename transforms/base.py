"""The transform base class: an object that changes the IR once, declaring the conditions it
assumes, guarantees and preserves (after PopART's transform notes).

Transforms are small frozen dataclasses: their fields are their options, their class
attributes their identity and their declared conditions. ``apply`` does the work through
the rewriter it is handed and says whether it changed anything; the registry
(``transforms.registry``) applies them, holds that answer against the rewriter's record and
checks the declarations when asked.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, ClassVar

from popart_unwind.errors import TransformError
from popart_unwind.ops import REGISTRY, OpRegistry

from .conditions import Condition

if TYPE_CHECKING:
    from popart_unwind.ir import Graph
    from popart_unwind.rewrite import Rewriter

#: Every condition: what a transform that only removes ops, or only annotates, preserves.
ALL_CONDITIONS: frozenset[Condition] = frozenset(Condition)


@dataclasses.dataclass(frozen=True)
class Transform:
    """Base of every transform. Subclasses set the class attributes below and ``apply``.

    ``id`` is a stable integer (PopART hashes the C++ type name, which is stable only
    within one build; ours never changes, so logs and reports can refer to it).
    """

    id: ClassVar[int] = -1
    name: ClassVar[str] = ""
    #: Conditions that must hold before ``apply`` (PopART's "assumptions").
    assumes: ClassVar[frozenset[Condition]] = frozenset()
    #: Conditions that hold after ``apply`` whenever the assumptions held before.
    guarantees: ClassVar[frozenset[Condition]] = frozenset()
    #: Conditions that, if they held before ``apply``, still hold after it.
    preserves: ClassVar[frozenset[Condition]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A transform's ``apply`` takes the rewriter every change goes through; one written
        without it is refused where it is defined, not when it first runs."""
        super().__init_subclass__(**kwargs)
        apply = cls.__dict__.get("apply")
        if apply is None:
            return
        parameters = list(inspect.signature(apply).parameters.values())
        positional = [p for p in parameters
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != 3 and not any(p.kind is p.VAR_POSITIONAL for p in parameters):
            names = ", ".join(p.name for p in parameters)
            raise TransformError(f"transform {cls.__name__}: apply must take (self, graph, "
                                 f"rewriter) and change the IR only through the rewriter; "
                                 f"it takes ({names})")

    #: What the transform knows of ops (shape rules, side effects, layout rules); the
    #: registry builds the rewriter it hands to ``apply`` with it. Keyword-only, so that
    #: subclasses' own options keep their positions.
    op_registry: OpRegistry = dataclasses.field(default=REGISTRY, kw_only=True)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        """Transform ``graph`` (and, for IR-wide transforms, ``graph.ir``); True iff changed.

        Every change goes through ``rewriter`` — made by the registry for this one
        application — and nothing else: its record is how the registry knows what changed
        (a returned answer that disagrees with it is a TransformError), and checking mode
        catches a change made around it when the rewriter recorded none. Reading the IR
        directly is fine.
        """
        raise NotImplementedError(f"transform {type(self).__name__} does not define apply")
