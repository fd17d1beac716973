"""Folding the shape computations an exporter writes, once the graph inputs are static.

An export with dynamic axes computes its shapes at run time: ``Shape`` → ``Gather`` /
``Slice`` → ``Concat`` → ``Reshape`` / ``Expand`` / ``Range`` / ``ConstantOfShape``, with
casts and comparisons on the way. PopART needs static input shapes, and with them a
``Shape`` op's value is a constant; its constant-expression folding then computes every op
whose inputs are all constant at import. Here the same happens op by op: shape inference
types an op, its fold (``OpDef.fold``) computes its value where that is known, the value
becomes a Const tensor, and the next op's shape rule can decide. A pass runs in schedule
order; passes repeat (with a whole inference walk between them, which also types called
subgraphs) until one changes nothing.

Only values are folded, never identities (an op whose fold hands back an existing tensor
is left to the canonicalizer, unless that tensor is a constant: its value is then folded
as any other, as an expanded function's ``Identity`` of a ``Constant`` axis needs), and no
op with side effects or random draws is touched.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import DynamicShapeError, IrError, ShapeError, ShapeUndecided
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.ops.common import computed_value
from popart_unwind.ops.registry import REGISTRY, OpDef, OpRegistry
from popart_unwind.ops.shape_inference import infer_op, infer_shapes
from popart_unwind.rewrite import Rewriter
from popart_unwind.rewrite.global_rules import (
    constant_operands,
    is_constant,
    is_dead,
    remove_dead_constants,
)

#: Passes are bounded: each one that changes something folds at least one op away, so this
#: is reached only by a graph with more shape-dependent links than any real export has.
MAX_PASSES = 64


def has_unknown_shapes(ir: Ir) -> bool:
    """Whether any op output of any graph still lacks a shape."""
    return any(tensor.shape is None for graph in ir.graphs for op in graph.ops
               for tensor in op.outputs)


def fold_shape_computations(ir: Ir, registry: OpRegistry = REGISTRY,
                            rewriter: Rewriter | None = None) -> bool:
    """Alternate shape inference and constant folding until no shape is left unknown or
    nothing changes; returns whether anything changed. Seeded shapes are trusted where a
    rule cannot decide, as at import."""
    rewriter = rewriter if rewriter is not None else Rewriter(registry)
    changed = False
    for _ in range(MAX_PASSES):
        if not has_unknown_shapes(ir):
            break
        folded = False
        for graph in list(ir.graphs):
            folded |= _fold_pass(graph, registry, rewriter)
        changed |= infer_shapes(ir, registry, trust_seeded=True, rewriter=rewriter) or folded
        if not folded:
            break
    return changed


def value_dependent_shape(ir: Ir, registry: OpRegistry = REGISTRY
                          ) -> tuple[Op, list[Tensor]] | None:
    """The first op (the main graph first, then the subgraphs in id order; ops in schedule
    order) whose shape rule could not decide although every input has a shape, with the
    inputs of its graph whose values reach it; None if there is none, or its undecided
    shape reads no graph input (a weight's values, say)."""
    for graph in _graphs(ir):
        for op in graph.schedule():
            opdef = registry.lookup(op)
            if opdef is None or opdef.infer is None:
                continue  # an opaque op keeps the shapes ONNX gave it
            if all(tensor.shape is not None for tensor in op.outputs):
                continue
            if any(tensor.shape is None for tensor in op.inputs):
                continue
            sources = _graph_inputs_read(_needed_inputs(op, opdef), graph)
            if sources:
                return op, sources
    return None


def _graphs(ir: Ir) -> list[Graph]:
    """The main graph, then the other graphs in id order."""
    main = ir.main_graph
    return [main, *sorted((g for g in ir.graphs if g is not main), key=lambda g: g.id)]


def _held_by(ir: Ir, op: Op, sources: list[Tensor]) -> str:
    """The inputs ``sources`` of ``op``'s graph as a message names them."""
    names = ", ".join(repr(tensor.id) for tensor in sources)
    inputs = f"{'inputs' if len(sources) > 1 else 'input'} {names}"
    return f"graph {inputs}" if op.graph is ir.main_graph else (
        f"{inputs} of subgraph {op.graph.id!r}")


def _needed_inputs(op: Op, opdef: OpDef) -> list[Tensor]:
    """The input whose value ``op``'s shape rule lacks, where it says (``constant_input``
    does); else every input."""
    try:
        opdef.infer(op)
    except ShapeUndecided as undecided:
        needed = [tensor for tensor in op.inputs if tensor.id == undecided.needs]
        if needed:
            return needed[:1]
    except ShapeError:
        pass
    return list(op.inputs)


def _graph_inputs_read(tensors: list[Tensor], graph: Graph) -> list[Tensor]:
    """The graph inputs whose values flow into ``tensors``, in the graph's input order. A
    value known before running (``computed_value``: ``Size(Shape(x))`` reads only ``x``'s
    shape) is not followed back, so such an input is named only where its values count."""
    seen: set[str] = set()
    reached = False
    stack = list(tensors)
    while stack:
        tensor = stack.pop()
        if tensor.id in seen:
            continue
        seen.add(tensor.id)
        reached = reached or tensor.id in graph.input_ids
        if tensor.producer is not None and computed_value(tensor) is None:
            stack += tensor.producer.inputs
    # asked for every op: the inputs are listed only once one is reached
    return [graph.tensor(name) for name in graph.input_ids if name in seen] if reached else []


def _fold_pass(graph: Graph, registry: OpRegistry, rewriter: Rewriter) -> bool:
    """Type and fold each op of ``graph`` in schedule order; True if any op was folded."""
    folded = False
    rewriter.take_record()
    for op in graph.schedule():
        if not _alive(op):
            continue
        infer_op(op, registry, trust_seeded=True, rewriter=rewriter)
        producers = [tensor.producer for tensor in op.inputs if tensor.producer is not None]
        if _fold_values(op, registry, rewriter):
            folded = True
            _erase_unread(producers, registry, rewriter)
    loose = rewriter.take_record()[2]
    remove_dead_constants(graph, loose, rewriter)
    rewriter.take_record()
    return folded


def _fold_values(op: Op, registry: OpRegistry, rewriter: Rewriter) -> bool:
    """Replace ``op`` by the constants its fold computes; False where the fold gives
    nothing, or hands back an existing tensor for some output that is no constant."""
    opdef = registry.lookup(op)
    if opdef is None or opdef.fold is None or opdef.has_side_effects(op) or opdef.random:
        return False
    values = opdef.fold(op, constant_operands(op))
    if values is None:
        return False
    values = [_value_of(value) for value in values]
    if any(isinstance(value, Tensor) for value in values):
        return False
    return rewriter.replace_op(op, values)


def _value_of(value: Tensor | np.ndarray) -> Tensor | np.ndarray:
    """A constant tensor's value (a copy); any other value as it is."""
    if isinstance(value, Tensor) and is_constant(value) and value.data is not None:
        return np.array(value.data)
    return value


def _erase_unread(producers: list[Op], registry: OpRegistry, rewriter: Rewriter) -> None:
    """Erase the producers a fold left unread, and theirs in turn (an ``Unsqueeze`` whose
    value only the folded ``Concat`` read, say)."""
    stack = list(producers)
    while stack:
        producer = stack.pop()
        if not _alive(producer) or not is_dead(producer, registry.lookup(producer)):
            continue
        inputs = list(producer.inputs)
        rewriter.erase_op(producer)
        stack += [tensor.producer for tensor in inputs if tensor.producer is not None]


def _alive(op: Op) -> bool:
    try:
        return op.graph.op(op.id) is op
    except IrError:
        return False


def refuse_value_dependent_shapes(ir: Ir, registry: OpRegistry = REGISTRY) -> None:
    """Refuse a model whose shapes stay unknown after folding because they depend on what
    a graph input holds (a Reshape to a shape read from an input, say), naming the input."""
    found = value_dependent_shape(ir, registry)
    if found is None:
        return
    op, sources = found
    whose = "its" if len(sources) == 1 else "their"
    raise DynamicShapeError(f"the output shape of op {op.debug_name()} depends on the values "
                            f"of {_held_by(ir, op, sources)}, not only on {whose} shapes; "
                            f"shapes must be known before running (export the model with "
                            f"that value fixed)")


def value_dependent_layout(ir: Ir, registry: OpRegistry = REGISTRY
                           ) -> tuple[Op, list[int], list[Tensor]] | None:
    """The first op (graphs and ops in ``value_dependent_shape``'s order) whose layout rule
    needs the values of inputs not known before running (``LayoutRule.undecided_operands``): the op,
    those input indices and the inputs of its graph whose values reach them; None if there
    is none, or the values read no graph input."""
    for graph in _graphs(ir):
        for op in graph.schedule():
            if any(tensor.shape is None for tensor in (*op.inputs, *op.outputs)):
                continue  # an undecided shape is refused as such (or left to the checker)
            indices = registry.layout_rule(op).undecided_operands(op)
            sources = _graph_inputs_read([op.input(i) for i in indices], graph)
            if sources:
                return op, indices, sources
    return None


def refuse_value_dependent_layouts(ir: Ir, registry: OpRegistry = REGISTRY) -> None:
    """Refuse a model with an op whose shapes are known but whose layout needs values a
    graph input holds (a Slice's starts read from an input), naming the op's operands and
    the graph inputs. PopART takes such operands as constants when it builds its IR."""
    found = value_dependent_layout(ir, registry)
    if found is None:
        return
    op, indices, sources = found
    operands = ", ".join(f"{index} ({op.input(index).id!r})" for index in indices)
    values, depend = (("the values of inputs", "they depend") if len(indices) > 1
                      else ("the value of input", "it depends"))
    hold = "hold" if len(sources) > 1 else "holds"
    raise DynamicShapeError(f"op {op.debug_name()} needs {values} {operands} to lay out its "
                            f"result, and {depend} on what {_held_by(ir, op, sources)} {hold}; "
                            f"PopART reads such operands as constants when it builds its IR "
                            f"(export the model with that value fixed)")
