"""Op family: recurrent layers — LSTM, GRU and RNN, with ONNX semantics.

Each op runs one cell over a sequence, in one or two directions (``direction``: forward,
reverse or bidirectional). Inputs: X ``[seq, batch, input]`` (``[batch, seq, input]`` when
``layout`` is 1, opset 14 on), W ``[dirs, gates * hidden, input]``, R ``[dirs, gates *
hidden, hidden]`` and the optional B ``[dirs, 2 * gates * hidden]``, sequence_lens
``[batch]``, initial_h (and LSTM's initial_c) ``[dirs, batch, hidden]`` and LSTM's peepholes
P ``[dirs, 3 * hidden]``; gates are 4 for LSTM (i, o, f, c), 3 for GRU (z, r, h), 1 for RNN.
Outputs, each optional: Y ``[seq, dirs, batch, hidden]``, Y_h (and LSTM's Y_c) ``[dirs,
batch, hidden]``; with ``layout`` 1, Y is ``[batch, seq, dirs, hidden]`` and Y_h, Y_c
``[batch, dirs, hidden]``. The shape rule checks every operand against these and takes the
hidden size from ``hidden_size`` or, absent, from R.

The fold computes the cells with numpy: every ``activations`` ONNX names, ``clip``, LSTM's
``input_forget`` and peepholes, GRU's ``linear_before_reset``. ``activation_alpha`` and
``activation_beta`` are consumed in order by the activations that take parameters (as
onnxruntime reads them; ONNX's text leaves the pairing loose). A ``sequence_lens`` shorter
than the sequence for some batch entry leaves the op unfolded (runtimes differ on what the
padding steps give), and so does a sequence holding more than the fold cap.

PopART's own ai.graphcore LSTM (its Builder's ``lstm``: one weight tensor for input and
state, Output and CellState outputs) has an exact shape rule and no fold: how its Poplibs
cell orders the gates is not stated here.

Layouts are not modelled: each op is a barrier (its results laid out linearly, its
exchange not counted), as PopART's ``LSTMOpx``, ``GRUOpx`` and ``RNNOpx`` create their
own weights and state. PopART takes a subset of these attributes (its LSTM and RNN only the
forward direction, none of them ``clip`` or activation parameters); the rules here state
the whole of ONNX, which contains PopART's subset. Like PopART (``getHighSubgraphValue``),
one recurrent op is worth outlining alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import numpy_dtype
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, Op
from popart_unwind.ops.common import FOLD_MAX_ELEMENTS, input_shape, ints
from popart_unwind.ops.registry import (
    HIGH_OUTLINE_VALUE,
    Constants,
    FoldResult,
    InferredOutputs,
    OpDef,
    register,
)

_FLOATS = ("float16", "bfloat16", "float32", "float64")
#: Gates per cell, the default activations per direction, and the outputs of each op.
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                        "RNN": ("Tanh",)}
_OUTPUTS = {"LSTM": 3, "GRU": 2, "RNN": 2}
#: Input positions.
_X, _W, _R, _B, _SEQ_LENS, _INITIAL_H, _INITIAL_C, _PEEPHOLES = range(8)


def _directions(op: Op) -> int:
    direction = op.attributes.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ShapeError(f"op {op.debug_name()}: direction {direction!r} is not forward, "
                         f"reverse or bidirectional")
    return 2 if direction == "bidirectional" else 1


def _batch_major(op: Op) -> bool:
    layout = int(op.attributes.get("layout", 0))
    if layout not in (0, 1):
        raise ShapeError(f"op {op.debug_name()}: layout is {layout}, ONNX allows 0 or 1")
    return layout == 1


def _expect(op: Op, index: int, what: str, want: tuple[int, ...]) -> None:
    if op.has_input(index) and input_shape(op, index) != want:
        raise ShapeError(f"op {op.debug_name()}: {what} has shape {input_shape(op, index)}, "
                         f"expected {want}")


def _geometry(op: Op) -> tuple[int, int, int, int, int]:
    """(sequence length, batch, input size, hidden size, directions), every operand's shape
    checked against them."""
    name = op.type.name
    x = input_shape(op, _X)
    if len(x) != 3:
        raise ShapeError(f"op {op.debug_name()}: X must be 3-D, got {x}")
    if op.input(_X).dtype not in _FLOATS:
        raise ShapeError(f"op {op.debug_name()}: X must be a float tensor, got "
                         f"{op.input(_X).dtype}")
    batch_major = _batch_major(op)
    seq, batch, size = (x[1], x[0], x[2]) if batch_major else x
    dirs = _directions(op)
    r = input_shape(op, _R)
    if len(r) != 3:
        raise ShapeError(f"op {op.debug_name()}: R must be 3-D, got {r}")
    hidden = int(op.attributes.get("hidden_size", r[2]))
    gates = _GATES[name]
    _expect(op, _W, "W", (dirs, gates * hidden, size))
    _expect(op, _R, "R", (dirs, gates * hidden, hidden))
    _expect(op, _B, "B", (dirs, 2 * gates * hidden))
    _expect(op, _SEQ_LENS, "sequence_lens", (batch,))
    state = (batch, dirs, hidden) if batch_major else (dirs, batch, hidden)
    _expect(op, _INITIAL_H, "initial_h", state)
    if name == "LSTM":
        _expect(op, _INITIAL_C, "initial_c", state)
        _expect(op, _PEEPHOLES, "P", (dirs, 3 * hidden))
    for index, tensor in op.input_map().items():
        if index != _SEQ_LENS and tensor.dtype != op.input(_X).dtype:
            raise ShapeError(f"op {op.debug_name()}: input {index} ({tensor.id!r}) is "
                             f"{tensor.dtype}, X is {op.input(_X).dtype}")
    if op.has_input(_SEQ_LENS) and op.input(_SEQ_LENS).dtype != "int32":
        raise ShapeError(f"op {op.debug_name()}: sequence_lens must be int32, got "
                         f"{op.input(_SEQ_LENS).dtype}")
    return seq, batch, size, hidden, dirs


def _infer(op: Op) -> InferredOutputs:
    seq, batch, _, hidden, dirs = _geometry(op)
    dtype = op.input(_X).dtype
    if _batch_major(op):
        y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
    else:
        y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
    return [(dtype, y)] + [(dtype, state)] * (_OUTPUTS[op.type.name] - 1)


# -- the fold --------------------------------------------------------------------------------
Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


#: ONNX's activation functions for recurrent cells: (function of x, alpha and beta, how many
#: of alpha and beta it takes, default alpha, default beta).
_ACTIVATIONS: dict[str, tuple[Callable[[np.ndarray, float, float], np.ndarray], int, float,
                              float]] = {
    "relu": (lambda x, a, b: np.maximum(x, 0), 0, 0.0, 0.0),
    "tanh": (lambda x, a, b: np.tanh(x), 0, 0.0, 0.0),
    "sigmoid": (lambda x, a, b: _sigmoid(x), 0, 0.0, 0.0),
    "affine": (lambda x, a, b: a * x + b, 2, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 1, 0.01, 0.0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1, 1.0, 0.0),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 2, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 2, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)), 1, 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), 0, 0.0, 0.0),
    "softplus": (lambda x, a, b: np.log1p(np.exp(x)), 0, 0.0, 0.0),
}


def _activations(op: Op, dirs: int) -> list[list[Activation]] | None:
    """Per direction, the cell's activations (with ``clip`` applied to their input); None
    for an activation ONNX does not name."""
    names = list(op.attributes.get("activations") or [])
    defaults = _DEFAULT_ACTIVATIONS[op.type.name]
    if not names:
        names = list(defaults) * dirs
    if len(names) != len(defaults) * dirs:
        raise ShapeError(f"op {op.debug_name()}: {len(names)} activations, expected "
                         f"{len(defaults) * dirs}")
    alphas = [float(v) for v in op.attributes.get("activation_alpha") or []]
    betas = [float(v) for v in op.attributes.get("activation_beta") or []]
    clip = op.attributes.get("clip")
    functions: list[Activation] = []
    for name in names:
        entry = _ACTIVATIONS.get(str(name).lower())
        if entry is None:
            return None
        function, takes, alpha, beta = entry
        if takes >= 1 and alphas:
            alpha = alphas.pop(0)
        if takes >= 2 and betas:
            beta = betas.pop(0)
        functions.append(_clipped(function, alpha, beta, clip))
    per = len(defaults)
    return [functions[d * per:(d + 1) * per] for d in range(dirs)]


def _clipped(function: Callable[[np.ndarray, float, float], np.ndarray], alpha: float,
             beta: float, clip: float | None) -> Activation:
    if clip is None:
        return lambda x: function(x, alpha, beta)
    bound = float(clip)
    return lambda x: function(np.clip(x, -bound, bound), alpha, beta)


def _lstm_cell(op: Op, fs: list[Activation], w: np.ndarray, r: np.ndarray, b: np.ndarray,
               p: np.ndarray) -> Callable:
    f, g, h = fs
    bias = b[:b.size // 2] + b[b.size // 2:]
    p_i, p_o, p_f = np.split(p, 3)
    couple = bool(op.attributes.get("input_forget", 0))

    def step(x: np.ndarray, state: tuple[np.ndarray, np.ndarray]):
        h_prev, c_prev = state
        i, o, fg, c = np.split(x @ w.T + h_prev @ r.T + bias, 4, axis=-1)
        forget = f(fg + p_f * c_prev)
        gate_in = 1 - forget if couple else f(i + p_i * c_prev)
        cell = forget * c_prev + gate_in * g(c)
        out = f(o + p_o * cell) * h(cell)
        return out, (out, cell)

    return step


def _gru_cell(op: Op, fs: list[Activation], w: np.ndarray, r: np.ndarray, b: np.ndarray,
              _p: np.ndarray) -> Callable:
    f, g = fs
    w_z, w_r, w_h = np.split(w, 3)
    r_z, r_r, r_h = np.split(r, 3)
    wb_z, wb_r, wb_h, rb_z, rb_r, rb_h = np.split(b, 6)
    linear = bool(op.attributes.get("linear_before_reset", 0))

    def step(x: np.ndarray, state: tuple[np.ndarray]):
        (h_prev,) = state
        z = f(x @ w_z.T + h_prev @ r_z.T + wb_z + rb_z)
        reset = f(x @ w_r.T + h_prev @ r_r.T + wb_r + rb_r)
        if linear:
            candidate = g(x @ w_h.T + reset * (h_prev @ r_h.T + rb_h) + wb_h)
        else:
            candidate = g(x @ w_h.T + (reset * h_prev) @ r_h.T + rb_h + wb_h)
        out = (1 - z) * candidate + z * h_prev
        return out, (out,)

    return step


def _rnn_cell(op: Op, fs: list[Activation], w: np.ndarray, r: np.ndarray, b: np.ndarray,
              _p: np.ndarray) -> Callable:
    (f,) = fs
    bias = b[:b.size // 2] + b[b.size // 2:]

    def step(x: np.ndarray, state: tuple[np.ndarray]):
        out = f(x @ w.T + state[0] @ r.T + bias)
        return out, (out,)

    return step


_CELLS = {"LSTM": _lstm_cell, "GRU": _gru_cell, "RNN": _rnn_cell}


def _fold(op: Op, constants: Constants) -> FoldResult:
    present = op.input_map()
    if any(constants[i] is None for i in present):
        return None
    if any(constants[i].size > FOLD_MAX_ELEMENTS for i in present):
        return None
    seq, batch, _, hidden, dirs = _geometry(op)
    name = op.type.name
    x = constants[_X]
    if seq * batch * hidden * dirs > FOLD_MAX_ELEMENTS or x.dtype.kind != "f":
        return None
    if op.has_input(_SEQ_LENS) and any(n != seq for n in ints(constants[_SEQ_LENS])):
        return None
    activations = _activations(op, dirs)
    if activations is None:
        return None
    batch_major = _batch_major(op)
    work = np.float64 if x.dtype == np.float64 else np.float32
    x = (x.swapaxes(0, 1) if batch_major else x).astype(work)
    gates = _GATES[name]

    def operand(index: int, shape: tuple[int, ...], state: bool = False) -> np.ndarray:
        if not op.has_input(index):
            return np.zeros(shape, work)
        value = constants[index].astype(work)
        return value.swapaxes(0, 1) if state and batch_major else value

    w, r = constants[_W].astype(work), constants[_R].astype(work)
    b = operand(_B, (dirs, 2 * gates * hidden))
    p = operand(_PEEPHOLES, (dirs, 3 * hidden))
    states = [operand(_INITIAL_H, (dirs, batch, hidden), state=True)]
    if name == "LSTM":
        states.append(operand(_INITIAL_C, (dirs, batch, hidden), state=True))
    reverse_first = op.attributes.get("direction", "forward") == "reverse"
    ys, finals = [], []
    with np.errstate(all="ignore"):
        for d in range(dirs):
            step = _CELLS[name](op, activations[d], w[d], r[d], b[d], p[d])
            state = tuple(s[d] for s in states)
            backwards = d == 1 or reverse_first
            outs = []
            for t in (range(seq - 1, -1, -1) if backwards else range(seq)):
                out, state = step(x[t], state)
                outs.append(out)
            ys.append(np.stack(outs[::-1] if backwards else outs))
            finals.append(state)
    y = np.stack(ys, axis=1)  # [seq, dirs, batch, hidden]
    results = [y] + [np.stack([f[k] for f in finals]) for k in range(len(states))]
    if batch_major:
        results = [y.transpose(2, 0, 1, 3)] + [s.swapaxes(0, 1) for s in results[1:]]
    dtype = numpy_dtype(op.input(_X).dtype)
    cast = [np.ascontiguousarray(v).astype(dtype) for v in results]
    return [cast[i] for i in op.output_map()]


for _name in _GATES:
    register(OpDef(_name, infer=_infer, fold=_fold, outline_value=HIGH_OUTLINE_VALUE))


# -- PopART's own LSTM ------------------------------------------------------------------------
def _infer_popart_lstm(op: Op) -> InferredOutputs:
    """PopART's ai.graphcore LSTM: X [seq, batch, input], Weights [4, input + hidden,
    hidden], the optional Bias [4, hidden], InitState [2, batch, hidden] and SeqLengths
    [batch]; Output [seq, batch, hidden] (``output_full_sequence``, the default) or
    [batch, hidden], and CellState [batch, hidden]."""
    x = input_shape(op, 0)
    if len(x) != 3 or op.input(0).dtype not in _FLOATS:
        raise ShapeError(f"op {op.debug_name()}: X must be a 3-D float tensor, got "
                         f"{op.input(0).dtype} {x}")
    seq, batch, size = x
    weights = input_shape(op, 1)
    if len(weights) != 3 or weights[0] != 4 or weights[1] <= size:
        raise ShapeError(f"op {op.debug_name()}: Weights of shape {weights} are not [4, "
                         f"{size} + hidden, hidden]")
    hidden = weights[2]
    _expect(op, 1, "Weights", (4, size + hidden, hidden))
    _expect(op, 2, "Bias", (4, hidden))
    _expect(op, 3, "InitState", (2, batch, hidden))
    _expect(op, 4, "SeqLengths", (batch,))
    full = bool(op.attributes.get("output_full_sequence", 1))
    dtype = op.input(0).dtype
    return [(dtype, (seq, batch, hidden) if full else (batch, hidden)),
            (dtype, (batch, hidden))]


register(OpDef("LSTM", domain=GRAPHCORE_DOMAIN, infer=_infer_popart_lstm,
               outline_value=HIGH_OUTLINE_VALUE))
