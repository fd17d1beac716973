"""The fully connected layers of a training step: each forward matmul with the matmuls that
compute its gradients.

PopART's autodiff builds the gradients of a MatMul itself and marks each op with its phase
(``MatMulBaseOp::Phase``: Fwd, BwdLHS, BwdRHS), which its MatMulOpx hands to Poplibs as the
``fullyConnectedPass`` option, so that the three passes of a layer are planned on one cube
of work [G, M, K, N] (``machine.interface.MatmulPlan``). A training step exported from
PyTorch has lost those marks: its gradients are plain MatMuls. They are recovered here from
structure. Each operand is followed back through bijective views (reshapes, transposes) to
a base tensor. Walking the schedule, each matmul not yet in a layer is a forward pass; its
backward pass is a matmul that reads the same weight as the cube's RHS and contracts over
N, its weight update one that reads the same activation as the cube's LHS and contracts
over M, and the two read one output gradient. Which cube tensor a shared operand is, not
merely the shared base, tells a layer's passes from sibling forward matmuls reading one
input (Q, K, V projections) or one weight.
"""

from __future__ import annotations

import dataclasses

from popart_unwind.errors import PlanError
from popart_unwind.ir.graph import Graph
from popart_unwind.ir.ir import Ir
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.layers.operand_views import (
    OperandView,
    equal_constants,
    permutation_form,
    view_of,
)
from popart_unwind.layers.plan_options import PassOp
from popart_unwind.machine.interface import cube_tensor, pass_dims
from popart_unwind.memory import Chain
from popart_unwind.ops.linalg import MatMulRule, op_memory_proportion
from popart_unwind.ops.registry import REGISTRY, OpRegistry

#: The forward pass's axes: the cube is the forward op's own product.
FWD_AXES = "mkn"
#: Axes of the backward pass (the gradient of the forward lhs: contracts over n), in the
#: order they are tried: dY @ W^T -> dX, or W @ dY^T -> dX^T.
BWD_AXES = ("mnk", "knm")
#: Axes of the weight update (the gradient of the forward rhs: contracts over m), in the
#: order they are tried: X^T @ dY -> dW, or dY^T @ X -> dW^T (PyTorch's Linear backward).
WU_AXES = ("kmn", "nmk")
#: The op inputs that are matmul operands.
OPERANDS = ("lhs", "rhs")


@dataclasses.dataclass(frozen=True)
class FullyConnectedLayer:
    """A forward matmul and the matmuls computing the gradients of its operands, which
    share its cube of work; ``axes`` gives each op present its ``MatmulPlan.axes``."""

    fwd: Op
    bwd: Op | None  # computes the gradient of fwd's lhs
    wu: Op | None  # computes the gradient of fwd's rhs
    cube: tuple[int, int, int, int]  # fwd's own (G, M, K, N)
    axes: tuple[tuple[int, str], ...]  # (op id, axes) for each op present, fwd first
    #: The cube tensors ("lhs", "rhs", "output") that are views of producer-less tensors
    #: (weights, inputs, constants): the ones a layout plan decides.
    producerless: frozenset[str] = frozenset()
    #: The producer-less tensor the "rhs" cube tensor is a view of (the weights), if any:
    #: where the layer's optimizer states are found.
    weights: str | None = None

    #: Poplibs plans a fully connected layer's passes together (``fullyConnectedPass``).
    poplibs_joint = True

    def tensor_elements(self, name: str) -> int:
        """Elements of the tensor that cube tensor ``name`` ("lhs", "rhs", "output") is."""
        g, m, k, n = self.cube
        return {"lhs": g * m * k, "rhs": g * k * n, "output": g * m * n}[name]

    def ops(self) -> list[Op]:
        """The ops present: fwd, bwd, wu, in that order."""
        return [op for op in (self.fwd, self.bwd, self.wu) if op is not None]

    @property
    def memory_proportion(self) -> float | None:
        """The layer's own bound on its plans' temporary memory: the smallest its ops set
        (PopART's per-op availableMemoryProportion, which its MatMul grad ops take from
        the forward op), or None when none sets one."""
        return min((found for op in self.ops()
                    if (found := op_memory_proportion(op)) is not None), default=None)

    def passes(self) -> tuple[list[Op], list[PassOp]]:
        """The ops present and the pass each computes (its Poplibs name and cube axes)."""
        ops = self.ops()
        names = {id(self.fwd): "TRAINING_FWD", id(self.bwd): "TRAINING_BWD",
                 id(self.wu): "TRAINING_WU"}
        return ops, [PassOp(names[id(op)], self.axes_of(op)) for op in ops]

    def axes_of(self, op: Op) -> str:
        """Which cube axes ``op``'s rows, inner axis and columns are."""
        for op_id, axes in self.axes:
            if op_id == op.id:
                return axes
        raise PlanError(f"op {op.debug_name()} is no pass of the layer of "
                        f"{self.fwd.debug_name()}")


