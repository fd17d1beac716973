"""Op family: PopART's spline-convolution ops, SplineBasis and SplineWeighting (the two halves
of the spline convolution of graph networks, as the torch-spline-conv library defines it).

SplineBasis reads pseudo-coordinates ``[E, D]`` (float), int32 kernel sizes ``[D]`` and uint8
open-spline flags ``[D]`` and, for a B-spline of ``degree`` 0 to 3, gives each edge's
``S = (degree + 1) ** D`` basis products (the pseudo-coordinates' type) and the int32
indices of the kernel weights they multiply, both ``[E, S]``. SplineWeighting reads inputs
``[E, M_in]``, weights ``[K, M_in, M_out]``, the basis and the weight indices and gives
``out[e, o] = Σ_s basis[e, s] · Σ_i x[e, i] · weight[index[e, s], i, o]``, ``[E, M_out]``.

The folds compute torch-spline-conv's definitions (the tests hold them to a direct
evaluation of the B-spline); PopART's own kernels are not restated. No gradient rules here;
layouts are not modelled: both are barriers.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ops.common import input_shape, small_constants
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register

_FLOATS = ("float16", "float32")


def _degree(op: Op) -> int:
    degree = int(op.attributes.get("degree", 0))
    if not 0 <= degree <= 3:
        raise ShapeError(f"op {op.debug_name()}: degree {degree} is not between 0 and 3")
    return degree


def _infer_basis(op: Op) -> InferredOutputs:
    pseudo, sizes, open_ = input_shape(op, 0), input_shape(op, 1), input_shape(op, 2)
    if (len(pseudo) != 2 or sizes != (pseudo[1],) or open_ != (pseudo[1],)
            or op.input(0).dtype not in _FLOATS or op.input(1).dtype != "int32"
            or op.input(2).dtype != "uint8"):
        raise ShapeError(f"op {op.debug_name()}: needs float pseudo-coordinates [E, D], int32 "
                         f"kernel sizes [D] and uint8 open-spline flags [D], got {pseudo} "
                         f"({op.input(0).dtype}), {sizes} ({op.input(1).dtype}), {open_} "
                         f"({op.input(2).dtype})")
    edges, dims = pseudo
    per_edge = (_degree(op) + 1) ** dims
    return [(op.input(0).dtype, (edges, per_edge)), ("int32", (edges, per_edge))]


def _spline(degree: int, v: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The uniform B-spline of ``degree``'s piece ``k`` at the fraction ``v``."""
    if degree == 0:
        return np.ones_like(v)
    if degree == 1:
        return np.where(k == 0, 1 - v, v)
    if degree == 2:
        return np.select([k == 0, k == 1], [0.5 * (1 - v) ** 2, -v * v + v + 0.5], 0.5 * v * v)
    return np.select([k == 0, k == 1, k == 2],
                     [(1 - v) ** 3 / 6, (3 * v ** 3 - 6 * v * v + 4) / 6,
                      (-3 * v ** 3 + 3 * v * v + 3 * v + 1) / 6], v ** 3 / 6)


def _fold_basis(op: Op, constants: Constants) -> FoldResult:
    pseudo, sizes, open_ = constants[0], constants[1], constants[2]
    if not small_constants(pseudo, sizes, open_) or np.any(sizes < 1):
        return None
    degree = _degree(op)
    edges, dims = pseudo.shape
    per_edge = (degree + 1) ** dims
    basis = np.ones((edges, per_edge))
    index = np.zeros((edges, per_edge), np.int64)
    offset = 1
    pieces = np.arange(per_edge)
    for d in range(dims):
        k = (pieces // (degree + 1) ** d) % (degree + 1)
        scaled = pseudo[:, d].astype(np.float64) * (sizes[d] - degree * int(open_[d]))
        whole = np.floor(scaled)
        index += ((whole.astype(np.int64)[:, None] + k[None, :]) % sizes[d]) * offset
        offset *= int(sizes[d])
        basis *= _spline(degree, (scaled - whole)[:, None], k[None, :])
    results = [basis.astype(pseudo.dtype), index.astype(np.int32)]
    return [results[i] for i in op.output_map()]


def _infer_weighting(op: Op) -> InferredOutputs:
    x, weight, basis, index = (input_shape(op, i) for i in range(4))
    dtypes = {op.input(i).dtype for i in range(3)}
    if (len(x) != 2 or len(weight) != 3 or weight[1] != x[1] or len(basis) != 2
            or basis[0] != x[0] or index != basis or len(dtypes) != 1
            or not dtypes <= set(_FLOATS) or op.input(3).dtype != "int32"):
        raise ShapeError(f"op {op.debug_name()}: needs inputs [E, M_in], weights "
                         f"[K, M_in, M_out], a basis [E, S] of their type and int32 indices "
                         f"[E, S], got {x}, {weight}, {basis}, {index}")
    return [(op.input(0).dtype, (x[0], weight[2]))]


def _fold_weighting(op: Op, constants: Constants) -> FoldResult:
    x, weight, basis, index = constants[:4]
    if not small_constants(x, weight, basis, index) or np.any(
            (index < 0) | (index >= weight.shape[0])):
        return None
    picked = weight.astype(np.float64)[index]  # [E, S, M_in, M_out]
    out = np.einsum("es,ei,esio->eo", basis.astype(np.float64), x.astype(np.float64), picked)
    return [out.astype(x.dtype)]


register(OpDef("SplineBasis", domain=GRAPHCORE_DOMAIN, infer=_infer_basis, fold=_fold_basis))
register(OpDef("SplineWeighting", domain=GRAPHCORE_DOMAIN, infer=_infer_weighting,
               fold=_fold_weighting))
