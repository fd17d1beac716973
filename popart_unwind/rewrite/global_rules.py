"""The rules MLIR's canonicalizer applies to every op, whatever its type, read for this IR.

- untyped outputs: an op whose output has no shape yet gets its shape rule's answer as soon
  as every input's shape is known (a fold may have just made a shape operand constant), so
  folds and the replacements they make are checked against known shapes.
- dead ops: an op none of whose outputs is read (graph outputs count as reads) and whose
  OpDef says it has no side effects is erased; ops the registry does not know are kept.
- folding: an op's ``fold`` hook sees, per input, the constant value or None; what it
  returns (existing tensors or numpy values) replaces the op's outputs.
- commutative operands: a binary commutative op with a Const left operand and a non-Const
  right one has them swapped, so the constant is on the right.
- constants: Const tensors play MLIR's constant ops. Equal ones (dtype, shape, bytes) are
  uniqued, and unused ones are dead, like an unused constant op.

Each rule function returns True iff it changed the IR, all through the rewriter.
"""

from __future__ import annotations

from typing import Any

from popart_unwind.errors import ShapeUndecided
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.rewrite.rewriter import Rewriter, is_constant

TYPE_OUTPUTS = "type-outputs"
DEAD_CODE = "dead-code"
COMMUTE = "constant-operand-to-right"
UNIQUE_CONSTANTS = "unique-constants"
DEAD_CONSTANTS = "dead-constants"


def fold_rule_name(op: Op) -> str:
    return f"fold({op.type.name})"


def is_dead(op: Op, opdef: Any) -> bool:
    """Unread outputs and no side effects (unknown ops are assumed to have some)."""
    if opdef is None or opdef.has_side_effects(op):
        return False
    return not any(t.num_uses() or t.is_graph_output() for t in op.outputs)


def type_outputs(op: Op, opdef: Any, rewriter: Rewriter) -> bool:
    """Give the outputs that have no shape the op's shape rule's dtype and shape, once every
    input's shape is known. Shape inference could not type them (a shape operand was not yet
    constant); a fold upstream may since have made it so. A rule that cannot decide yet
    changes nothing; one that finds the op inconsistent raises its ShapeError."""
    if opdef is None or opdef.infer is None:
        return False
    untyped = {index: t for index, t in op.output_map().items() if t.shape is None}
    if not untyped or any(t.shape is None for t in op.inputs):
        return False
    try:
        inferred = list(opdef.infer(op))
    except ShapeUndecided:
        return False
    for index, tensor in untyped.items():
        if index < len(inferred) and inferred[index][1] is not None:
            dtype, shape = inferred[index]
            rewriter.set_type(tensor, dtype, shape)
    return any(t.shape is not None for t in untyped.values())


def erase_if_dead(op: Op, opdef: Any, rewriter: Rewriter) -> bool:
    if not is_dead(op, opdef):
        return False
    rewriter.erase_op(op)
    return True


def constant_operands(op: Op) -> list[Any]:
    """Per input index, the Const value there or None (absent inputs included)."""
    inputs = op.input_map()
    count = max(inputs, default=-1) + 1
    return [inputs[i].data if i in inputs and is_constant(inputs[i]) else None
            for i in range(count)]


def apply_fold(op: Op, opdef: Any, rewriter: Rewriter) -> bool:
    if opdef is None or opdef.fold is None or opdef.has_side_effects(op):
        return False
    values = opdef.fold(op, constant_operands(op))
    if values is None:
        return False
    return rewriter.replace_op(op, list(values))


def move_constant_right(op: Op, opdef: Any, rewriter: Rewriter) -> bool:
    if opdef is None or not opdef.commutative or list(op.input_map()) != [0, 1]:
        return False
    left, right = op.input(0), op.input(1)
    if not is_constant(left) or is_constant(right):
        return False
    rewriter.set_input(op, 0, right)
    rewriter.set_input(op, 1, left)
    return True


def unique_constants(graph: Graph, rewriter: Rewriter) -> int:
    """Redirect the readers of each Const tensor equal to an earlier one, and drop it."""
    spares = rewriter.pool(graph).duplicates()
    for spare, kept in spares:
        rewriter.replace_all_uses(spare, kept)
        rewriter.remove_tensor(spare)
    return len(spares)


def remove_dead_constants(graph: Graph, candidates: list[Tensor], rewriter: Rewriter) -> int:
    """Remove the Const tensors among ``candidates`` nothing reads any more."""
    removed = 0
    for tensor in candidates:
        if (graph.has_tensor(tensor.id) and graph.tensor(tensor.id) is tensor
                and is_constant(tensor) and tensor.producer is None and not tensor.num_uses()
                and not tensor.is_graph_input() and not tensor.is_graph_output()):
            rewriter.remove_tensor(tensor)
            removed += 1
    return removed
