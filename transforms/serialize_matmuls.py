"""SerializeMatMuls: a matmul computed as ``factor`` smaller ones, one after another, so
that each needs a fraction of the temporary memory (PopART's ``serializematmuls.cpp``).

A MatMul of X [..., M, K] by W [..., K, N] is split along one dimension, named as PopART
names them for the forward pass:

- ``input_channels`` (M): each piece multiplies a slice of X's rows by W; the results are
  concatenated along the rows;
- ``output_channels`` (N): each piece multiplies X by a slice of W's columns; the results
  are concatenated along the columns;
- ``reducing_dim`` (K): each piece multiplies a slice of X's columns by the matching slice
  of W's rows; the results are added up (PopART adds them in place).

Which matmuls, and how: a MatMul carrying PopART's Builder attributes
``__serialize_matmul_mode`` and ``__serialize_matmul_factor`` (``Builder::setSerializeMatMul``)
is serialized as they say ("none" leaves it whole); every other MatMul as
``SessionOptions.serialize_matmuls`` says ("<mode>:<factor>", "" for none). In a training
step, the passes of a fully connected layer (``layers/fully_connected.py``) follow their
forward matmul, as PopART's grad ops follow theirs: all are cut along the same axis of the
layer's cube of work, which is the rows, columns or contracted axis of each pass in turn.
The pieces of one layer with the same index form a layer of their own, planned as such
(``OpSettings.serialized`` records it), as Poplibs plans each piece with its pass.

A matmul whose cut dimension the factor does not divide is left whole (PopART refuses the
model); one that is no 2-D-or-more MatMul (Gemm, a vector operand) too. Both are listed
in one ``TransformWarning``. PopART's ``keep_precision`` (partial sums in float32) is not
modelled.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING

import numpy as np

from popart_unwind.errors import TransformError, TransformWarning
from popart_unwind.layers import fully_connected_layers
from popart_unwind.options import SERIALIZE_MODES, parse_serialization

from .base import Transform
from .conditions import Condition
from .registry import SERIALIZE_MATMULS, register

if TYPE_CHECKING:
    from popart_unwind.ir import Graph, Ir, Op, Tensor
    from popart_unwind.rewrite import Rewriter

MODE_ATTRIBUTE = "__serialize_matmul_mode"
FACTOR_ATTRIBUTE = "__serialize_matmul_factor"
#: The layer's cube axis each mode cuts (cube [G, M, K, N] of the forward pass).
CUBE_AXIS = {"input_channels": "m", "output_channels": "n", "reducing_dim": "k"}
#: The op's own dimension cut when the cube axis is its rows, inner axis or columns.
OWN_MODE = ("input_channels", "reducing_dim", "output_channels")


@register
@dataclasses.dataclass(frozen=True)
class SerializeMatMuls(Transform):
    """Serialize the marked MatMuls of every graph (module docstring).

    Assumes shapes are known (the pieces are cut from them). Preserves every condition:
    the Slices, MatMuls, Concats and Adds it makes inherit the matmul's placement and are
    neither in place nor IpuCopies.
    """

    id = 8
    name = SERIALIZE_MATMULS
    assumes = frozenset({Condition.SHAPES_KNOWN})
    preserves = frozenset(Condition)

    def apply(self, graph: Graph, rewriter: Rewriter) -> bool:
        ir = graph.ir
        default = parse_serialization(ir.options.serialize_matmuls)
        cuts = self._cuts(ir, default)
        left: list[str] = []
        changed = False
        for op, (mode, factor, layer) in cuts.items():
            piece = _cut(op, mode, factor, layer, rewriter)
            if piece is None:
                left.append(op.debug_name())
            changed = changed or bool(piece)
        if left:
            warnings.warn(f"serialize_matmuls: {len(left)} matmul(s) left whole (the factor "
                          f"does not divide the cut dimension, or the op is no MatMul of "
                          f"2-D or more operands): {', '.join(sorted(left)[:8])}"
                          f"{', ...' if len(left) > 8 else ''}", TransformWarning, stacklevel=2)
        return changed

    def _cuts(self, ir: Ir, default: tuple[str, int] | None
              ) -> dict[Op, tuple[str, int, tuple[int, str] | None]]:
        """Each matmul to cut: its own mode (the dimension of its own product), the factor,
        and (layer forward op id, pass axes) when it is a pass of a layer."""
        cuts: dict = {}
        in_layer: set[int] = set()
        for layer in fully_connected_layers(ir, self.op_registry):
            setting = _setting(layer.fwd, default)
            in_layer.update(op.id for op in layer.ops())
            if setting is None:
                continue
            mode, factor = setting
            axis = CUBE_AXIS[mode]
            for op in layer.ops():
                axes = layer.axes_of(op)
                cuts[op] = (OWN_MODE[axes.index(axis)], factor, (layer.fwd.id, axes))
        for graph in ir.graphs:
            for op in graph.schedule():
                if op.id in in_layer or op.type.name not in ("MatMul", "Gemm"):
                    continue
                setting = _setting(op, default)
                if setting is not None:
                    cuts[op] = (setting[0], setting[1], None)
        return cuts


def _setting(op: Op, default: tuple[str, int] | None) -> tuple[str, int] | None:
    """(mode, factor) for ``op``: its Builder attributes, else the session's; None: whole."""
    if op.settings.serialized is not None:
        return None  # already a piece
    mode = op.attributes.get(MODE_ATTRIBUTE)
    if mode is None:
        return default
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode == "none":
        return None
    factor = op.attributes.get(FACTOR_ATTRIBUTE, 1)
    if mode not in SERIALIZE_MODES or not isinstance(factor, int | np.integer) or factor < 1:
        raise TransformError(f"op {op.debug_name()}: {MODE_ATTRIBUTE} {mode!r} with "
                             f"{FACTOR_ATTRIBUTE} {factor!r}; expected one of none, "
                             f"{', '.join(SERIALIZE_MODES)} and a factor of 1 or more")
    return mode, int(factor)


