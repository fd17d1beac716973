"""Op family: linear algebra (MatMul, MatMulInteger, Gemm, Einsum, Det), with ONNX semantics.

Shapes come from the project's shape engine (``matmul_shape``, ``einsum_shape``) wherever it
states the rule, an ellipsis anywhere in a term included; Einsum equations of more than two
operands, and those whose result has an ellipsis no operand has while one sits inside a
term, use a direct label-by-label rule.

Layouts: when a MatMul's or Gemm's product is the row-major flattening of a grouped
``[G, M, K] x [G, K, N]`` (``matmul_groups``), each operand is tied to a Source carrying
poplin's ``createMatMulInputLHS/RHS`` layout (the machine's matmul plan) and the result is a
FixedPoint laid out by the plan; Gemm's C is added to the product like an elementwise
partner. Any other product is left a barrier, and so is Det (a determinant per square
matrix of its input; folded with numpy). PopART's ``MatMulOpx`` creates both operands,
at the default creator priority.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np

from popart_unwind.errors import PlanError, ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ir.tensor import Tensor
from popart_unwind.machine.exchange import broadcast_index, read_need
from popart_unwind.machine.interface import (
    ExchangeNeed,
    MatmulCost,
    MatmulPlan,
    TileMachine,
    layout_free_operand,
    plan_operand_readers,
    plan_operand_tiles,
)
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, input_shape
from popart_unwind.ops.elementwise import operand_of_result
from popart_unwind.ops.gradient import (
    GradientBuilder,
    is_differentiable,
    one,
    reshape,
    scalar,
    sum_to_shape,
    swap_last_two,
)
from popart_unwind.ops.layout_rule import (
    InputTiles,
    LayoutRule,
    OpWork,
    UnwindEmitter,
    count_equal,
    count_equal_rows,
    flat_tiles,
    known_shape,
)
from popart_unwind.ops.registry import HIGH_OUTLINE_VALUE, OpDef, register
from popart_unwind.shapes import Shape, broadcast_shapes, einsum_shape, matmul_shape
from popart_unwind.validation import check_proportion

#: Folding stays cheap: at most this many multiply-adds.
FOLD_MAX_FLOPS = 1 << 24


def _same_dtype(op: Op, indices: Sequence[int]) -> str:
    dtypes = {op.input(i).dtype for i in indices if op.has_input(i)}
    if len(dtypes) > 1:
        raise ShapeError(f"op {op.debug_name()}: inputs {list(indices)} must share one dtype, "
                         f"got {sorted(dtypes)}")
    return op.input(indices[0]).dtype


def _engine(op: Op, rule, *shapes) -> tuple[int, ...]:
    """Run a shape-engine rule, naming the op in any error it raises."""
    try:
        return tuple(rule(*shapes))
    except ShapeError as error:
        raise ShapeError(f"op {op.debug_name()}: {error}") from None


# -- MatMul -------------------------------------------------------------------------------
def _infer_matmul(op: Op) -> list:
    shape = _engine(op, matmul_shape, input_shape(op, 0), input_shape(op, 1))
    return [(_same_dtype(op, (0, 1)), shape)]


def _fold_matmul(op: Op, constants) -> list | None:
    a, b = constants[0], constants[1]
    if a is None or b is None:
        return None
    out_shape = op.output(0).shape or matmul_shape(a.shape, b.shape)
    size = math.prod(out_shape)
    if size > FOLD_MAX_ELEMENTS or size * a.shape[-1] > FOLD_MAX_FLOPS:
        return None
    return [np.matmul(a, b).astype(a.dtype)]


def _infer_matmul_integer(op: Op) -> list:
    shape = _engine(op, matmul_shape, input_shape(op, 0), input_shape(op, 1))
    return [("int32", shape)]


# -- Gemm ---------------------------------------------------------------------------------
def _gemm_dims(op: Op) -> tuple[int, int, int]:
    a, b = input_shape(op, 0), input_shape(op, 1)
    for index, shape in ((0, a), (1, b)):
        if len(shape) != 2:
            raise ShapeError(f"op {op.debug_name()}: Gemm input {index} must be 2-D, got "
                             f"{shape}")
    m, k = a[::-1] if op.attributes.get("transA", 0) else a
    k2, n = b[::-1] if op.attributes.get("transB", 0) else b
    if k != k2:
        raise ShapeError(f"op {op.debug_name()}: Gemm contracts {k} columns of A with {k2} "
                         f"rows of B")
    return m, k, n


def _infer_gemm(op: Op) -> list:
    m, _, n = _gemm_dims(op)
    if op.has_input(2):
        c = input_shape(op, 2)
        if _engine(op, broadcast_shapes, c, (m, n)) != (m, n):
            raise ShapeError(f"op {op.debug_name()}: Gemm's C {c} does not broadcast to "
                             f"({m}, {n})")
    return [(_same_dtype(op, (0, 1, 2)), (m, n))]


def _fold_gemm(op: Op, constants) -> list | None:
    a, b = constants[0], constants[1]
    c = constants[2] if len(constants) > 2 else None
    if a is None or b is None or (op.has_input(2) and c is None):
        return None
    m, k, n = _gemm_dims(op)
    if m * n > FOLD_MAX_ELEMENTS or m * n * k > FOLD_MAX_FLOPS:
        return None
    a = a.T if op.attributes.get("transA", 0) else a
    b = b.T if op.attributes.get("transB", 0) else b
    result = op.attributes.get("alpha", 1.0) * np.matmul(a, b)
    if c is not None:
        result = result + op.attributes.get("beta", 1.0) * c
    return [np.asarray(result).astype(a.dtype)]


# -- Det ----------------------------------------------------------------------------------
def _infer_det(op: Op) -> list:
    """X [*, M, M] gives one determinant per matrix: [*]."""
    shape = input_shape(op, 0)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(f"op {op.debug_name()}: X must hold square matrices, got {shape}")
    if op.input(0).dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise ShapeError(f"op {op.debug_name()}: X must be a float tensor")
    return [(op.input(0).dtype, shape[:-2])]


def _fold_det(op: Op, constants: Sequence[np.ndarray | None]) -> list | None:
    x = constants[0]
    if x is None or x.size > FOLD_MAX_ELEMENTS or x.dtype.kind != "f":
        return None
    return [np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)]


# -- Einsum -------------------------------------------------------------------------------
_TERM = re.compile(r"[A-Za-z]*(\.\.\.)?[A-Za-z]*")


def parse_einsum(op: Op, equation: str, count: int) -> tuple[list[str], str]:
    """ONNX's equation as operand terms and the result term (made explicit when implicit:
    the ellipsis first, then the labels used once, in alphabetical order)."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    for term in [*terms, rhs]:
        if not _TERM.fullmatch(term):
            raise ShapeError(f"op {op.debug_name()}: cannot read einsum term {term!r} of "
                             f"{equation!r}")
    if len(terms) != count:
        raise ShapeError(f"op {op.debug_name()}: einsum {equation!r} has {len(terms)} "
                         f"operand term(s) but {count} input(s)")
    if not arrow:
        letters = "".join(terms).replace("...", "")
        once = sorted(label for label in set(letters) if letters.count(label) == 1)
        rhs = ("..." if "..." in lhs else "") + "".join(once)
    return terms, rhs