@dataclasses.dataclass(frozen=True)
class GroupedMatmul:
    """A matmul op whose product is a grouped one, with its place in the schedule."""

    op: Op
    position: int
    dims: tuple[int, int, int, int]
    operands: tuple[OperandView, OperandView]


@dataclasses.dataclass(frozen=True)
class Pass:
    """A matmul computing one pass of a layer, and its axes in the layer's cube."""

    matmul: GroupedMatmul
    axes: str


# -- operands in the cube's orientation -------------------------------------------------------
def grouped_operand(op: Op, index: int, rule: MatMulRule, dims: tuple[int, int, int, int],
                    registry: OpRegistry) -> OperandView:
    """Input ``index`` (0 lhs, 1 rhs) as a view reshaped to [G, M, K] or [G, K, N], a
    transposition the op applies (Gemm's transA/transB) included."""
    view = view_of(op.input(index), registry)
    chain = view.chain.copy()
    if rule.transposed(op, index):
        rank = len(chain.out_shape)
        chain.dim_shuffle((*range(rank - 2), rank - 1, rank - 2))
    groups, rows, inner, cols = dims
    grouped = (groups, rows, inner) if index == 0 else (groups, inner, cols)
    if chain.out_shape != grouped:
        chain.reshape(grouped)
    return OperandView(view.base, chain)


def grouped_matmul(op: Op, position: int, registry: OpRegistry) -> GroupedMatmul | None:
    """``op`` as a grouped matmul, or None if it is not one (or a shape is unknown)."""
    rule = registry.layout_rule(op)
    if not isinstance(rule, MatMulRule) or not (op.has_input(0) and op.has_input(1)):
        return None
    if op.input(0).shape is None or op.input(1).shape is None:
        return None
    dims = rule.dims(op)
    if dims is None:
        return None
    return GroupedMatmul(op, position, dims, (grouped_operand(op, 0, rule, dims, registry),
                                              grouped_operand(op, 1, rule, dims, registry)))