def _cut(op: Op, mode: str, factor: int, layer: tuple[int, str] | None,
         rewriter: Rewriter) -> bool | None:
    """Replace ``op`` by its pieces; None (and nothing changed) when it cannot be cut."""
    if op.type.name != "MatMul" or factor < 1 or not op.has_input(0) or not op.has_input(1):
        return None
    x, w = op.input(0), op.input(1)
    if x.shape is None or w.shape is None or len(x.shape) < 2 or len(w.shape) < 2:
        return None
    size = {"input_channels": x.shape[-2], "reducing_dim": x.shape[-1],
            "output_channels": w.shape[-1]}[mode]
    if factor == 1:
        return False
    if size % factor:
        return None
    step, graph = size // factor, op.graph
    pieces = []
    for index in range(factor):
        lhs, rhs = x, w
        if mode in ("input_channels", "reducing_dim"):
            lhs = _slice(graph, x, -2 if mode == "input_channels" else -1, index, step, op,
                         rewriter)
        if mode in ("output_channels", "reducing_dim"):
            rhs = _slice(graph, w, -1 if mode == "output_channels" else -2, index, step, op,
                         rewriter)
        piece = rewriter.create_op(graph, "MatMul", [lhs, rhs], like=op)
        rewriter.set_op_name(piece, f"{op.settings.name or op.type.name}/serialized{index}")
        if layer is not None:
            rewriter.mark_serialized(piece, layer[0], index, layer[1])
        pieces.append(piece.output(0))
    if mode == "reducing_dim":
        total = pieces[0]
        for partial in pieces[1:]:
            total = rewriter.create_op(graph, "Add", [total, partial], like=op).output(0)
    else:
        axis = len(op.output(0).shape) - (2 if mode == "input_channels" else 1)
        total = rewriter.create_op(graph, "Concat", pieces, {"axis": axis}, like=op).output(0)
    rewriter.replace_all_uses(op.output(0), total)
    rewriter.erase_op(op)
    return True


def _slice(graph: Graph, tensor: Tensor, axis: int, index: int, step: int, like: Op,
           rewriter: Rewriter) -> Tensor:
    """Slice ``index`` (of ``step`` elements) of ``tensor`` along ``axis``."""
    rank = len(tensor.shape)
    bounds = [rewriter.constant(graph, np.array([value], np.int64))
              for value in (index * step, (index + 1) * step, axis % rank)]
    return rewriter.create_op(graph, "Slice", [tensor, *bounds], like=like).output(0)

