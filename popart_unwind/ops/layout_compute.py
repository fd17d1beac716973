"""Layout rules of the computing ops the planner models: elementwise ops, MatMul/Gemm and
Gather (the embedding lookup).

- Elementwise (unary, Cast, broadcasting binary/variadic ops, Where): the unwinding problem
  gets a ``sum_like``; inputs of the output's shape are elementwise partners, each smaller
  (numpy-broadcast) input is tied to the Poplibs broadcast-operand layout of the first full
  one. Poplar lays the result out like the best-balanced full-shape input.
- MatMul/Gemm (when the product is the row-major flattening of a grouped
  ``[G, M, K] x [G, K, N]``): each operand is tied to a Source carrying poplin's
  ``createMatMulInput*`` layout; the result is a FixedPoint laid out by the matmul plan.
- Gather on axis 0: the table is tied to a Source carrying popops' sliceable layout; the
  result is a barrier root, mapped linearly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING, Any

import numpy as np

from popart_unwind.errors import PlanError
from popart_unwind.ops.common import constant_value
from popart_unwind.ops.layout import (
    ExchangeNeed,
    LayoutRule,
    TileTarget,
    UnwindEmitter,
    read_need,
)

if TYPE_CHECKING:
    from popart_unwind.ir.op import Op
    from popart_unwind.ir.tensor import Tensor

Shape = tuple[int, ...]


def _shape(op: Op, tensor: Tensor) -> Shape:
    if tensor.shape is None:
        raise PlanError(f"op {op.debug_name()}: {tensor.id!r} has no known shape; layouts "
                        f"need shapes (run InferShapes first)")
    return tensor.shape


def flat_tiles(input_tiles: Sequence[np.ndarray | None], index: int) -> np.ndarray | None:
    """Input ``index``'s layout as a flat array, or None where it is absent or unknown."""
    tiles = input_tiles[index] if index < len(input_tiles) else None
    return None if tiles is None else np.asarray(tiles).reshape(-1)


def broadcast_index(small: Shape, full: Shape) -> np.ndarray:
    """For each element of ``full`` (row-major), the element of ``small`` numpy reads."""
    padded = (1,) * (len(full) - len(small)) + tuple(small)
    return np.broadcast_to(np.arange(prod(small), dtype=np.int64).reshape(padded),
                           full).reshape(-1)