# -- one graph's matmuls ------------------------------------------------------------------------
class GraphMatmuls:
    """The grouped matmuls of one graph in schedule order, indexed by the base tensors
    their operands view, with the canonical cube-oriented chains compared so far."""

    def __init__(self, graph: Graph, registry: OpRegistry) -> None:
        self.matmuls: list[GroupedMatmul] = []
        self.readers: dict[str, list[GroupedMatmul]] = {}  # base tensor id -> matmuls
        self._forms: dict[tuple[int, int, bool], tuple | None] = {}
        for position, op in enumerate(graph.schedule()):
            matmul = grouped_matmul(op, position, registry)
            if matmul is None or op.settings.serialized is not None:
                continue  # a serialized layer's pieces are paired by their record
            self.matmuls.append(matmul)
            for base_id in dict.fromkeys(view.base.id for view in matmul.operands):
                self.readers.setdefault(base_id, []).append(matmul)

    def cube_chain(self, matmul: GroupedMatmul, index: int, transposed: bool) -> Chain:
        """The chain from operand ``index``'s base to the cube tensor it is."""
        chain = matmul.operands[index].chain.copy()
        if transposed:
            chain.dim_shuffle((0, 2, 1))
        return chain

    def cube_permutation(self, matmul: GroupedMatmul, index: int,
                         transposed: bool) -> tuple | None:
        """Which base element each element of the cube tensor is, in a normal form
        (:func:`permutation_form`), remembered per operand."""
        key = (matmul.op.id, index, transposed)
        if key not in self._forms:
            self._forms[key] = permutation_form(self.cube_chain(matmul, index, transposed))
        return self._forms[key]

    def same_cube_tensor(self, cube: tuple[int, int, int, int], name: str,
                         first: Pass, second: Pass) -> bool:
        """Whether the two passes read the same elements, in the same order, as cube
        tensor ``name``."""
        first_index, first_transposed = operand_as(cube, first.axes, name)
        second_index, second_transposed = operand_as(cube, second.axes, name)
        first_base = first.matmul.operands[first_index].base
        second_base = second.matmul.operands[second_index].base
        first_chain = self.cube_chain(first.matmul, first_index, first_transposed)
        second_chain = self.cube_chain(second.matmul, second_index, second_transposed)
        if first_base is second_base:
            form = self.cube_permutation(first.matmul, first_index, first_transposed)
            return form is not None and form == self.cube_permutation(
                second.matmul, second_index, second_transposed)
        return equal_constants(first_base, first_chain, second_base, second_chain)

    def passes(self, forward: GroupedMatmul, shared: str, options: tuple[str, ...],
               assigned: set[int]) -> list[Pass]:
        """The unassigned matmuls that can compute a pass of ``forward``'s layer reading
        cube tensor ``shared`` as ``forward`` does, in schedule order, each with the first
        of ``options`` that fits."""
        cube, fwd = forward.dims, Pass(forward, FWD_AXES)
        index, _ = operand_as(cube, FWD_AXES, shared)
        found = []
        for matmul in self.readers.get(forward.operands[index].base.id, ()):
            if matmul is forward or matmul.op.id in assigned:
                continue
            for axes in options:
                candidate = Pass(matmul, axes)
                if matmul.dims == pass_dims(cube, axes) \
                        and self.same_cube_tensor(cube, shared, fwd, candidate):
                    found.append(candidate)
                    break
        return found


def operand_as(cube: tuple[int, int, int, int], axes: str, name: str) -> tuple[int, bool]:
    """Which input (0 lhs, 1 rhs) of an op computing ``axes`` of ``cube`` is cube tensor
    ``name``, and whether the op holds it transposed."""
    for index, operand in enumerate(OPERANDS):
        tensor, transposed = cube_tensor(axes, operand)
        if tensor == name:
            return index, transposed
    raise PlanError(f"cube tensor {name!r} is no input of a pass with axes {axes!r}")


# -- pairing ------------------------------------------------------------------------------------
def choose_passes(matmuls: GraphMatmuls, cube: tuple[int, int, int, int], bwds: list[Pass],
                  wus: list[Pass]) -> tuple[Pass | None, Pass | None]:
    """The backward pass and weight update of one layer: the earliest pair that reads one
    output gradient, else the earliest pass alone."""
    if not bwds or not wus:
        return (bwds[0] if bwds else None), (wus[0] if wus else None)
    for bwd in bwds:
        for wu in wus:
            if bwd.matmul is not wu.matmul \
                    and matmuls.same_cube_tensor(cube, "output", bwd, wu):
                return bwd, wu
    if bwds[0].matmul.position < wus[0].matmul.position:
        return bwds[0], None
    return None, wus[0]


