"""InferShapes: give every tensor its dtype and shape from the ops' shape rules."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from popart_unwind.ops.shape_folding import (
    refuse_value_dependent_layouts,
    refuse_value_dependent_shapes,
)
from popart_unwind.ops.shape_inference import infer_shapes

from .base import ALL_CONDITIONS, Transform
from .conditions import Condition
from .registry import register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph
    from popart_unwind.rewrite import Rewriter


@register
@dataclasses.dataclass(frozen=True)
class InferShapes(Transform):
    """Runs the shape-inference driver over the whole IR, subgraphs included.

    Guarantees SHAPES_KNOWN (a rule that cannot type an op raises ShapeError naming it;
    an opaque op keeps the shapes its model gave, so one without them breaks the guarantee
    and the checker names the tensor); a model whose shapes depend on what a graph input
    holds, not only on its shape, is refused naming that input (DynamicShapeError): the
    import keeps such a model, as ONNX's shape inference does, but nothing can be planned
    for it. So is a model with an op whose layout rule needs such an input's values (a
    Slice's starts; ``LayoutRule.undecided_operands``). Preserves every other condition
    because it writes
    only dtypes and shapes: no op is added, removed, moved or rewired.
    """

    id = 1
    name = "InferShapes"
    guarantees = frozenset({Condition.SHAPES_KNOWN})
    preserves = ALL_CONDITIONS

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        changed = infer_shapes(graph.ir, self.op_registry, rewriter=rewriter)
        refuse_value_dependent_shapes(graph.ir, self.op_registry)
        refuse_value_dependent_layouts(graph.ir, self.op_registry)
        return changed