def count_equal(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements two layouts place on the same tile."""
    return int(np.count_nonzero(np.asarray(a).reshape(-1) == np.asarray(b).reshape(-1)))


def most_read_tiles(reader_tiles: np.ndarray, source_index: np.ndarray, num_sources: int,
                    num_tiles: int) -> np.ndarray:
    """For each source element, the tile among those reading it (``reader_tiles[k]`` reads
    ``source_index[k]``) that reads it most, the lowest among equals; 0 if none reads it.
    Placing an element there saves the most copies of it."""
    keys = np.asarray(source_index, np.int64) * num_tiles + np.asarray(reader_tiles, np.int64)
    keys, counts = np.unique(keys, return_counts=True)
    element, tile = keys // num_tiles, keys % num_tiles
    order = np.lexsort((tile, -counts, element))
    first = np.ones(order.size, dtype=bool)
    first[1:] = element[order][1:] != element[order][:-1]
    result = np.zeros(num_sources, dtype=np.int64)
    result[element[order][first]] = tile[order][first]
    return result


def _operand_of_result(op: Op, operand: Tensor, result_tiles: np.ndarray,
                       target: TileTarget) -> np.ndarray:
    """The layout of an elementwise operand that its result's tiles read without exchange
    (full shape) or with the fewest copies (numpy-broadcast)."""
    out_shape, shape = _shape(op, op.output(0)), _shape(op, operand)
    tiles = np.asarray(result_tiles).reshape(-1)
    if shape == out_shape:
        return tiles
    return np.asarray(target.broadcast_operand_tiles(tiles, out_shape, shape)).reshape(-1)


def tie_created_operands(op: Op, emitter: UnwindEmitter,
                         created: Callable[[Op, int, TileTarget], np.ndarray],
                         names: tuple[str, str]) -> list[Any]:
    """Inputs 0 and 1 of a matmul-like op, each tied by a ``matmul`` pair to a Source with
    the layout its creator makes (``created(op, index, target)``); their unwind tensors."""
    operands = [emitter.tensor(op.input(i)) for i in (0, 1)]
    for index, operand in enumerate(operands):
        source = emitter.source(
            op.input(index), lambda target, index=index: created(op, index, target),
            f"{op.debug_name()} {names[index]}")
        emitter.graph.valued_pair(operand, source, emitter.valuations.matmul)
    return operands


def created_agreement(op: Op, input_tiles: Sequence[np.ndarray | None], target: TileTarget,
                      value: float, created: Callable[[Op, int, TileTarget], np.ndarray]
                      ) -> tuple[float, float]:
    """The ``matmul`` pairs of inputs 0 and 1 scored on concrete tiles: (value x elements
    where each lies as its creator would put it, value x elements)."""
    score = bound = 0.0
    for index in (0, 1):
        bound += value * op.input(index).nelms()
        tiles = flat_tiles(input_tiles, index)
        if tiles is not None:
            score += value * count_equal(tiles, created(op, index, target))
    return score, bound


# -- elementwise ------------------------------------------------------------------------------
class ElementwiseRule(LayoutRule):
    """Unary, Cast, broadcasting binary/variadic ops and Where.

    ``data_inputs`` lists the inputs read elementwise (default: all; CastLike reads only
    input 0's values). An input connected twice (x * x) counts once.
    """

    kind = "elementwise"

    def __init__(self, data_inputs: tuple[int, ...] | None = None) -> None:
        self.data_inputs = data_inputs

    def operands(self, op: Op) -> list[tuple[int, Tensor]]:
        """(input index, tensor) of each distinct data input, in index order."""
        seen: set[str] = set()
        found = []
        for index, tensor in op.input_map().items():
            if self.data_inputs is not None and index not in self.data_inputs:
                continue
            if tensor.id not in seen:
                seen.add(tensor.id)
                found.append((index, tensor))
        return found

    def _full(self, op: Op) -> list[int]:
        """Positions in ``operands`` of the inputs with the output's shape."""
        out = _shape(op, op.output(0))
        return [k for k, (_, t) in enumerate(self.operands(op)) if _shape(op, t) == out]

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        full = self._full(op)
        if not full:  # every input broadcasts: nothing has the result's layout
            emitter.barrier(op)
            return
        operands = self.operands(op)
        values: dict[Any, float] = {"default": emitter.valuations.elementwise}
        for k in range(len(operands)):
            if k not in full:
                values[(full[0], k)] = emitter.valuations.bias
        out = op.output(0)
        result = emitter.graph.sum_like([emitter.tensor(t) for _, t in operands], full,
                                        values, name=out.id)
        emitter.define(out, result.out)

    def output_tiles(self, op: Op, input_tiles: list[np.ndarray | None],
                     target: TileTarget) -> list[np.ndarray]:
        out, full = op.output(0), self._full(op)
        candidates = [flat_tiles(input_tiles, op_index)
                      for k, (op_index, _) in enumerate(self.operands(op)) if k in full]
        candidates = [c for c in candidates if c is not None]
        if not candidates:
            return [target.linear_tiles(_shape(op, out), out.dtype)]
        return [candidates[target.elementwise_output(candidates)].copy()]

    def exchange(self, op: Op, input_tiles: list[np.ndarray | None],
                 output_tiles: list[np.ndarray], target: TileTarget) -> ExchangeNeed:
        out_shape = _shape(op, op.output(0))
        readers = np.asarray(output_tiles[0]).reshape(-1)
        need = ExchangeNeed.none(target.num_tiles)
        for op_index, tensor in self.operands(op):
            tiles = flat_tiles(input_tiles, op_index)
            if tiles is None:
                continue
            shape = _shape(op, tensor)
            size = target.dtype_size(tensor.dtype)
            if shape == out_shape:
                need = need + read_need(readers, None, tiles, size, target.num_tiles)
            else:
                need = need + read_need(readers, broadcast_index(shape, out_shape), tiles,
                                        size, target.num_tiles)
        return need

    def agreement(self, op: Op, input_tiles: list[np.ndarray | None], target: TileTarget,
                  valuations: Any) -> tuple[float, float]:
        full = self._full(op)
        if not full:
            return 0.0, 0.0
        operands = self.operands(op)
        tiles = [flat_tiles(input_tiles, i) for i, _ in operands]
        out_shape = _shape(op, op.output(0))
        score = bound = 0.0
        for a, b in ((a, b) for n, a in enumerate(full) for b in full[n + 1:]):
            bound += valuations.elementwise * prod(out_shape)
            if tiles[a] is not None and tiles[b] is not None:
                score += valuations.elementwise * count_equal(tiles[a], tiles[b])
        first = tiles[full[0]]
        for k, (_, tensor) in enumerate(operands):
            if k in full:
                continue
            shape = _shape(op, tensor)
            bound += valuations.bias * prod(shape)
            if first is not None and tiles[k] is not None:
                wanted = target.broadcast_operand_tiles(first, out_shape, shape)
                score += valuations.bias * count_equal(tiles[k], wanted)
        return score, bound

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileTarget) -> np.ndarray | None:
        """A full-shape input on the result's tiles; a broadcast one where most of its
        readers are (Poplibs' broadcast-operand layout)."""
        if index not in dict(self.operands(op)):
            return None
        return _operand_of_result(op, op.input(index), output_tiles[0], target)

    def least_received(self, op: Op, input_tiles: list[np.ndarray | None],
                       output_tiles: list[np.ndarray], planned: set[int],
                       target: TileTarget) -> int:
        """When a planned input has the result's shape, the result's layout is the plan's
        to choose too (Poplar clones one full-shape input), so the bound is per element:
        the unplanned full-shape inputs not on that element's best tile among theirs.
        Broadcast inputs then count nothing: the result could sit where they lie."""
        operands, full = self.operands(op), self._full(op)
        if not any(operands[k][0] in planned for k in full):
            return super().least_received(op, input_tiles, output_tiles, planned, target)
        fixed = [(np.asarray(input_tiles[index]).reshape(-1),
                  target.dtype_size(tensor.dtype))
                 for k, (index, tensor) in enumerate(operands)
                 if k in full and index not in planned and flat_tiles(input_tiles, index)
                 is not None]
        if len(fixed) < 2:
            return 0
        # Moving everything to the tile of input j costs, per element, the sizes of the
        # inputs elsewhere; the cheapest j may differ from element to element.
        costs = [sum(size * (tiles != tiles_j) for tiles, size in fixed)
                 for tiles_j, _ in fixed]
        return int(np.minimum.reduce(costs).sum())

    def unwind_tiles(self, op: Op, in_index: int, out_index: int,
                     out_tiles: np.ndarray) -> np.ndarray | None:
        """A full-shape input takes the output's layout as it is."""
        if out_index != 0 or not op.has_input(in_index):
            return None
        if self.data_inputs is not None and in_index not in self.data_inputs:
            return None
        if _shape(op, op.input(in_index)) != _shape(op, op.output(0)):
            return None
        return np.asarray(out_tiles).reshape(-1).astype(np.int64)


# -- matmul -----------------------------------------------------------------------------------
def matmul_groups(lhs: Shape, rhs: Shape) -> tuple[int, int, int, int] | None:
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


class MatMulRule(LayoutRule):
    """MatMul, and Gemm (A, B possibly transposed, plus a broadcast C added to the product).

    Grouped shapes only (``matmul_groups``); any other product is left a barrier.
    """

    kind = "matmul"

    def dims(self, op: Op) -> tuple[int, int, int, int] | None:
        """(G, M, K, N) of the grouped product, or None if the op is not one."""
        a, b = _shape(op, op.input(0)), _shape(op, op.input(1))
        if op.type.name != "Gemm":
            return matmul_groups(a, b)
        if len(a) != 2 or len(b) != 2:
            return None
        rows, inner = a[::-1] if self._trans(op, "A") else a
        inner_b, cols = b[::-1] if self._trans(op, "B") else b
        return (1, rows, inner, cols) if inner == inner_b and min(rows, inner, cols) else None

    @staticmethod
    def _trans(op: Op, which: str) -> bool:
        return op.type.name == "Gemm" and bool(op.attributes.get(f"trans{which}", 0))

    def _dtype(self, op: Op) -> str:
        return op.input(0).dtype

    def operand_tiles(self, op: Op, index: int, target: TileTarget) -> np.ndarray:
        """The matmul plan's layout of input ``index`` (0: lhs, 1: rhs) in the input's own
        shape, flat (a transposed Gemm operand gets the transposed layout)."""
        dims = self.dims(op)
        if dims is None or index not in (0, 1):
            raise PlanError(f"op {op.debug_name()}: input {index} is not a grouped matmul "
                            f"operand")
        operand = ("lhs", "rhs")[index]
        tiles = target.matmul_tiles(*dims, self._dtype(op), operand)
        if self._trans(op, "AB"[index]):
            _, m, k, n = dims
            grid = tiles.reshape((m, k) if index == 0 else (k, n))
            tiles = np.ascontiguousarray(grid.T).reshape(-1)
        return tiles

    def wanted_input_tiles(self, op: Op, index: int, target: TileTarget) -> np.ndarray | None:
        """What poplin's createMatMulInputLHS/RHS would give input ``index``."""
        if index not in (0, 1) or self.dims(op) is None:
            return None
        return self.operand_tiles(op, index, target)

    def _grouped(self, op: Op, index: int, tiles: np.ndarray) -> np.ndarray:
        """Operand tiles in the grouped [G, M, K] / [G, K, N] order (undo a transpose)."""
        tiles = np.asarray(tiles).reshape(-1)
        if self._trans(op, "AB"[index]):
            tiles = np.ascontiguousarray(tiles.reshape(_shape(op, op.input(index))).T)
        return tiles.reshape(-1)

    def _product_tiles(self, op: Op, target: TileTarget) -> np.ndarray:
        return target.matmul_tiles(*self.dims(op), self._dtype(op), "output")

    def _bias(self, op: Op) -> Tensor | None:
        return op.input(2) if op.type.name == "Gemm" and op.has_input(2) else None

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        if self.dims(op) is None:
            emitter.barrier(op)
            return
        graph, values = emitter.graph, emitter.valuations
        operands = tie_created_operands(op, emitter, self.operand_tiles, ("lhs", "rhs"))
        out = op.output(0)
        [product] = emitter.fixed_point(operands, [_shape(op, out)],
                                        [lambda target: self._product_tiles(op, target)],
                                        f"{op.debug_name()} output")
        bias = self._bias(op)
        if bias is None:
            emitter.define(out, product)
            return
        full = [0, 1] if _shape(op, bias) == _shape(op, out) else [0]
        value = values.elementwise if len(full) == 2 else values.bias
        result = graph.sum_like([product, emitter.tensor(bias)], full,
                                {"default": value}, name=out.id)
        emitter.define(out, result.out)

    def output_tiles(self, op: Op, input_tiles: list[np.ndarray | None],
                     target: TileTarget) -> list[np.ndarray]:
        if self.dims(op) is None:
            return super().output_tiles(op, input_tiles, target)
        product = self._product_tiles(op, target)
        bias = self._bias(op)
        bias_tiles = flat_tiles(input_tiles, 2)
        if bias is None or bias_tiles is None or _shape(op, bias) != _shape(op, op.output(0)):
            return [product]
        return [[product, bias_tiles][target.elementwise_output([product, bias_tiles])].copy()]

    def exchange(self, op: Op, input_tiles: list[np.ndarray | None],
                 output_tiles: list[np.ndarray], target: TileTarget) -> ExchangeNeed:
        dims = self.dims(op)
        if dims is None:
            return super().exchange(op, input_tiles, output_tiles, target)
        need = ExchangeNeed.none(target.num_tiles)
        for index, operand in enumerate(("lhs", "rhs")):
            tiles = flat_tiles(input_tiles, index)
            if tiles is not None:
                need = need + target.matmul_readers(*dims, self._dtype(op), operand,
                                                    self._grouped(op, index, tiles))
        bias, bias_tiles = self._bias(op), flat_tiles(input_tiles, 2)
        if bias is not None and bias_tiles is not None:
            out_shape = _shape(op, op.output(0))
            need = need + read_need(np.asarray(output_tiles[0]).reshape(-1),
                                    broadcast_index(_shape(op, bias), out_shape), bias_tiles,
                                    target.dtype_size(bias.dtype), target.num_tiles)
        return need

    def agreement(self, op: Op, input_tiles: list[np.ndarray | None], target: TileTarget,
                  valuations: Any) -> tuple[float, float]:
        if self.dims(op) is None:
            return 0.0, 0.0
        score, bound = created_agreement(op, input_tiles, target, valuations.matmul,
                                         self.operand_tiles)
        bias = self._bias(op)
        if bias is not None:
            out_shape, shape = _shape(op, op.output(0)), _shape(op, bias)
            product, tiles = self._product_tiles(op, target), flat_tiles(input_tiles, 2)
            value = valuations.elementwise if shape == out_shape else valuations.bias
            bound += value * prod(shape)
            if tiles is not None:
                wanted = product if shape == out_shape else target.broadcast_operand_tiles(
                    product, out_shape, shape)
                score += value * count_equal(tiles, wanted)
        return score, bound

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """poplin's createMatMulInputLHS/RHS, at PopART's default creator priority (0)."""
        return 0 if in_index in (0, 1) and self.dims(op) is not None else None

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileTarget) -> np.ndarray | None:
        """Operands as the matmul plan wants them (no rearrangement, and each element
        already on one of its readers); a Gemm bias as an elementwise operand of the
        result."""
        if self.dims(op) is None:
            return None
        if index in (0, 1):
            return self.operand_tiles(op, index, target)
        bias = self._bias(op)
        if index == 2 and bias is not None:
            return _operand_of_result(op, bias, output_tiles[0], target)
        return None


