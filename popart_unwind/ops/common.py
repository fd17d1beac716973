"""Small helpers every op family's rules share: reading inputs, constants and axes."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from popart_unwind.errors import PopartUnwindError, ShapeError, ShapeUndecided
from popart_unwind.ir.op import Op, SubgraphOp
from popart_unwind.ir.tensor import Tensor, TensorType

#: Folds that compute (matmuls, reductions, gathers, tiling, random values) give up above
#: this many elements, so canonicalizing stays cheap. Folds that only fill, copy or map values
#: (ConstantOfShape, Range, Expand, Concat, elementwise ops) have no cap: their result is as
#: large as the constant the model itself states.
FOLD_MAX_ELEMENTS = 1 << 16


def constant_value(tensor: Tensor) -> np.ndarray | None:
    """The value of a Const tensor, or None (variables can change, so they never count)."""
    return tensor.data if tensor.tensor_type is TensorType.CONST else None


def input_shape(op: Op, index: int) -> tuple[int, ...]:
    """The known shape of input ``index``, or ShapeError naming the op and the input."""
    if not op.has_input(index):
        raise ShapeError(f"op {op.debug_name()} needs input {index}")
    tensor = op.input(index)
    if tensor.shape is None:
        raise ShapeError(f"op {op.debug_name()}: input {index} ({tensor.id!r}) has no shape yet")
    return tensor.shape


#: A shape operand computed from shapes is evaluated only while it stays this small, and
#: through at most ``COMPUTED_VALUE_DEPTH`` producers.
COMPUTED_VALUE_ELEMENTS = 1 << 10
COMPUTED_VALUE_DEPTH = 48


def computed_value(tensor: Tensor, depth: int = COMPUTED_VALUE_DEPTH,
                   seen: dict[int, np.ndarray | None] | None = None) -> np.ndarray | None:
    """The value of ``tensor`` if it is a Const tensor or a small value computed from
    constants and known shapes (``Concat(Shape(x), [-1])``), else None.

    Expanded ONNX functions build their shape operands so; ONNX's inference propagates such
    values, and so do the shape rules through this. A subgraph's input has the value its
    callers bind it to where that is known and the same on every run. Each producer is
    evaluated by its own fold hook (the family states it), never by naming an op type here;
    ops with side effects or random draws, and values that grow large, stop the evaluation. ``seen``
    remembers each tensor's answer within one evaluation, so shared producers are
    evaluated once.
    """
    value = constant_value(tensor)
    if value is not None or depth <= 0:
        return value
    seen = {} if seen is None else seen
    if id(tensor) not in seen:
        seen[id(tensor)] = (_evaluated(tensor, depth, seen) if tensor.producer is not None
                            else _bound_value(tensor, depth, seen))
    return seen[id(tensor)]


def _bound_value(tensor: Tensor, depth: int,
                 seen: dict[int, np.ndarray | None]) -> np.ndarray | None:
    """A subgraph input's value where every op calling its graph binds it to one value
    known before running, the same on every run (a constant a loop body reads from the
    outer scope); None for a main-graph input, a loop's carried value or a scan's slice."""
    graph = tensor.graph
    if graph is graph.ir.main_graph or tensor.id not in graph.input_ids:
        return None
    index = graph.input_ids.index(tensor.id)
    callers = [op for op in graph.ir.all_ops()
               if isinstance(op, SubgraphOp) and graph in op.called_graphs()]
    found: np.ndarray | None = None
    for op in callers:
        op_in = op.subgraph_in_to_op_in_index(graph, index)
        if op_in is None or not op.same_every_run(graph, index):
            return None
        value = computed_value(op.input(op_in), depth - 1, seen)
        if value is None or value.size > COMPUTED_VALUE_ELEMENTS or (
                found is not None and not np.array_equal(found, value)):
            return None
        found = value
    return found


def _evaluated(tensor: Tensor, depth: int,
               seen: dict[int, np.ndarray | None]) -> np.ndarray | None:
    """``tensor``'s value by its producer's fold hook (see :func:`computed_value`)."""
    from popart_unwind.ops.registry import REGISTRY  # the families register into it

    op = tensor.producer
    opdef = REGISTRY.lookup(op)
    if (opdef is None or opdef.fold is None or opdef.random or opdef.has_side_effects(op)
            or op.called_graphs()):
        return None
    index = next((i for i, out in op.output_map().items() if out is tensor), None)
    if index is None or tensor.shape is None or prod(tensor.shape) > COMPUTED_VALUE_ELEMENTS:
        return None  # only values typed as small are computed (inference types in order)
    inputs = op.input_map()
    operands: list[np.ndarray | None] = []
    for position in range(max(inputs, default=-1) + 1):
        operand = (computed_value(inputs[position], depth - 1, seen) if position in inputs
                   else None)
        small = operand is not None and operand.size <= COMPUTED_VALUE_ELEMENTS
        operands.append(operand if small else None)
    try:
        results = opdef.fold(op, operands)
    except (PopartUnwindError, ValueError, TypeError, IndexError, ArithmeticError):
        return None
    if results is None or index >= len(results):
        return None
    result = results[index]
    if isinstance(result, Tensor):
        return None if result is tensor else computed_value(result, depth - 1, seen)
    result = np.asarray(result)
    return result if result.size <= COMPUTED_VALUE_ELEMENTS else None


def constant_input(op: Op, index: int, what: str) -> np.ndarray:
    """The value of input ``index`` (e.g. Reshape's target shape): a constant, or a small
    value computed from constants and known shapes; ShapeUndecided if neither."""
    if not op.has_input(index):
        raise ShapeError(f"op {op.debug_name()} needs input {index} ({what})")
    value = computed_value(op.input(index))
    if value is None:
        raise ShapeUndecided(f"op {op.debug_name()}: {what} (input {index}, "
                             f"{op.input(index).id!r}) must be a constant to know the shape",
                             needs=op.input(index).id)
    return value


def normalize_axis(op: Op, axis: int, rank: int) -> int:
    """``axis`` in [0, rank), accepting ONNX's negative axes; ShapeError if out of range."""
    if not -rank <= axis < rank:
        raise ShapeError(f"op {op.debug_name()}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def unchanged(op: Op, source: Tensor) -> list[Tensor] | None:
    """A fold's answer for an op that changes nothing: ``[source]`` when output 0 is exactly
    ``source`` in dtype and shape (as inference set it), else None."""
    out = op.output(0)
    if out.shape is None or (out.dtype, out.shape) != (source.dtype, source.shape):
        return None
    return [source]


def operands_constant(op: Op, constants: Sequence[np.ndarray | None]) -> bool:
    """Every input after the data (shapes, axes, starts...) is present only as a constant."""
    return all(constants[i] is not None for i in op.input_map() if i > 0)


def ints(values: Sequence[int] | np.ndarray) -> list[int]:
    """An attribute's or a constant's values as a flat list of Python ints."""
    return [int(v) for v in np.asarray(values).reshape(-1)]


def small_constants(*arrays: np.ndarray | None) -> bool:
    """Every array is a known constant within ``FOLD_MAX_ELEMENTS``: a fold that computes
    may go ahead."""
    return all(a is not None and a.size <= FOLD_MAX_ELEMENTS for a in arrays)
