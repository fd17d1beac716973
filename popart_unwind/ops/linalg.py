"""Op family: linear algebra (MatMul, MatMulInteger, Gemm, Einsum), with ONNX semantics.

Shapes come from the project's shape engine (``matmul_shape``, ``einsum_shape``) wherever it
states the rule; Einsum equations the engine's notation cannot write (an ellipsis in the
middle of a term, more than two operands) use a direct label-by-label rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import Op
from popart_unwind.ops.common import input_shape
from popart_unwind.ops.layout_compute import MATMUL
from popart_unwind.ops.registry import OpDef, register
from popart_unwind.shapes import Shape, broadcast_shapes, einsum_shape, matmul_shape

#: Folding stays cheap: at most this many result elements and multiply-adds.
FOLD_MAX_ELEMENTS = 1 << 16
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
    """The equation in the shape engine's notation, or None if it cannot be written so."""
    if len(terms) > 2 or any("..." in t and not t.startswith("...") for t in [*terms, result]):
        return None
    return ";".join(terms) + "=>" + result


def _direct_einsum(op: Op, terms: list[str], result: str,
                   shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Label sizes across operands (1 broadcasts), ellipsis parts broadcast NumPy-style."""
    sizes: dict[str, int] = {}
    ellipses = []
    for position, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        head, dots, tail = term.partition("...")
        spread = len(shape) - len(head) - len(tail)
        if spread < 0 or (spread and not dots):
            raise ShapeError(f"op {op.debug_name()}: einsum term {term!r} does not fit "
                             f"operand {position} of shape {shape}")
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


register(OpDef("MatMul", infer=_infer_matmul, fold=_fold_matmul, layout=MATMUL))
register(OpDef("MatMulInteger", infer=_infer_matmul_integer))
register(OpDef("Gemm", infer=_infer_gemm, fold=_fold_gemm, layout=MATMUL))
register(OpDef("Einsum", infer=_infer_einsum, fold=_fold_einsum))