# -- gather -----------------------------------------------------------------------------------
class GatherRule(LayoutRule):
    """Gather on axis 0 of a table: popops' multiSlice over a sliceable table."""

    kind = "gather"

    def table_dims(self, op: Op) -> tuple[int, int] | None:
        """(entries, embedding size) of the table, or None if this is not a table lookup."""
        table = _shape(op, op.input(0))
        axis = int(op.attributes.get("axis", 0))
        if not table or axis not in (0, -len(table)) or not op.has_input(1):
            return None
        entries, size = table[0], prod(table[1:])
        return (entries, size) if entries and size else None

    def wanted_input_tiles(self, op: Op, index: int, target: TileTarget) -> np.ndarray | None:
        """What popops' createSliceableTensor would give the table."""
        dims = self.table_dims(op)
        if index != 0 or dims is None:
            return None
        return target.sliceable_tiles(*dims, op.input(0).dtype)

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        dims = self.table_dims(op)
        if dims is not None:
            table = op.input(0)
            source = emitter.source(
                table, lambda target: target.sliceable_tiles(*dims, table.dtype),
                f"{op.debug_name()} table")
            emitter.graph.valued_pair(emitter.tensor(table), source,
                                      emitter.valuations.sliceable)
        emitter.barrier(op)

    def rows(self, op: Op) -> np.ndarray:
        """The table row each looked-up position reads: the constant indices when known,
        else row 0 for every position (a representative: under a column-split table every
        row of a column lies on the same tiles, so any row gives the same exchange)."""
        entries, _ = self.table_dims(op)
        indices = op.input(1)
        value = constant_value(indices)
        count = prod(_shape(op, indices))
        if value is None or np.asarray(value).size != count:
            return np.zeros(count, dtype=np.int64)
        rows = np.asarray(value, dtype=np.int64).reshape(-1)
        rows = np.where(rows < 0, rows + entries, rows)
        return np.where((rows >= 0) & (rows < entries), rows, 0)

    def exchange(self, op: Op, input_tiles: list[np.ndarray | None],
                 output_tiles: list[np.ndarray], target: TileTarget) -> ExchangeNeed:
        dims, table = self.table_dims(op), flat_tiles(input_tiles, 0)
        if dims is None or table is None:
            return super().exchange(op, input_tiles, output_tiles, target)
        _, size = dims
        reads = (self.rows(op)[:, None] * size + np.arange(size)[None, :]).reshape(-1)
        return read_need(np.asarray(output_tiles[0]).reshape(-1), reads, table,
                         target.dtype_size(op.input(0).dtype), target.num_tiles)

    def agreement(self, op: Op, input_tiles: list[np.ndarray | None], target: TileTarget,
                  valuations: Any) -> tuple[float, float]:
        dims = self.table_dims(op)
        if dims is None:
            return 0.0, 0.0
        bound = valuations.sliceable * prod(dims)
        tiles = flat_tiles(input_tiles, 0)
        if tiles is None:
            return 0.0, bound
        wanted = target.sliceable_tiles(*dims, op.input(0).dtype)
        return valuations.sliceable * count_equal(tiles, wanted), bound

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileTarget) -> np.ndarray | None:
        """Each table element on the tile that reads it most (unread ones on tile 0)."""
        dims = self.table_dims(op)
        if index != 0 or dims is None:
            return None
        _, size = dims
        reads = (self.rows(op)[:, None] * size + np.arange(size)[None, :]).reshape(-1)
        return most_read_tiles(np.asarray(output_tiles[0]).reshape(-1), reads, prod(dims),
                               target.num_tiles)

    def creates_input(self, op: Op, in_index: int) -> int | None:
        """popops' createSliceableTensor for the table. PopART ranks this creator above
        all others (``GatherOpx`` sets the largest priority), so a weight shared by an
        embedding and a matmul (a tied LM head) is laid out for the gather."""
        return 1 if in_index == 0 and self.table_dims(op) is not None else None


ELEMENTWISE = ElementwiseRule()
#: CastLike reads only input 0's values (input 1 gives the type).
FIRST_INPUT_ELEMENTWISE = ElementwiseRule(data_inputs=(0,))
MATMUL = MatMulRule()
GATHER = GatherRule()
