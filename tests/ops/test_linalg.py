"""Linear algebra ops: shape rules agree with numpy on random shapes, folds with numpy's
values, Einsum through the shape engine and through the direct rule alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from popart_unwind.errors import ShapeError
from popart_unwind.ir import Ir, OpType, TensorType
from popart_unwind.ops import REGISTRY, linalg
from popart_unwind.ops.shape_inference import infer_op

SETTINGS = settings(max_examples=150, deadline=None)
dims = st.integers(1, 4)


def build(op_type, specs, attributes=None, outputs=1, version=18):
    """One op over graph inputs (shape tuples or (dtype, shape)) and constants (arrays)."""
    graph = Ir().main_graph
    inputs = []
    for index, spec in enumerate(specs):
        if spec is None:
            inputs.append(None)
        elif isinstance(spec, np.ndarray):
            inputs.append(graph.add_constant(f"c{index}", spec))
        else:
            dtype, shape = spec if spec and isinstance(spec[0], str) else ("float32", spec)
            inputs.append(graph.add_input(f"x{index}", dtype, shape))
    return graph.create_op(OpType("ai.onnx", op_type, version), inputs, outputs, attributes)


def shapes_of(op_type, specs, attributes=None, outputs=1, version=18):
    op = build(op_type, specs, attributes, outputs, version)
    infer_op(op)
    return [t.shape for t in op.outputs]


def numpy_or_error(function, *shapes):
    try:
        return function(*(np.zeros(s, np.float32) for s in shapes)).shape
    except ValueError:
        return ShapeError


def ours_or_error(op_type, *shapes, attributes=None):
    try:
        return shapes_of(op_type, list(shapes), attributes)[0]
    except ShapeError:
        return ShapeError


def folded(op):
    constants = [t.data if t.tensor_type is TensorType.CONST else None for t in op.inputs]
    return REGISTRY.lookup(op).fold(op, constants)


@st.composite
def matmul_operands(draw):
    rank_a, rank_b = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = draw(st.lists(dims, min_size=2, max_size=2))
    k = draw(dims)
    a = [1 if draw(st.booleans()) else d for d in batch][: max(rank_a - 2, 0)]
    b = [1 if draw(st.booleans()) else d for d in batch][: max(rank_b - 2, 0)]
    a = (*a, draw(dims), k)[-rank_a:] if rank_a > 1 else (k,)
    b = (*b, k, draw(dims))[-rank_b:] if rank_b > 1 else (k,)
    if draw(st.integers(0, 5)) == 0:  # sometimes a contraction mismatch
        b = (*b[:-2], k + 1, b[-1]) if len(b) > 1 else (k + 1,)
    return a, b


@SETTINGS
@given(matmul_operands())
def test_matmul_shape_is_numpys_including_batch_broadcasting(operands):
    a, b = operands
    assert ours_or_error("MatMul", a, b) == numpy_or_error(np.matmul, a, b)


def test_matmul_names_the_op_on_mismatch_and_on_mixed_dtypes():
    with pytest.raises(ShapeError, match="MatMul#0"):
        shapes_of("MatMul", [(2, 3), (4, 5)])
    with pytest.raises(ShapeError, match="one dtype"):
        shapes_of("MatMul", [(2, 3), ("float16", (3, 5))])


def test_matmul_folds_to_numpys_product():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    op = build("MatMul", [a, b])
    infer_op(op)
    [value] = folded(op)
    assert value.dtype == np.float32 and np.array_equal(value, a @ b)


def test_matmul_integer_gives_int32():
    op = build("MatMulInteger", [("int8", (2, 3)), ("int8", (3, 4))], version=10)
    infer_op(op)
    assert (op.output(0).dtype, op.output(0).shape) == ("int32", (2, 4))


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.booleans(), st.booleans(),
       st.sampled_from(["none", "scalar", "row", "column", "full"]))
def test_gemm_transposes_and_broadcasts_c(m, k, n, trans_a, trans_b, c_kind):
    a = (k, m) if trans_a else (m, k)
    b = (n, k) if trans_b else (k, n)
    c = {"none": None, "scalar": (), "row": (n,), "column": (m, 1), "full": (m, n)}[c_kind]
    specs = [a, b] + ([] if c is None else [c])
    attributes = {"transA": int(trans_a), "transB": int(trans_b)}
    assert shapes_of("Gemm", specs, attributes) == [(m, n)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 12), st.booleans(),
       st.booleans(), st.integers(0, 2**31))
def test_gemm_operand_scores_and_bound_are_those_of_the_transposed_layouts(
        m, k, n, trans_a, trans_b, seed):
    """Agreement and the exchange bound compare a transposed operand through views; they
    count what comparing with ``operand_tiles`` (the transposed copy) counts."""
    from popart_unwind.machine import IpuModel, TileTarget
    from popart_unwind.machine.interface import layout_free_operand
    from popart_unwind.options import UnwindValuations

    a = (k, m) if trans_a else (m, k)
    b = (n, k) if trans_b else (k, n)
    op = build("Gemm", [a, b], {"transA": int(trans_a), "transB": int(trans_b)})
    infer_op(op)
    target, rule = TileTarget(IpuModel(tiles_per_ipu=8)), REGISTRY.layout_rule(op)
    rng = np.random.default_rng(seed)
    tiles = [rng.integers(0, 8, size=int(np.prod(shape))).astype(np.int16) for shape in (a, b)]
    copies = [rule.operand_tiles(op, index, target) for index in (0, 1)]
    valuations = UnwindValuations()
    plan = rule.plan(op, target)
    worth = [0.0 if layout_free_operand(target, plan, operand) else valuations.matmul
             for operand in ("lhs", "rhs")]
    expected = sum(w * int(np.count_nonzero(t == c))
                   for w, t, c in zip(worth, tiles, copies, strict=True))
    assert rule.agreement(op, tiles, target, valuations)[0] == expected
    outputs = rule.output_tiles(op, tiles, target)
    bound = rule.least_received(op, tiles, outputs, {0, 1}, target)
    direct = rule.exchange(op, copies, outputs, target)
    assert bound == int(direct.received_bytes.sum())


def test_gemm_refuses_a_c_that_broadcasts_the_wrong_way():
    with pytest.raises(ShapeError, match="does not broadcast"):
        shapes_of("Gemm", [(2, 3), (3, 4), (3, 4)])
    with pytest.raises(ShapeError, match="contracts"):
        shapes_of("Gemm", [(2, 3), (2, 4)])


def test_gemm_folds_with_alpha_beta_and_transposes():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (4, 3), (4,)))
    op = build("Gemm", [a, b, c], {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0})
    infer_op(op)
    [value] = folded(op)
    np.testing.assert_allclose(value, 0.5 * a.T @ b.T + 2.0 * c, rtol=1e-6)


EQUATIONS = [
    "ij,jk->ik", "bij,bjk->bik", "...ij,...jk->...ik", "ij->ji", "ii->i", "ij->", "ij,ij->ij",
    "i,j->ij", "ij,jk", "ba", "...i,i->...", "bhqd,bhkd->bhqk",
    # an ellipsis inside a term (the engine), three operands (the direct rule)
    "i...j,j->i...", "ij,jk,kl->il", "a,b,c->abc", "i...,...->i...", "j...,k...->...jk",
    "a...b->b...a", "ij->i...j",
]


@st.composite
def einsum_case(draw):
    equation = draw(st.sampled_from(EQUATIONS))
    sizes = {label: draw(dims) for label in "abcdhijklq"}
    ellipsis = tuple(draw(st.lists(dims, max_size=2)))
    lhs = equation.split("->")[0]
    shapes = []
    for term in lhs.split(","):
        head, dots, tail = term.partition("...")
        middle = ellipsis[draw(st.integers(0, len(ellipsis))):] if dots else ()
        middle = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in middle)
        shapes.append((*(sizes[c] for c in head), *middle, *(sizes[c] for c in tail)))
    return equation, shapes


@SETTINGS
@given(einsum_case())
def test_einsum_shape_is_numpys(case):
    equation, shapes = case
    expected = np.einsum(equation, *(np.zeros(s) for s in shapes)).shape
    assert shapes_of("Einsum", shapes, {"equation": equation}, version=12) == [expected]


def test_einsum_errors_name_the_op():
    with pytest.raises(ShapeError, match="Einsum#0"):
        shapes_of("Einsum", [(2, 3), (4, 5)], {"equation": "ij,jk->ik"}, version=12)
    with pytest.raises(ShapeError, match="2 operand term"):
        shapes_of("Einsum", [(2, 3)], {"equation": "ij,jk->ik"}, version=12)
    with pytest.raises(ShapeError, match=r"occurs in no operand|does not occur"):
        shapes_of("Einsum", [(2, 3), (3, 4), (4, 5)], {"equation": "ij,jk,kl->iz"},
                  version=12)


def test_einsum_of_large_shapes_never_materializes_them():
    big = [(4096, 8192), (8192, 16384), (16384, 4096)]
    assert shapes_of("Einsum", big, {"equation": "ij,jk,kl->il"}, version=12) == [(4096, 4096)]


def test_einsum_folds_small_constants():
    a, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    op = build("Einsum", [a, b], {"equation": "ij,j->i"}, version=12)
    infer_op(op)
    [value] = folded(op)
    assert np.array_equal(value, a @ b)


@st.composite
def inside_ellipsis_case(draw):
    """One or two terms with the ellipsis anywhere, shapes that may or may not fit them."""
    labels = "ijk"
    terms = []
    for _ in range(draw(st.integers(1, 2))):
        head = "".join(draw(st.lists(st.sampled_from(labels), max_size=2, unique=True)))
        tail = "".join(draw(st.lists(st.sampled_from(labels), max_size=2, unique=True)))
        terms.append(head + ("..." if draw(st.booleans()) else "") + tail)
    used = sorted(set("".join(terms).replace(".", "")))
    out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
    at = draw(st.integers(0, len(out)))
    result = "".join(out[:at]) + ("..." if draw(st.booleans()) else "") + "".join(out[at:])
    shapes = [tuple(draw(st.lists(st.integers(1, 3), max_size=5))) for _ in terms]
    return terms, result, shapes


@SETTINGS
@given(inside_ellipsis_case())
def test_inside_ellipses_give_what_the_direct_rule_gave(case):
    """Terms with an ellipsis inside moved from the direct rule to the engine: the op infers
    the shape the direct rule gives, or both refuse; where NumPy answers, so do they."""
    terms, result, shapes = case
    assume(any("..." in t and not t.startswith("...") for t in [*terms, result]))
    equation = ",".join(terms) + "->" + result
    op = build("Einsum", list(shapes), {"equation": equation}, version=12)
    try:
        direct = linalg._direct_einsum(op, terms, result, list(shapes))
    except ShapeError:
        direct = None
    try:
        [inferred] = shapes_of("Einsum", list(shapes), {"equation": equation}, version=12)
    except ShapeError:
        inferred = None
    assert inferred == direct
    try:
        expected = np.einsum(equation, *(np.zeros(s) for s in shapes)).shape
    except ValueError:
        return
    if "..." in result or not any("..." in t for t in terms):  # NumPy sums no ellipsis
        assert inferred == expected


def test_an_operand_with_fewer_axes_than_its_labels_is_refused_on_every_path():
    for equation, shapes in (("ij,jk->ik", [(3,), (3, 4)]), ("...ij->...", [(3,)]),
                             ("i...j->...", [(3,)]), ("ij->ij", [(2, 3, 4)])):
        with pytest.raises(ShapeError, match=r"Einsum#0.*does not fit operand"):
            shapes_of("Einsum", shapes, {"equation": equation}, version=12)
