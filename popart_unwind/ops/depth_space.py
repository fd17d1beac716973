"""Op family: DepthToSpace and SpaceToDepth — moving blocks of a 4-D [N, C, H, W] tensor
between its channels and its spatial axes, with ONNX semantics (modes DCR and CRD).

Each op is a reshape, a transpose and a reshape (ONNX defines them so), which is what
PopART's ``DepthToSpaceOpPattern`` and ``SpaceToDepthOpPattern`` turn them into before
lowering. So the element map is that chain of view steps: the layout rule is a view
(``views.ViewRule``), layouts unwind through it both in our planner and in PopART's creator
search, and the fold is numpy running the same three steps.
"""

from __future__ import annotations

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ops.common import input_shape
from popart_unwind.ops.layout_rule import known_shape
from popart_unwind.ops.registry import Constants, FoldResult, InferredOutputs, OpDef, register
from popart_unwind.ops.views import Step, ViewRule

#: The three steps' middle permutation, per (op type, mode), as ONNX states it.
_PERMUTATIONS = {
    ("DepthToSpace", "DCR"): (0, 3, 4, 1, 5, 2),
    ("DepthToSpace", "CRD"): (0, 1, 4, 2, 5, 3),
    ("SpaceToDepth", "DCR"): (0, 3, 5, 1, 2, 4),
    ("SpaceToDepth", "CRD"): (0, 1, 3, 5, 2, 4),
}


def _mode(op: Op) -> str:
    mode = op.attributes.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("DCR", "CRD"):
        raise ShapeError(f"op {op.debug_name()}: mode is {mode!r}, expected DCR or CRD")
    return mode


def _blocksize(op: Op) -> int:
    size = int(op.attributes.get("blocksize", 0))
    if size < 1:
        raise ShapeError(f"op {op.debug_name()} needs a positive 'blocksize', got {size}")
    return size


def _shapes(op: Op, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The six-axis shape the input is reshaped to, and the output's shape."""
    if len(shape) != 4:
        raise ShapeError(f"op {op.debug_name()} reads a 4-D tensor, got shape {shape}")
    n, c, h, w = shape
    size = _blocksize(op)
    if op.is_type("DepthToSpace"):
        if c % (size * size):
            raise ShapeError(f"op {op.debug_name()}: {c} channels do not divide into blocks "
                             f"of {size}x{size}")
        depth = c // (size * size)
        split = ((n, size, size, depth, h, w) if _mode(op) == "DCR"
                 else (n, depth, size, size, h, w))
        return split, (n, depth, h * size, w * size)
    if h % size or w % size:
        raise ShapeError(f"op {op.debug_name()}: spatial axes {h}x{w} do not divide into "
                         f"blocks of {size}x{size}")
    return (n, c, h // size, size, w // size, size), (n, c * size * size, h // size, w // size)


def _steps_of(op: Op, shape: tuple[int, ...]) -> list[Step]:
    split, out = _shapes(op, shape)
    permutation = _PERMUTATIONS[(op.type.name, _mode(op))]
    return [("reshape", split), ("dim_shuffle", permutation), ("reshape", out)]


def _infer(op: Op) -> InferredOutputs:
    return [(op.input(0).dtype, _shapes(op, tuple(input_shape(op, 0)))[1])]


def _fold(op: Op, constants: Constants) -> FoldResult:
    if not constants or constants[0] is None:
        return None
    value = constants[0]
    split, out = _shapes(op, tuple(value.shape))
    permutation = _PERMUTATIONS[(op.type.name, _mode(op))]
    return [np.ascontiguousarray(value.reshape(split).transpose(permutation)).reshape(out)]


class DepthSpaceRule(ViewRule):
    """The reshape, transpose and reshape that move the blocks."""

    def steps(self, op: Op, out_index: int) -> list[Step]:
        return _steps_of(op, known_shape(op, op.input(0)))


for _name in ("DepthToSpace", "SpaceToDepth"):
    register(OpDef(_name, infer=_infer, fold=_fold, layout=DepthSpaceRule()))
# PopART's ai.graphcore DepthToSpace (its Builder's way to ONNX's DepthToSpace-11 from older
# opsets): the same blocksize and mode, the same rules.
register(OpDef("DepthToSpace", domain=GRAPHCORE_DOMAIN, infer=_infer, fold=_fold,
               layout=DepthSpaceRule()))
