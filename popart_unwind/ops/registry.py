"""The op registry: for each op type, every rule about it, stated in one place.

An :class:`OpDef` is registered once, by the module of its op family (``ops/views.py``,
``ops/elementwise.py``, ...). Everything that needs to know what an op means — shape
inference, the canonicalizer, the transforms, the layout planner, the cost model and the
PopART baseline — looks the op up here instead of switching on type names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from popart_unwind.errors import IrError
from popart_unwind.ir.op import ONNX_DOMAIN, Op, OpType
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.gradient import GradientRule
from popart_unwind.ops.layout_rule import BARRIER, LayoutRule

#: One output's type as a shape rule gives it: the dtype, and the shape, or None where the
#: rule cannot decide it (a subgraph output its body has not typed yet).
OutputType = tuple[str, tuple[int, ...] | None]
#: The type of each output, in output-index order.
InferredOutputs = list[OutputType]
#: A shape rule. It reads input dtypes/shapes (and constant input data where the op's
#: meaning needs it, e.g. Reshape's target shape) and raises ShapeError on a mismatch.
InferRule = Callable[[Op], InferredOutputs]
#: Per input index, the input's constant value or None (absent inputs included).
Constants = Sequence[np.ndarray | None]
#: What a fold gives: one replacement per output (an existing Tensor or a numpy constant),
#: or None to leave the op alone.
FoldResult = Sequence[Tensor | np.ndarray] | None
#: A fold hook (MLIR's ``fold``): from the op and its constant inputs, the replacements of
#: its outputs, or None. It must not create ops.
FoldRule = Callable[[Op, Constants], FoldResult]


#: PopART's ``getHighSubgraphValue`` (a matmul or convolution: worth outlining alone) and
#: ``getLowSubgraphValue`` (a cheap op such as an elementwise one).
HIGH_OUTLINE_VALUE = 1000.0
LOW_OUTLINE_VALUE = 0.1


@dataclasses.dataclass(frozen=True)
class OpDef:
    """Everything the tool knows about one op type (matched by domain and name; rules
    that differ between opset versions read ``op.type.version``)."""

    name: str
    domain: str = ONNX_DOMAIN
    infer: InferRule | None = None
    fold: FoldRule | None = None
    #: Canonicalization patterns rooted at this op type (``popart_unwind.rewrite.Pattern``).
    patterns: tuple[Any, ...] = ()
    #: Operands may be swapped (the canonicalizer moves constants to the right).
    commutative: bool = False
    #: Has effects beyond its outputs: never erased, merged or folded away. A predicate
    #: where it depends on the op (a Call has effects if its body has).
    side_effects: bool | Callable[[Op], bool] = False
    #: Draws random numbers: two such ops give different values from the same inputs, so
    #: they are never merged.
    random: bool = False
    #: Normalises its input (PopART's ``Op::isNorm``): what ``recompute=norm_only``
    #: recomputes, its result being large and cheap to compute again.
    norm: bool = False
    #: Reduces or normalises what it reads (a reduction, a softmax, a norm): an elementwise
    #: op whose result it reads leaves its producer-less operands untied
    #: (``ElementwiseRule``), so the statistics do not crowd a computed operand's tiles.
    reduces_input: bool = False
    #: Its result is laid out as its first input (a reshape-like view of it, a scatter into
    #: it), so a producer-less tensor's layout reaches through it.
    keeps_input_layout: bool = False
    #: Repeats a smaller input's elements to a larger shape (numpy broadcasting): whatever
    #: reads its result reads a broadcast operand.
    broadcasts_input: bool = False
    #: What outlining one such op saves (PopART's ``Op::getSubgraphValue``): a sequence
    #: of ops is outlined when its values add up to ``SessionOptions.outline_threshold``.
    outline_value: float = LOW_OUTLINE_VALUE
    #: How the op bears on tile layouts (``ops/layout_rule.py``); unmodelled ops are barriers.
    layout: LayoutRule = BARRIER
    #: Its gradient rule (``ops/gradient.py``): the ops that compute its inputs' gradients
    #: from its outputs' in a training step's backward pass; None where the op has none.
    gradient: GradientRule | None = None

    def has_side_effects(self, op: Op) -> bool:
        effect = self.side_effects
        return bool(effect(op)) if callable(effect) else effect


class OpRegistry:
    """Op definitions by (domain, name)."""

    def __init__(self) -> None:
        self._defs: dict[tuple[str, str], OpDef] = {}
        self._refusals: dict[tuple[str, str], str] = {}

    def register(self, opdef: OpDef) -> OpDef:
        key = (opdef.domain, opdef.name)
        if key in self._defs or key in self._refusals:
            raise IrError(f"op type {opdef.domain}.{opdef.name} is registered twice")
        self._defs[key] = opdef
        return opdef

    def refuse(self, domain: str, name: str, reason: str) -> None:
        """Say why an op type is not registered (a family that knows the op but cannot model
        it): the importer's refusal gives the reason."""
        key = (domain, name)
        if key in self._defs or key in self._refusals:
            raise IrError(f"op type {domain}.{name} is registered or refused twice")
        self._refusals[key] = reason

    def refusal(self, op_type: OpType) -> str | None:
        """Why ``op_type`` is refused, where its family says; None otherwise."""
        return self._refusals.get((op_type.domain, op_type.name))

    def lookup(self, op: Op | OpType) -> OpDef | None:
        """The definition of ``op``'s type, or None for an op the tool treats as opaque."""
        op_type = op.type if isinstance(op, Op) else op
        return self._defs.get((op_type.domain, op_type.name))

    def names(self) -> list[tuple[str, str]]:
        return sorted(self._defs)

    def patterns_for(self, op: Op) -> tuple[Any, ...]:
        opdef = self.lookup(op)
        return () if opdef is None else opdef.patterns

    def layout_rule(self, op: Op) -> LayoutRule:
        opdef = self.lookup(op)
        return BARRIER if opdef is None else opdef.layout

    def has_side_effects(self, op: Op) -> bool:
        """Unknown (opaque) ops are assumed to have side effects: never erased."""
        opdef = self.lookup(op)
        return True if opdef is None else opdef.has_side_effects(op)

    def _flag(self, op: Op, name: str) -> bool:
        """OpDef flag ``name`` of ``op``'s type; False for an opaque op."""
        opdef = self.lookup(op)
        return opdef is not None and bool(getattr(opdef, name))

    def draws_random(self, op: Op) -> bool:
        return self._flag(op, "random")

    def is_norm(self, op: Op) -> bool:
        return self._flag(op, "norm")

    def reduces_input(self, op: Op) -> bool:
        return self._flag(op, "reduces_input")

    def keeps_input_layout(self, op: Op) -> bool:
        return self._flag(op, "keeps_input_layout")

    def broadcasts_input(self, op: Op) -> bool:
        return self._flag(op, "broadcasts_input")

    def gradient_rule(self, op: Op | OpType) -> GradientRule | None:
        opdef = self.lookup(op)
        return None if opdef is None else opdef.gradient

    def outline_value(self, op: Op) -> float:
        opdef = self.lookup(op)
        return LOW_OUTLINE_VALUE if opdef is None else opdef.outline_value


REGISTRY = OpRegistry()


def register(opdef: OpDef) -> OpDef:
    return REGISTRY.register(opdef)