def _engine_spec(terms: list[str], result: str) -> str | None:
    """The equation in the shape engine's notation, or None where the direct rule serves:
    more than two operands, or an ellipsis inside a term of a result whose ellipsis no
    operand has (NumPy gives it no axes; the engine asks an operand for them)."""
    if len(terms) > 2:
        return None
    inside = any("..." in t and not t.startswith("...") for t in [*terms, result])
    if inside and "..." in result and not any("..." in t for t in terms):
        return None
    return ";".join(terms) + "=>" + result


def _check_ranks(op: Op, terms: list[str], shapes: list[tuple[int, ...]]) -> None:
    """Each operand has one axis per label of its term, and any more only for its ellipsis
    (ONNX and NumPy; the engine alone would broadcast a short operand into its term)."""
    for position, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        head, dots, tail = term.partition("...")
        spread = len(shape) - len(head) - len(tail)
        if spread < 0 or (spread and not dots):
            raise ShapeError(f"op {op.debug_name()}: einsum term {term!r} does not fit "
                             f"operand {position} of shape {shape}")


def _direct_einsum(op: Op, terms: list[str], result: str,
                   shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Label sizes across operands (1 broadcasts), ellipsis parts broadcast NumPy-style."""
    sizes: dict[str, int] = {}
    ellipses = []
    _check_ranks(op, terms, shapes)
    for position, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        head, dots, tail = term.partition("...")
        spread = len(shape) - len(head) - len(tail)
        ellipses.append(shape[len(head):len(head) + spread])
        for label, size in zip(head + tail, shape[:len(head)] + shape[len(head) + spread:],
                               strict=True):
            known = sizes.get(label, 1)
            if size != known and 1 not in (size, known):
                raise ShapeError(f"op {op.debug_name()}: einsum label {label!r} is {known} "
                                 f"in one place and {size} in operand {position}")
            sizes[label] = max(known, size) if label in sizes else size
    ellipsis = _engine(op, broadcast_shapes, *ellipses) if ellipses else ()
    out: list[int] = []
    head, dots, tail = result.partition("...")
    for label in head + ("\0" if dots else "") + tail:
        if label == "\0":
            out += ellipsis
        elif label not in sizes:
            raise ShapeError(f"op {op.debug_name()}: einsum result label {label!r} occurs "
                             f"in no operand")
        else:
            out.append(sizes[label])
    return tuple(out)


def _infer_einsum(op: Op) -> list:
    count = max(op.input_map(), default=-1) + 1
    shapes = [input_shape(op, i) for i in range(count)]
    terms, result = parse_einsum(op, str(op.attributes.get("equation", "")), count)
    _check_ranks(op, terms, shapes)
    spec = _engine_spec(terms, result)
    if spec is not None:
        operands = [Shape(output=shape) for shape in shapes]
        shape = _engine(op, lambda *s: einsum_shape(spec, *s).sizes, *operands)
    else:
        shape = _direct_einsum(op, terms, result, shapes)
    return [(_same_dtype(op, tuple(range(count))), shape)]


def _fold_einsum(op: Op, constants) -> list | None:
    if not constants or any(c is None for c in constants):
        return None
    if math.prod(op.output(0).shape or (FOLD_MAX_ELEMENTS + 1,)) > FOLD_MAX_ELEMENTS:
        return None
    if sum(c.size for c in constants) > FOLD_MAX_ELEMENTS:
        return None
    equation = str(op.attributes["equation"]).replace(" ", "")
    return [np.asarray(np.einsum(equation, *constants)).astype(constants[0].dtype)]


# -- layouts --------------------------------------------------------------------------------
def matmul_groups(lhs: tuple[int, ...], rhs: tuple[int, ...]
                  ) -> tuple[int, int, int, int] | None:
    """(G, M, K, N) when numpy's matmul of these shapes is the row-major flattening of a
    grouped ``[G, M, K] x [G, K, N]``: a 1-D or 2-D rhs (G = 1, M the product of the lhs's
    leading axes) or equal batch axes (G their product). None otherwise (broadcast batch
    axes, which poplin expands first) or for empty operands."""
    if not lhs or not rhs or lhs[-1] != (rhs[0] if len(rhs) == 1 else rhs[-2]):
        return None
    if len(rhs) <= 2:
        dims = (1, prod(lhs[:-1]), lhs[-1], rhs[-1] if len(rhs) == 2 else 1)
    elif len(lhs) == len(rhs) and lhs[:-2] == rhs[:-2]:
        dims = (prod(lhs[:-2]), lhs[-2], lhs[-1], rhs[-1])
    else:
        return None
    return dims if min(dims) > 0 else None


#: The layout a matmul-like op's creator gives its input ``index`` (flat tiles).
Created = Callable[[Op, int, TileMachine], np.ndarray]
#: The matmul plan computing a matmul-like op.
PlanOf = Callable[[Op, TileMachine], MatmulPlan]

#: The plan operand each of a matmul-like op's inputs 0 and 1 is.
PLAN_OPERANDS = ("lhs", "rhs")


def operand_value(op: Op, index: int, target: TileMachine, plan_of: PlanOf,
                  value: float) -> float:
    """What an element of input ``index`` laid out as its creator would put it is worth:
    ``value``, or nothing when the plan's tiles receive the same bytes of it wherever it
    lies (``layout_free_operand``: a weight broadcast to super-tile pairs), so the planner
    may lay it out for its other readers at no cost to the matmul."""
    plan = plan_of(op, target)
    return 0.0 if layout_free_operand(target, plan, PLAN_OPERANDS[index]) else value


def tie_created_operands(op: Op, emitter: UnwindEmitter, created: Created, plan_of: PlanOf,
                         names: tuple[str, str]) -> list[Any]:
    """Inputs 0 and 1 of a matmul-like op, each tied by a ``matmul`` pair to a Source with
    the layout its creator makes (``created(op, index, target)``), worth what
    ``operand_value`` says; their unwind tensors."""
    operands = [emitter.tensor(op.input(i)) for i in (0, 1)]
    for index, operand in enumerate(operands):
        source = emitter.source(
            op.input(index), lambda target, index=index: created(op, index, target),
            f"{op.debug_name()} {names[index]}")
        value = operand_value(op, index, emitter.target, plan_of, emitter.valuations.matmul)
        emitter.graph.valued_pair(operand, source, value)
    return operands


def created_agreement(op: Op, input_tiles: InputTiles, target: TileMachine, value: float,
                      created: Created, plan_of: PlanOf) -> tuple[float, float]:
    """The ``matmul`` pairs of inputs 0 and 1 scored on concrete tiles: (what the elements
    lying as their creator would put them are worth, what all are worth), each element
    worth ``operand_value``."""
    score = bound = 0.0
    for index in (0, 1):
        worth = operand_value(op, index, target, plan_of, value)
        bound += worth * op.input(index).nelms()
        tiles = flat_tiles(input_tiles, index)
        if tiles is not None and worth:
            score += worth * count_equal(tiles, created(op, index, target))
    return score, bound


def is_matmul_or_gemm(op: Op) -> bool:
    """Whether ``op`` is a MatMul or a Gemm, the ops PopART reads as MatMuls (it turns a
    Gemm into one when it reads ONNX)."""
    return op.is_type("MatMul") or op.is_type("Gemm")


def is_gemm_with_transposed_rhs(op: Op) -> bool:
    """Whether ``op`` is a Gemm reading its right-hand operand transposed (``transB``)."""
    return op.is_type("Gemm") and bool(op.attributes.get("transB", 0))


def op_key(op: Op) -> tuple[str, int]:
    """How plans name an op: (graph id, op id)."""
    return (op.graph.id, op.id)


#: PopART's per-op availableMemoryProportion, as its Builder writes it on an op
#: (``Builder::setAvailableMemoryProportion``).
MEMORY_PROPORTION_ATTRIBUTE = "__available_memory_proportion"


def op_memory_proportion(op: Op) -> float | None:
    """The share of a tile's memory ``op``'s matmul or convolution plan may take for its
    temporary data, when the op sets one (PopART's per-op availableMemoryProportion,
    which overrides the session's for that op); None when it does not."""
    value = op.attributes.get(MEMORY_PROPORTION_ATTRIBUTE)
    if value is None:
        return None
    check_proportion(value, f"op {op.debug_name()}'s {MEMORY_PROPORTION_ATTRIBUTE}",
                     ShapeError)
    return float(value)


def chosen_or_alone(op: Op, dims: tuple[int, int, int, int], dtype: str,
                    target: TileMachine) -> MatmulPlan:
    """The plan ``target`` was given for ``op`` (``chosen_plan``), which must compute the
    grouped matmul ``dims``, or ``dims`` planned alone (its cheapest partition, within the
    op's own memory proportion if it sets one)."""
    chosen = target.chosen_plan(op_key(op))
    if chosen is None:
        proportion = op_memory_proportion(op)
        return MatmulPlan(dims, target.matmul_plan(*dims, dtype, proportion),
                          memory_proportion=proportion)
    if chosen.dims != dims:
        raise PlanError(f"op {op.debug_name()}: its plan computes {list(chosen.dims)}, the "
                        f"op is the grouped matmul {list(dims)}")
    return chosen


class MatMulRule(LayoutRule):
    """MatMul: grouped products only (``matmul_groups``); any other product is a barrier.

    The product is computed by the op's matmul plan (``plan``): the one chosen for it by
    the plans the machine was given (a pass of a fully connected layer planned with its
    other passes), or else the op's own cheapest partition. Operand and result layouts are
    those of the plan's cube tensors, in the op's own orientation."""

    kind = "matmul"

    def dims(self, op: Op) -> tuple[int, int, int, int] | None:
        """(G, M, K, N) of the grouped product, or None if the op is not one."""
        return matmul_groups(known_shape(op, op.input(0)), known_shape(op, op.input(1)))

    def transposed(self, op: Op, index: int) -> bool:
        """Whether operand ``index`` enters the product transposed."""
        return False

    def bias(self, op: Op) -> Tensor | None:
        """A tensor added to the product (Gemm's C)."""
        return None

    def plan(self, op: Op, target: TileMachine) -> MatmulPlan:
        """The plan chosen for ``op`` (``target.chosen_plan``), or its cheapest alone."""
        dims = self.dims(op)
        if dims is None:
            raise PlanError(f"op {op.debug_name()} is not a grouped matmul and has no plan")
        return chosen_or_alone(op, dims, op.input(0).dtype, target)

    def cost(self, op: Op, target: TileMachine) -> MatmulCost | None:
        """What the op's plan costs, or None for a product that is not a grouped matmul."""
        if self.dims(op) is None:
            return None
        plan = self.plan(op, target)
        return target.matmul_cost(*plan.dims, op.input(0).dtype, plan.own_partition,
                                  plan.shared_operand, plan.memory_proportion)

    def plan_record(self, op: Op, target: TileMachine) -> dict[str, Any] | None:
        return None if self.dims(op) is None else self.plan(op, target).describe()

    def has_plan(self, op: Op) -> bool:
        """A grouped product (``dims``); any other is a barrier without a plan."""
        return self.dims(op) is not None

    def work(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
             target: TileMachine) -> OpWork:
        """The plan's multiply-accumulates and partial-sum exchange (not counted: adding
        a Gemm's C)."""
        cost = self.cost(op, target)
        if cost is None:
            return super().work(op, input_tiles, output_tiles, target)
        return OpWork(cost.compute_cycles, cost.reduction_cycles)

    def _plan_tiles(self, op: Op, operand: str, target: TileMachine) -> np.ndarray:
        """The plan's layout of the op's ``operand`` ("lhs", "rhs", "output") in the op's
        grouped orientation, flat."""
        return plan_operand_tiles(target, self.plan(op, target), operand, op.input(0).dtype)

    def operand_tiles(self, op: Op, index: int, target: TileMachine) -> np.ndarray:
        """The matmul plan's layout of input ``index`` (0: lhs, 1: rhs) in the input's own
        shape, flat (a transposed operand gets the transposed layout)."""
        dims = self.dims(op)
        if dims is None or index not in (0, 1):
            raise PlanError(f"op {op.debug_name()}: input {index} is not a grouped matmul "
                            f"operand")
        tiles = self._plan_tiles(op, ("lhs", "rhs")[index], target)
        if self.transposed(op, index):
            _, m, k, n = dims
            grid = tiles.reshape((m, k) if index == 0 else (k, n))
            tiles = np.ascontiguousarray(grid.T).reshape(-1)
        return tiles

    def wanted_input_tiles(self, op: Op, in_index: int,
                           target: TileMachine) -> np.ndarray | None:
        """What poplin's createMatMulInputLHS/RHS would give input ``in_index``."""
        if in_index not in (0, 1) or self.dims(op) is None:
            return None
        return self.operand_tiles(op, in_index, target)

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """poplin's createMatMulInputLHS/RHS, at PopART's default creator priority (0)."""
        return 0 if in_index in (0, 1) and self.dims(op) is not None else None

    def _agreeing(self, op: Op, index: int, tiles: np.ndarray, target: TileMachine) -> int:
        """How many elements of operand ``index`` lie where the plan wants them
        (``operand_tiles``), a transposed operand compared through a transposed view
        rather than a transposed copy."""
        wanted = self._plan_tiles(op, ("lhs", "rhs")[index], target)
        if not self.transposed(op, index):
            return count_equal(tiles, wanted)
        _, m, k, n = self.dims(op)  # type: ignore[misc]
        grid = wanted.reshape((m, k) if index == 0 else (k, n))
        return count_equal_rows(np.asarray(tiles).reshape(grid.shape[::-1]), grid.T)

    def _grouped(self, op: Op, index: int, tiles: np.ndarray) -> np.ndarray:
        """Operand tiles in the grouped [G, M, K] / [G, K, N] order (undo a transpose)."""
        tiles = np.asarray(tiles).reshape(-1)
        if self.transposed(op, index):
            tiles = np.ascontiguousarray(tiles.reshape(known_shape(op, op.input(index))).T)
        return tiles.reshape(-1)

    def _product_tiles(self, op: Op, target: TileMachine) -> np.ndarray:
        return self._plan_tiles(op, "output", target)

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        if self.dims(op) is None:
            emitter.barrier(op)
            return
        graph, values = emitter.graph, emitter.valuations
        operands = tie_created_operands(op, emitter, self.operand_tiles, self.plan,
                                        ("lhs", "rhs"))
        out = op.output(0)
        [product] = emitter.fixed_point(operands, [known_shape(op, out)],
                                        [lambda target: self._product_tiles(op, target)],
                                        f"{op.debug_name()} output")
        bias = self.bias(op)
        if bias is None:
            emitter.define(out, product)
            return
        full = [0, 1] if known_shape(op, bias) == known_shape(op, out) else [0]
        value = values.elementwise if len(full) == 2 else values.bias
        result = graph.sum_like([product, emitter.tensor(bias)], full,
                                {"default": value}, name=out.id)
        emitter.define(out, result.out)

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        if self.dims(op) is None:
            return super().output_tiles(op, input_tiles, target)
        product = self._product_tiles(op, target)
        bias = self.bias(op)
        bias_tiles = flat_tiles(input_tiles, 2)
        if bias is None or bias_tiles is None \
                or known_shape(op, bias) != known_shape(op, op.output(0)):
            return [product]
        return [[product, bias_tiles][target.elementwise_output([product, bias_tiles])].copy()]

    def exchange(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                 target: TileMachine, grouped: frozenset[int] = frozenset()) -> ExchangeNeed:
        """What the plan's tiles receive of the operands and the result's of a bias; the
        operands in ``grouped`` are given in the grouped [G, M, K] / [G, K, N] order
        already (no transpose to undo)."""
        dims = self.dims(op)
        if dims is None:
            return super().exchange(op, input_tiles, output_tiles, target)
        plan = self.plan(op, target)
        need = ExchangeNeed.none(target.num_tiles)
        for index, operand in enumerate(("lhs", "rhs")):
            tiles = flat_tiles(input_tiles, index)
            if tiles is not None:
                tiles = tiles if index in grouped else self._grouped(op, index, tiles)
                need = need + plan_operand_readers(target, plan, operand, op.input(0).dtype,
                                                   tiles)
        bias, bias_tiles = self.bias(op), flat_tiles(input_tiles, 2)
        if bias is not None and bias_tiles is not None:
            out_shape = known_shape(op, op.output(0))
            need = need + read_need(np.asarray(output_tiles[0]).reshape(-1),
                                    broadcast_index(known_shape(op, bias), out_shape),
                                    bias_tiles, target.dtype_size(bias.dtype), target.num_tiles)
        return need

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations: Any) -> tuple[float, float]:
        if self.dims(op) is None:
            return 0.0, 0.0
        score = bound = 0.0
        for index in (0, 1):  # the created_agreement of the operands, without copies
            worth = operand_value(op, index, target, self.plan, valuations.matmul)
            bound += worth * op.input(index).nelms()
            tiles = flat_tiles(input_tiles, index)
            if tiles is not None and worth:
                score += worth * self._agreeing(op, index, tiles, target)
        bias = self.bias(op)
        if bias is not None:
            out_shape, shape = known_shape(op, op.output(0)), known_shape(op, bias)
            product, tiles = self._product_tiles(op, target), flat_tiles(input_tiles, 2)
            value = valuations.elementwise if shape == out_shape else valuations.bias
            bound += value * prod(shape)
            if tiles is not None:
                wanted = product if shape == out_shape else target.broadcast_operand_tiles(
                    product, out_shape, shape)
                score += value * count_equal(tiles, wanted)
        return score, bound

    def least_received(self, op: Op, input_tiles: InputTiles, output_tiles: list[np.ndarray],
                       planned: set[int], target: TileMachine) -> int:
        """The default bound (each planned input as ``best_input_tiles`` wants it), the
        operands taken in the plan's own grouped order: a transposed operand is not
        transposed into the op's order only to be transposed back (a 103 M-element fully
        connected weight: two 200 MB copies)."""
        if self.dims(op) is None:
            return super().least_received(op, input_tiles, output_tiles, planned, target)
        # a planned operand is replaced below: not read (a large one is expanded per read)
        best = [None if index in planned and index in (0, 1) else input_tiles[index]
                for index in range(len(input_tiles))]
        grouped = set()
        for index in sorted(planned):
            if index in (0, 1):
                best[index] = self._plan_tiles(op, ("lhs", "rhs")[index], target)
                grouped.add(index)
            elif index < len(best):
                wanted = self.best_input_tiles(op, index, output_tiles, target)
                if wanted is not None:
                    best[index] = np.asarray(wanted).reshape(-1)
        need = self.exchange(op, best, output_tiles, target, frozenset(grouped))
        return int(np.asarray(need.received_bytes).sum())

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """Operands as the matmul plan wants them (no rearrangement, and each element
        already on one of its readers); a bias as an elementwise operand of the result."""
        if self.dims(op) is None:
            return None
        if index in (0, 1):
            return self.operand_tiles(op, index, target)
        bias = self.bias(op)
        if index == 2 and bias is not None:
            return operand_of_result(op, bias, output_tiles[0], target)
        return None


class GemmRule(MatMulRule):
    """Gemm: 2-D A and B, each possibly transposed, and a C broadcast onto the product."""

    def dims(self, op: Op) -> tuple[int, int, int, int] | None:
        a, b = known_shape(op, op.input(0)), known_shape(op, op.input(1))
        if len(a) != 2 or len(b) != 2:
            return None
        rows, inner = a[::-1] if self.transposed(op, 0) else a
        inner_b, cols = b[::-1] if self.transposed(op, 1) else b
        return (1, rows, inner, cols) if inner == inner_b and min(rows, inner, cols) else None

    def transposed(self, op: Op, index: int) -> bool:
        return bool(op.attributes.get("transA" if index == 0 else "transB", 0))

    def bias(self, op: Op) -> Tensor | None:
        return op.input(2) if op.has_input(2) else None


# -- gradients ------------------------------------------------------------------------------
def inherited_options(op: Op) -> dict[str, Any]:
    """The attributes a gradient's matmuls and convolutions take from the forward op: its
    per-op memory proportion, as PopART's MatMul and Conv grad ops take the forward op's."""
    if MEMORY_PROPORTION_ATTRIBUTE in op.attributes:
        return {MEMORY_PROPORTION_ATTRIBUTE: op.attributes[MEMORY_PROPORTION_ATTRIBUTE]}
    return {}


def _matmul_gradient(builder: GradientBuilder, op: Op,
                     grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """``Y = A @ B``: ``dA = dY @ Bᵀ`` and ``dB = Aᵀ @ dY``, each summed over the batch
    axes its operand was broadcast along (PopART's MatMulLhsGradOp and MatMulRhsGradOp).
    A 2-D weight read by a batched operand gets its gradient from one matmul over the
    flattened rows, ``[K, rows] x [rows, N]``, the weight-gradient pass of the layer's cube,
    as Poplibs' fully connected pass computes it (no batch of products to sum after).
    Vector operands (rank 1) are read as a row or a column, as ONNX's MatMul reads them."""
    grad = grads[0]
    a, b = op.input(0), op.input(1)
    if grad is None:
        return [None, None]
    a2 = reshape(builder, a, (1, *a.shape)) if len(a.shape) == 1 else a
    b2 = reshape(builder, b, (*b.shape, 1)) if len(b.shape) == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    g2 = reshape(builder, grad, (*batch, a2.shape[-2], b2.shape[-1]))
    grad_a = grad_b = None
    options = inherited_options(op)
    if is_differentiable(a):
        product = one(builder, "MatMul", [g2, swap_last_two(builder, b2)], options)
        grad_a = reshape(builder, sum_to_shape(builder, product, a2.shape), a.shape)
    if is_differentiable(b):
        if len(b2.shape) == 2 and len(a2.shape) > 2:
            rows = reshape(builder, a2, (-1, a2.shape[-1]))
            outs = reshape(builder, g2, (-1, g2.shape[-1]))
            product = one(builder, "MatMul", [swap_last_two(builder, rows), outs], options)
        else:
            product = one(builder, "MatMul", [swap_last_two(builder, a2), g2], options)
        grad_b = reshape(builder, sum_to_shape(builder, product, b2.shape), b.shape)
    return [grad_a, grad_b]


def _gemm_gradient(builder: GradientBuilder, op: Op,
                   grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """``Y = alpha · op(A) op(B) + beta · C``: each operand's gradient as a Gemm of ``dY``
    with the other operand (its transposes folded into the Gemm's flags), and C's as
    ``beta · dY`` summed to C's shape."""
    grad = grads[0]
    if grad is None:
        return [None, None, None]
    a, b = op.input(0), op.input(1)
    alpha = float(op.attributes.get("alpha", 1.0))
    beta = float(op.attributes.get("beta", 1.0))
    trans_a = bool(op.attributes.get("transA", 0))
    trans_b = bool(op.attributes.get("transB", 0))
    result: list[Tensor | None] = [None, None, None]
    if is_differentiable(a):
        # dA' = dY Bᵀ' ; stored transposed when transA
        inputs = [b, grad] if trans_a else [grad, b]
        flags = {"transA": int(trans_b), "transB": 1} if trans_a else \
            {"transA": 0, "transB": int(not trans_b)}
        result[0] = one(builder, "Gemm", inputs,
                        {"alpha": alpha, **flags, **inherited_options(op)})
    if is_differentiable(b):
        inputs = [grad, a] if trans_b else [a, grad]
        flags = {"transA": 1, "transB": int(trans_a)} if trans_b else \
            {"transA": int(not trans_a), "transB": 0}
        result[1] = one(builder, "Gemm", inputs,
                        {"alpha": alpha, **flags, **inherited_options(op)})
    if op.has_input(2) and is_differentiable(op.input(2)):
        scaled = grad if beta == 1.0 else one(builder, "Mul", [grad, scalar(builder, beta,
                                                                             grad)])
        result[2] = sum_to_shape(builder, scaled, op.input(2).shape)
    return result


register(OpDef("MatMul", infer=_infer_matmul, fold=_fold_matmul, layout=MatMulRule(),
               outline_value=HIGH_OUTLINE_VALUE, gradient=_matmul_gradient))
register(OpDef("MatMulInteger", infer=_infer_matmul_integer, outline_value=HIGH_OUTLINE_VALUE))
register(OpDef("Gemm", infer=_infer_gemm, fold=_fold_gemm, layout=GemmRule(),
               outline_value=HIGH_OUTLINE_VALUE, gradient=_gemm_gradient))
register(OpDef("Det", infer=_infer_det, fold=_fold_det))
register(OpDef("Einsum", infer=_infer_einsum, fold=_fold_einsum,
               outline_value=HIGH_OUTLINE_VALUE))
