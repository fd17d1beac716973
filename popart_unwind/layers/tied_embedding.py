"""Embeddings tied to an LM head: a table both gathered from and, transposed, multiplied by.

Such a table is one tensor read by two layers (the embedding's Gather, the head's matmul),
and which of the two lays it out is a choice: PopART's ``GatherOpx`` creates it at the
highest priority, while its ``TiedGatherPattern`` (willow/src/patterns/tiedgatherpattern.cpp,
off by default) hands it to the head's matmul. :func:`tied_embeddings` finds the pairs that
pattern matches; the baseline asks it when it models the pattern.
"""

from __future__ import annotations

from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.ops.indexing import GatherRule
from popart_unwind.ops.linalg import is_gemm_with_transposed_rhs, is_matmul_or_gemm
from popart_unwind.ops.registry import REGISTRY, OpRegistry
from popart_unwind.ops.views import is_reshape, is_transpose


def tied_embeddings(ir: Ir, registry: OpRegistry = REGISTRY) -> dict[int, int]:
    """The Gathers PopART's TiedGatherPattern would turn into TiedGathers, each with the
    MatMul it matched: gather op id -> matmul op id.

    PopART's match: a Gather on axis 0 whose table, followed back through single-input ops,
    is a variable or constant that a MatMul also consumes (reached forward through ops with
    one input and one output), where exactly one of the two uses passes through a Transpose
    (the MatMul's right-hand operand also through one Reshape) — an embedding tied to an LM
    head. PopART matches before it builds the backward pass, so it sees only forward
    matmuls, and takes the first one found breadth first. Our graphs may hold a whole
    training step, whose backward matmuls also read the table; so here every MatMul reached
    is tried, in breadth-first order, and the first for which the Transpose condition holds
    is the match. (PopART applies the pattern in training only with gradient accumulation;
    that is the caller's choice: the baseline's ``tied_gather``.)
    """
    found: dict[int, int] = {}
    for graph in ir.graphs:
        for op in graph.ops:
            if not isinstance(registry.layout_rule(op), GatherRule) \
                    or not op.has_input(0) or not op.has_input(1):
                continue
            data = op.input(0)
            rank = len(data.shape or ())
            axis = int(op.attributes.get("axis", 0))
            if not rank or (axis + rank if axis < 0 else axis) != 0:
                continue
            variable = _root_variable(data)
            if variable is None:
                continue
            gathered_transposed = _by_transpose(data)
            for matmul in _matmuls_from(variable):
                rhs = matmul.input(1)
                if rhs.producer is not None and is_reshape(rhs.producer):
                    rhs = rhs.producer.input(0)
                # PopART reads a Gemm as MatMul(A', B'), B' a new Transpose when transB
                transposed = _by_transpose(rhs) or is_gemm_with_transposed_rhs(matmul)
                if transposed != gathered_transposed:
                    found[op.id] = matmul.id
                    break
    return found


def _by_transpose(tensor: Tensor) -> bool:
    return tensor.producer is not None and is_transpose(tensor.producer)


def _root_variable(tensor: Tensor) -> Tensor | None:
    """The producer-less tensor ``tensor`` comes from through single-input ops, if any
    (PopART's ``tgutil::getVariable``: a Variable or Const tensor)."""
    while tensor.producer is not None:
        inputs = list(tensor.producer.input_map().values())
        if len(inputs) != 1:
            return None
        tensor = inputs[0]
    return tensor if tensor.tensor_type in (TensorType.VARIABLE, TensorType.CONST) else None


def _matmuls_from(variable: Tensor) -> list[Op]:
    """MatMuls (and Gemms, which PopART turns into MatMuls when it reads ONNX) reading
    ``variable``, breadth first through ops with one input and one output (PopART's
    ``tgutil::searchConsumersFor``), in the order found."""
    matmuls: dict[int, Op] = {}
    frontier, seen = [variable], {(variable.graph.id, variable.id)}
    while frontier:
        following = []
        for tensor in frontier:
            for op in tensor.consumers:
                if is_matmul_or_gemm(op) and op.has_input(1):
                    matmuls.setdefault(op.id, op)
                    continue
                if len(op.input_map()) != 1 or len(op.output_map()) != 1:
                    continue
                output = op.output(next(iter(op.output_map())))
                if (output.graph.id, output.id) not in seen:
                    seen.add((output.graph.id, output.id))
                    following.append(output)
        frontier = following
    return list(matmuls.values())