def layer_of(matmuls: GraphMatmuls, forward: GroupedMatmul,
             assigned: set[int]) -> FullyConnectedLayer | None:
    """``forward``'s layer among the unassigned matmuls, or None if no pass is found."""
    cube = forward.dims
    bwd, wu = choose_passes(matmuls, cube, matmuls.passes(forward, "rhs", BWD_AXES, assigned),
                            matmuls.passes(forward, "lhs", WU_AXES, assigned))
    if bwd is None and wu is None:
        return None
    present = [(forward.op.id, FWD_AXES)]
    present += [(p.matmul.op.id, p.axes) for p in (bwd, wu) if p is not None]
    bases = {name: forward.operands[operand_as(cube, FWD_AXES, name)[0]].base
             for name in OPERANDS}
    gradient = bwd or wu
    if gradient is not None:
        index, _ = operand_as(cube, gradient.axes, "output")
        bases["output"] = gradient.matmul.operands[index].base
    producerless = frozenset(name for name, base in bases.items() if base.producer is None)
    return FullyConnectedLayer(forward.op, bwd.matmul.op if bwd else None,
                               wu.matmul.op if wu else None, cube, tuple(present),
                               producerless, _weights(bases["rhs"]))


def piece_layers(graph: Graph, registry: OpRegistry) -> list[FullyConnectedLayer]:
    """The layers SerializeMatMuls cut: the pieces of one index of one layer
    (``OpSettings.serialized``), each pass cut along the same cube axis, form a layer on
    the piece's cube, as Poplibs plans each piece with its pass. A group whose forward
    piece is gone (pruned) is no layer."""
    groups: dict[tuple[int, int], dict[str, Op]] = {}
    for op in graph.schedule():
        if op.settings.serialized is not None:
            layer, index, axes = op.settings.serialized
            groups.setdefault((layer, index), {})[axes] = op
    layers = []
    for members in groups.values():
        fwd = members.get(FWD_AXES)
        dims = None if fwd is None else registry.layout_rule(fwd).dims(fwd)
        if fwd is None or dims is None:
            continue
        bwd = next((members[a] for a in BWD_AXES if a in members), None)
        wu = next((members[a] for a in WU_AXES if a in members), None)
        present = tuple((op.id, axes) for axes, op in members.items()
                        if op in (fwd, bwd, wu))
        present = tuple(sorted(present, key=lambda item: item[1] != FWD_AXES))
        producerless = frozenset(
            name for name, index in (("lhs", 0), ("rhs", 1))
            if _stored_base(fwd.input(index), registry).producer is None)
        layers.append(FullyConnectedLayer(fwd, bwd, wu, dims, present, producerless,
                                          _weights(_stored_base(fwd.input(1), registry))))
    return layers


def _weights(base: Tensor) -> str | None:
    """``base``'s id when it is producer-less (the layer's weights), else None."""
    return base.id if base.producer is None else None


def _stored_base(tensor: Tensor, registry: OpRegistry) -> Tensor:
    """The tensor whose memory ``tensor`` views, through any views (slices included)."""
    while tensor.producer is not None and tensor.producer.has_input(0) \
            and registry.layout_rule(tensor.producer).aliases_outputs(tensor.producer):
        tensor = tensor.producer.input(0)
    return tensor


def graph_layers(graph: Graph, registry: OpRegistry) -> list[FullyConnectedLayer]:
    """The layers of one graph: walking its schedule, each matmul not yet in a layer is a
    forward pass, so the earliest op of a layer is its forward one; with them the layers
    of the pieces of serialized layers (``piece_layers``), all in the schedule order of
    their forward ops."""
    matmuls = GraphMatmuls(graph, registry)
    assigned: set[int] = set()
    pieces = piece_layers(graph, registry)
    layers = []
    for forward in matmuls.matmuls:
        if forward.op.id in assigned:
            continue
        layer = layer_of(matmuls, forward, assigned)
        if layer is not None:
            layers.append(layer)
            assigned.update(op.id for op in layer.ops())
    if pieces:
        position = {op.id: k for k, op in enumerate(graph.schedule())}
        layers = sorted([*layers, *pieces], key=lambda layer: position[layer.fwd.id])
    return layers


def fully_connected_layers(ir: Ir, registry: OpRegistry = REGISTRY
                           ) -> list[FullyConnectedLayer]:
    """The fully connected layers of every graph of ``ir``, graph by graph, each graph's in
    the schedule order of their forward ops. A forward matmul with neither gradient
    found is no layer (it is planned alone)."""
    return [layer for graph in ir.graphs for layer in graph_layers(graph, registry)]
