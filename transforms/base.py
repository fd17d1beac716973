"""The transform base class (seed 002): an object that changes the IR once, declaring the
conditions it assumes, guarantees and preserves.

Transforms are small frozen dataclasses: their fields are their options, their class
attributes their identity and their declared conditions. ``apply`` does the work and says
whether it changed anything; the registry (``transforms.registry``) applies them, checking
the declarations when asked.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from .conditions import Condition

if TYPE_CHECKING:
    from popart_unwind.ir import Graph

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

    def apply(self, graph: Graph) -> bool:
        """Transform ``graph`` (and, for IR-wide transforms, ``graph.ir``); True iff changed."""
        raise NotImplementedError(f"transform {type(self).__name__} does not define apply")
