"""Op family: elementwise — unary maps, broadcasting binary and variadic ops, Where.

The activations (Elu, Selu, LeakyRelu, HardSigmoid, HardSwish, ThresholdedRelu, Softsign,
Shrink, Celu, Mish, Swish, PRelu) fold as ONNX's reference implementation computes them,
attributes defaulting to the float32 values of ONNX's schema; PRelu's slope broadcasts to X
one way, as ONNX defines.

The bitwise ops (BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitShift) fold on integers
only; BitShift as ONNX defines it for every shift amount. PopART's own elementwise ops of
its ai.graphcore opset 1 (the bitwise ones and Xnor, Atan2, Fmod, Remainder, Expm1, Log1p,
NearbyInt, Round, Gelu, GeluErf, Swish, Scale, ScaledAdd, Detach, Nop, Square,
IncrementMod, BinaryConstScalar, and AddLhsInplace imported as the out-of-place Add it
updates its left operand with: the IR models no aliasing writes; PopART's AddLhsInplaceOpx is
an in-place elementwise binary Opx, not an AddOpx, so the creator search is not stopped
there as at Add) are rows of the same table
in that domain (``_GRAPHCORE`` says what each computes).

Shapes broadcast as NumPy/ONNX do (``popart_unwind.shapes.broadcast_shapes``). Comparisons
and logical ops give bool; Cast gives its ``to`` type (to a float8 type its fold saturates
unless ``saturate`` is 0, as ONNX defines); everything else keeps the type of its
first data input. Folds compute with numpy on constant inputs (integer Div truncates toward
zero as ONNX defines; an integer division by zero is left unfolded) and drop identities
(x + 0, x - 0, x * 1, x / 1, x ** 1, Neg(Neg x), ...) only where the result has exactly
x's dtype and shape: a constant that broadcasts x wider must stay.

Gradients (``_GRADIENTS``, by name): each rule builds its input's partials as ONNX ops,
summed back over broadcast axes; the step functions (Floor, Ceil, Round, Sign) and PopART's
Detach pass none, and constant operands get none.

Layouts: the unwinding problem gets a ``sum_like``; inputs of the output's shape are
elementwise partners, each smaller (numpy-broadcast) input is tied to the Poplibs
broadcast-operand layout of the first full one. Poplar lays the result out like the
best-balanced full-shape input. PopART's creator search passes through a same-shape input to
the result, except through Add (``AddOpx`` is a dead end for it by default) and Where
(``BaseWhereOpx`` is a dead end for every input).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache, reduce
from math import prod
from typing import Any

import ml_dtypes
import numpy as np

from popart_unwind.errors import ShapeError
from popart_unwind.ir.dtypes import DTYPE_OF_ONNX, FLOAT8_DTYPES, ONNX_DTYPES, numpy_dtype
from popart_unwind.ir.op import GRAPHCORE_DOMAIN, ONNX_DOMAIN, Op
from popart_unwind.ir.tensor import Tensor, TensorType
from popart_unwind.machine.exchange import broadcast_read_need, read_need
from popart_unwind.machine.interface import ExchangeNeed, TileMachine
from popart_unwind.memory import Chain
from popart_unwind.ops.common import input_shape
from popart_unwind.ops.gradient import (
    GradientBuilder,
    GradientRule,
    gets_gradient,
    one,
    scalar,
    sum_to_shape,
)
from popart_unwind.ops.layout_rule import (
    InputTiles,
    LayoutRule,
    UnwindEmitter,
    count_equal,
    flat_tiles,
    known_shape,
)
from popart_unwind.ops.registry import (
    REGISTRY,
    Constants,
    FoldResult,
    InferredOutputs,
    OpDef,
    register,
)
from popart_unwind.shapes import broadcast_shapes

#: A numpy kernel: (op, input values) -> result, or None where folding would be wrong.
Kernel = Callable[[Op, list[np.ndarray]], np.ndarray | None]
MICROSOFT_DOMAIN = "com.microsoft"


# -- shape and dtype rules ------------------------------------------------------------------
@lru_cache(maxsize=4096)
def _broadcast(shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The shape engine's broadcast, remembered: models repeat a few shape combinations."""
    return broadcast_shapes(*shapes)


def broadcast_result(op: Op) -> tuple[int, ...]:
    shapes = [input_shape(op, i) for i in op.input_map()]
    try:
        return _broadcast(tuple(shapes))
    except ShapeError as error:
        raise ShapeError(f"op {op.debug_name()}: inputs of shapes {shapes} do not broadcast: "
                         f"{error}") from None


def _cast_target(op: Op) -> str:
    to = op.attributes.get("to")
    if to not in DTYPE_OF_ONNX:
        raise ShapeError(f"op {op.debug_name()}: 'to' is {to!r}, expected an ONNX dtype "
                         f"number among {sorted(DTYPE_OF_ONNX)}")
    return DTYPE_OF_ONNX[to]


def _dtype_rule(kind: str) -> Callable[[Op], str]:
    rules: dict[str, Callable[[Op], str]] = {
        "same": lambda op: op.input(0).dtype,
        "bool": lambda op: "bool",
        "cast": _cast_target,
        "like": lambda op: op.input(1).dtype,
        "where": lambda op: op.input(1).dtype,
    }
    return rules[kind]


def _infer_rule(kind: str, arity: int | None, broadcast: bool):
    dtype_of = _dtype_rule(kind)

    def infer(op: Op) -> InferredOutputs:
        count = len(op.input_map())
        if (arity is not None and count != arity) or count == 0:
            raise ShapeError(f"op {op.debug_name()} takes {arity or 'one or more'} inputs, "
                             f"got {count}")
        shape = broadcast_result(op) if broadcast else input_shape(op, 0)
        return [(dtype_of(op), shape)]

    return infer


# -- numpy kernels ----------------------------------------------------------------------------
def _is_int(array: np.ndarray) -> bool:
    return array.dtype.kind in "iu"


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _gelu(op: Op, x: np.ndarray) -> np.ndarray:
    if op.attributes.get("approximate", "none") == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1 + np.tanh(inner))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _scaled_add(op: Op, values: list[np.ndarray]) -> np.ndarray:
    """PopART's ScaledAdd: scale0 * X + scale1 * Y, the scales as attributes or as the
    tensors A and B."""
    if len(values) == 4:
        x, y, a, b = values
        return a * x + b * y
    x, y = values
    return _attribute(op, "scale0", 1.0) * x + _attribute(op, "scale1", 1.0) * y


def _is_inf(op: Op, x: np.ndarray) -> np.ndarray:
    negative = bool(op.attributes.get("detect_negative", 1))
    positive = bool(op.attributes.get("detect_positive", 1))
    return np.isinf(x) & (((x < 0) & negative) | ((x > 0) & positive))


def _increment_mod(op: Op, x: np.ndarray) -> np.ndarray | None:
    """PopART's IncrementMod: (x + increment) modulo ``modulus``, the remainder taking the
    dividend's sign (C's fmod, as Poplar's remainder does); for the non-negative counters
    PopART steps with it this is Python's %."""
    increment, modulus = float(op.attributes["increment"]), float(op.attributes["modulus"])
    if modulus == 0:
        return None
    return np.fmod(x.astype(np.float64) + increment, modulus)


#: PopART's BinaryConstScalar ``op`` attribute: the binary op it applies.
_CONST_SCALAR_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "Pow": np.power}


def binary_const_scalar(op: Op) -> tuple[str, float, int]:
    """PopART's BinaryConstScalar: the binary op, the scalar ``value`` (a float attribute)
    and which operand the scalar is (``scalar_in_index`` 0: value op x, 1: x op value)."""
    name = op.attributes.get("op")
    name = name.decode() if isinstance(name, bytes) else name
    index = int(op.attributes.get("scalar_in_index", 1))
    if name not in _CONST_SCALAR_OPS or index not in (0, 1) or "value" not in op.attributes:
        raise ShapeError(f"op {op.debug_name()}: needs 'value', 'op' one of "
                         f"{sorted(_CONST_SCALAR_OPS)} and 'scalar_in_index' 0 or 1, got "
                         f"op={name!r}, scalar_in_index={index}")
    return name, float(op.attributes["value"]), index


def _binary_const_scalar(op: Op, x: np.ndarray) -> np.ndarray | None:
    name, value, index = binary_const_scalar(op)
    scalar = np.asarray(value).astype(x.dtype)
    if name == "Div" and _is_int(x):
        return None  # PopART's integer division is not restated here
    operands = (scalar, x) if index == 0 else (x, scalar)
    return _CONST_SCALAR_OPS[name](*operands)


def _attribute(op: Op, name: str, default: float) -> float:
    """A float attribute, defaulting as ONNX's schema does (its float32 value)."""
    return float(op.attributes.get(name, np.float32(default)))


def _activation(function: Callable[[Op, np.ndarray], np.ndarray]) -> Kernel:
    """A unary map with attributes: ``function(op, x)``."""
    return lambda op, values: function(op, values[0])


def _elu(op: Op, x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, _attribute(op, "alpha", 1.0) * np.expm1(x))


def _selu(op: Op, x: np.ndarray) -> np.ndarray:
    alpha = _attribute(op, "alpha", 1.67326319217681884765625)
    gamma = _attribute(op, "gamma", 1.05070102214813232421875)
    return np.where(x > 0, x, alpha * np.expm1(x)) * gamma


def _leaky_relu(op: Op, x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, x * _attribute(op, "alpha", 0.01))


def _hard_sigmoid(op: Op, x: np.ndarray) -> np.ndarray:
    line = x * _attribute(op, "alpha", 0.2) + _attribute(op, "beta", 0.5)
    return np.maximum(0, np.minimum(1, line))


def _hard_swish(op: Op, x: np.ndarray) -> np.ndarray:
    """ONNX's function body: x * HardSigmoid(x) with alpha 1/6, beta 0.5."""
    return x * np.maximum(0, np.minimum(1, x * np.float32(1 / 6) + 0.5))


def _thresholded_relu(op: Op, x: np.ndarray) -> np.ndarray:
    return np.where(x > _attribute(op, "alpha", 1.0), x, 0)


def _shrink(op: Op, x: np.ndarray) -> np.ndarray:
    bias, lambd = _attribute(op, "bias", 0.0), _attribute(op, "lambd", 0.5)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


def _celu(op: Op, x: np.ndarray) -> np.ndarray:
    alpha = _attribute(op, "alpha", 1.0)
    return np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.zeros((), x.dtype), x)


def _swish(op: Op, x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-_attribute(op, "alpha", 1.0) * x))


def _prelu(op: Op, values: list[np.ndarray]) -> np.ndarray:
    x, slope = values
    return np.where(x > 0, x, x * slope)


def _infer_prelu(op: Op) -> InferredOutputs:
    """X's type: the slope broadcasts to X one way (ONNX: unidirectional broadcasting)."""
    count = len(op.input_map())
    if count != 2:
        raise ShapeError(f"op {op.debug_name()} takes 2 inputs, got {count}")
    shape = input_shape(op, 0)
    if broadcast_result(op) != tuple(shape):
        raise ShapeError(f"op {op.debug_name()}: its slope of shape {input_shape(op, 1)} "
                         f"does not broadcast to X's shape {shape}")
    return [(op.input(0).dtype, shape)]


def _unary(function: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    return lambda op, values: function(values[0])


def _cast(op: Op, values: list[np.ndarray]) -> np.ndarray | None:
    target = _cast_target(op)
    if target == "bfloat16":
        return None
    if target in FLOAT8_DTYPES:
        return _to_float8(values[0], target, bool(op.attributes.get("saturate", 1)))
    return values[0].astype(numpy_dtype(target))


def _to_float8(value: np.ndarray, target: str, saturate: bool) -> np.ndarray:
    """ONNX's Cast to a float8 type: rounded to nearest (ties to even); what lies beyond
    the type's range (infinities too) is its largest value when ``saturate`` (the default),
    else NaN, the type having no infinity; NaN stays NaN."""
    kind = numpy_dtype(target)
    wide = np.asarray(value).astype(np.float64)
    if saturate:
        limit = float(ml_dtypes.finfo(kind).max)
        wide = np.clip(wide, -limit, limit)  # NaN passes through np.clip
    return wide.astype(kind)


def _divide(op: Op, values: list[np.ndarray]) -> np.ndarray | None:
    a, b = values
    if not (_is_int(a) and _is_int(b)):
        return np.divide(a, b)
    if np.any(b == 0):
        return None
    floor = a // b
    return floor + ((a - floor * b != 0) & ((a < 0) != (b < 0)))  # toward zero, as ONNX


def _power(op: Op, values: list[np.ndarray]) -> np.ndarray | None:
    base, exponent = values
    if _is_int(base) and _is_int(exponent) and np.any(exponent < 0):
        return None
    return np.power(base, exponent)


def _modulo(op: Op, values: list[np.ndarray]) -> np.ndarray | None:
    a, b = values
    if _is_int(b) and np.any(b == 0):
        return None
    return np.fmod(a, b) if op.attributes.get("fmod", 0) else np.mod(a, b)


def _integers(function: Callable[..., np.ndarray]) -> Kernel:
    """A bitwise kernel: integer operands only (ONNX types the ops so); None otherwise."""
    def kernel(op: Op, values: list[np.ndarray]) -> np.ndarray | None:
        if not all(_is_int(v) for v in values):
            return None
        return function(*values)

    return kernel


def _bit_shift(op: Op, values: list[np.ndarray]) -> np.ndarray | None:
    """ONNX's BitShift: left shifts wrap around the width (signed values shifted as their
    bits); right shifts of signed values keep the sign. A shift by a negative amount or by
    the width or more leaves no bits: 0, or -1 for a negative value shifted right."""
    x, amount = values
    direction = op.attributes.get("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ShapeError(f"op {op.debug_name()}: direction is {direction!r}, expected LEFT or "
                         f"RIGHT")
    if not (_is_int(x) and _is_int(amount)):
        return None
    x, amount = np.broadcast_arrays(x, amount.astype(np.int64))
    inside = (amount >= 0) & (amount < 8 * x.itemsize)
    steps = np.where(inside, amount, 0)
    if direction == "RIGHT":
        shifted = np.right_shift(x, steps.astype(x.dtype))
        beyond = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else np.zeros_like(x)
        return np.where(inside, shifted, beyond).astype(x.dtype)
    bits = np.dtype(f"u{x.itemsize}")
    shifted = np.left_shift(x.view(bits), steps.astype(bits)).view(x.dtype)
    return np.where(inside, shifted, 0).astype(x.dtype)


def _variadic(function: np.ufunc) -> Kernel:
    return lambda op, values: reduce(function, values)


def _mean(op: Op, values: list[np.ndarray]) -> np.ndarray:
    return reduce(np.add, values) / np.asarray(len(values), dtype=values[0].dtype)


def _where(op: Op, values: list[np.ndarray]) -> np.ndarray:
    return np.where(values[0], values[1], values[2])


def _clip(op: Op, values: list[np.ndarray]) -> np.ndarray:
    """ONNX Clip: the bounds are inputs 1 and 2 from opset 11 (each optional), attributes
    before."""
    x, rest = values[0], list(values[1:])
    if op.type.version >= 11:
        low = rest.pop(0) if op.has_input(1) else None
        high = rest.pop(0) if op.has_input(2) else None
    else:
        low, high = op.attributes.get("min"), op.attributes.get("max")
    if low is not None:
        x = np.maximum(x, np.asarray(low, x.dtype))
    if high is not None:
        x = np.minimum(x, np.asarray(high, x.dtype))
    return x


def _infer_clip(op: Op) -> InferredOutputs:
    """The input's type; each bound present must be a single value (ONNX: a scalar)."""
    for index, what in ((1, "min"), (2, "max")):
        if op.has_input(index) and prod(input_shape(op, index)) != 1:
            raise ShapeError(f"op {op.debug_name()}: its {what} bound must be a scalar, got "
                             f"shape {input_shape(op, index)}")
    return [(op.input(0).dtype, broadcast_result(op))]


# -- folds ------------------------------------------------------------------------------------
def _typed_result(op: Op) -> tuple[str, tuple[int, ...]] | None:
    """The op's (dtype, shape): as shape inference set it, else inferred now; None while an
    input shape is unknown."""
    out = op.output(0)
    if out.shape is not None:
        return out.dtype, out.shape
    if any(t.shape is None for t in op.inputs):
        return None
    [(dtype, shape)] = _INFER[op.type.name](op)
    return dtype, tuple(shape)


def _passthrough(op: Op, index: int) -> FoldResult:
    """``[input index]`` when the op's result is exactly that input's dtype and shape."""
    source = op.input(index)
    result = _typed_result(op)
    return [source] if result == (source.dtype, source.shape) else None


def _all_equal(value: np.ndarray | None, scalar: int) -> bool:
    return value is not None and value.size > 0 and bool(np.all(value == scalar))


def _identity(op: Op, constants: Constants) -> FoldResult:
    """Drop x + 0, x - 0, x * 1, x / 1, x ** 1, single-input variadics, Where on a constant
    condition, Neg(Neg x), Not(Not x) and Cast to the same type."""
    name, count = op.type.name, len(op.input_map())
    right = constants[1] if len(constants) > 1 else None
    left = constants[0] if constants else None
    if name in ("Add", "Sub", "Mul", "Div", "Pow") and count == 2:
        unit = 0 if name in ("Add", "Sub") else 1
        if _all_equal(right, unit):
            return _passthrough(op, 0)
        if name in ("Add", "Mul") and _all_equal(left, unit):
            return _passthrough(op, 1)
    elif name in _VARIADIC and count == 1:
        return _passthrough(op, 0)
    elif name == "Where" and left is not None and left.size and (left.all() or not left.any()):
        return _passthrough(op, 1 if left.all() else 2)
    elif name in ("Neg", "Not"):
        inner = op.input(0).producer
        if inner is not None and inner.is_type(name) and inner.has_input(0):
            source = inner.input(0)
            result = _typed_result(op)
            return [source] if result == (source.dtype, source.shape) else None
    elif name == "Cast" and op.input(0).dtype == _cast_target(op):
        return _passthrough(op, 0)
    return None


def _fold_rule(kernel: Kernel):
    def fold(op: Op, constants: Constants) -> FoldResult:
        present = op.input_map()
        if present and all(constants[i] is not None for i in present):
            result = _typed_result(op)
            if result is None:
                return None
            dtype, shape = result
            with np.errstate(all="ignore"):
                value = kernel(op, [constants[i] for i in present])
                if value is None:
                    return None
                value = np.asarray(value).astype(numpy_dtype(dtype))
            return [np.broadcast_to(value, shape).copy()]
        return _identity(op, constants)

    return fold


# -- layouts ----------------------------------------------------------------------------
def _expanded(tensor: Tensor) -> bool:
    """Whether ``tensor`` broadcasts (an Expand, say) a tensor with fewer elements."""
    producer = tensor.producer
    return (producer is not None and REGISTRY.broadcasts_input(producer)
            and producer.has_input(0)
            and producer.input(0).shape is not None and tensor.shape is not None
            and prod(producer.input(0).shape) < prod(tensor.shape))


def _laid_out_on_its_own(tensor: Tensor) -> bool:
    """Whether ``tensor`` has a producer-less tensor's layout: it is one, or a view of one,
    or a scatter into one (the zeros a pooling's gradient is scattered into)."""
    while tensor.producer is not None:
        producer = tensor.producer
        if not REGISTRY.keeps_input_layout(producer) or not producer.has_input(0):
            return False
        tensor = producer.input(0)
    return True


def _normalised_next(op: Op) -> bool:
    """Whether a norm, softmax or reduction reads the op's result."""
    return op.has_output(0) and any(REGISTRY.reduces_input(c) for c in op.output(0).consumers)


def operand_of_result(op: Op, operand: Tensor, result_tiles: np.ndarray,
                       target: TileMachine) -> np.ndarray:
    """The layout of an elementwise operand that its result's tiles read without exchange
    (full shape) or with the fewest copies (numpy-broadcast)."""
    out_shape, shape = known_shape(op, op.output(0)), known_shape(op, operand)
    tiles = np.asarray(result_tiles).reshape(-1)
    if shape == out_shape:
        return tiles
    return np.asarray(target.broadcast_operand_tiles(tiles, out_shape, shape)).reshape(-1)


#: The popops operation each op type's Opx runs, where Poplibs' estimate of its inner loop
#: differs from one vector per cycle (``IpuModel.elementwise_cycles``; PopART's elementwise
#: Opx classes map ONNX's ops onto popops' unary and binary operations).
POPOPS_OPERATIONS: dict[str, str] = {
    "Abs": "ABSOLUTE", "Cos": "COS", "Div": "DIVIDE", "Equal": "EQUAL", "Erf": "ERF",
    "Exp": "EXPONENT", "Greater": "GREATER_THAN", "GreaterOrEqual": "GREATER_THAN_EQUAL",
    "Less": "LESS_THAN", "LessOrEqual": "LESS_THAN_EQUAL", "Log": "LOGARITHM",
    "Max": "MAXIMUM", "Min": "MINIMUM", "Neg": "NEGATE", "Pow": "POWER",
    "Reciprocal": "INVERSE", "Relu": "RELU", "Sigmoid": "SIGMOID", "Sin": "SIN",
    "Sqrt": "SQRT", "Tan": "TAN", "Tanh": "TANH",
}

#: Ops PopART lowers to one of popnn's non-linearity vertices (``popnn::nonLinearity``:
#: ``GeluOpx``, ``GeluErfOpx``, ``SwishOpx``), by (domain, name) -> popnn's name
#: (``IpuModel.elementwise_cycles``); ONNX's Gelu takes GELU or GELU_ERF by ``approximate``.
POPNN_OPERATIONS: dict[tuple[str, str], str] = {
    (GRAPHCORE_DOMAIN, "Gelu"): "GELU", (GRAPHCORE_DOMAIN, "GeluErf"): "GELU_ERF",
    (GRAPHCORE_DOMAIN, "Swish"): "SWISH", (MICROSOFT_DOMAIN, "Gelu"): "GELU_ERF",
}


class ElementwiseRule(LayoutRule):
    """Unary, Cast, broadcasting binary/variadic ops and Where.

    ``data_inputs`` lists the inputs read elementwise (default: all; CastLike reads only
    input 0's values). An input connected twice (x * x) counts once. ``popart_unwinds``:
    whether PopART's creator search passes through the op (not through Add).
    """

    kind = "elementwise"

    def __init__(self, data_inputs: tuple[int, ...] | None = None,
                 popart_unwinds: bool = True) -> None:
        self.data_inputs = data_inputs
        self.popart_unwinds = popart_unwinds

    def popops_operation(self, op: Op) -> str | None:
        name, domain = op.type.name, op.type.domain
        if name == "Gelu" and domain == ONNX_DOMAIN:
            return "GELU" if op.attributes.get("approximate", "none") == "tanh" else "GELU_ERF"
        if domain != ONNX_DOMAIN:
            return POPNN_OPERATIONS.get((domain, name))
        return POPOPS_OPERATIONS.get(name)

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
        out = known_shape(op, op.output(0))
        return [k for k, (_, t) in enumerate(self.operands(op)) if known_shape(op, t) == out]

    def inplace_inputs(self, op: Op) -> list[int]:
        """The full-shape inputs of the output's dtype (PopART's elementwise ops have
        in-place variants on such an input: ``AddLhsInplace``, ``ReluInplace``, ...); of
        a weight's update, only the weight (see ``updated_weight``)."""
        if len(op.outputs) != 1:
            return []
        updated = self.updated_weight(op)
        if updated is not None:
            return [updated]
        dtype = op.output(0).dtype
        operands = self.operands(op)
        return [operands[k][0] for k in self._full(op) if operands[k][1].dtype == dtype]

    def _partners(self, op: Op) -> list[int]:
        """The full-shape inputs whose layouts the planner ties: those not made by a
        broadcasting Expand (unless every one is). An expanded input repeats each element
        of a smaller tensor; tying a partner to its layout would pile the partner on the
        few tiles of the smaller one (a zero tensor a gradient is scattered into, say),
        where Poplar reads the expanded input as the broadcast operand it is.

        When a norm, softmax or reduction reads the result, an input laid out as a
        producer-less tensor (one, a view of one, a scatter into one) is not tied to
        computed ones: tied, the result keeps the computed input's layout (a matmul's or
        convolution's, each row over many tiles) and the statistics after it crowd; left
        free, it is laid out on its own and Poplar's result takes whichever input is
        better balanced (a ViT's position embedding added to its patches, then
        normalised; a ResNet's max-pool gradient, scattered into zeros, masked by the
        ReLU's gradient, then summed: docs/planner.md, the rule table)."""
        full = self._full(op)
        operands = self.operands(op)
        kept = [k for k in full if not _expanded(operands[k][1])] or full
        if _normalised_next(op):
            computed = [k for k in kept if not _laid_out_on_its_own(operands[k][1])]
            if computed and len(computed) < len(kept):
                return computed
        return kept

    def unwind(self, op: Op, emitter: UnwindEmitter) -> None:
        partners = self._partners(op)
        if not partners:  # every input broadcasts: nothing has the result's layout
            emitter.barrier(op)
            return
        left_out = set(self._full(op)) - set(partners)  # left untied (see _partners)
        kept = [k for k in range(len(self.operands(op))) if k not in left_out]
        operands = [self.operands(op)[k][1] for k in kept]
        full = [kept.index(k) for k in partners]
        values: dict[Any, float] = {"default": emitter.valuations.elementwise}
        for k in range(len(operands)):
            if k not in full:
                values[(full[0], k)] = emitter.valuations.bias
        out = op.output(0)
        result = emitter.graph.sum_like([emitter.tensor(t) for t in operands], full,
                                        values, name=out.id)
        emitter.define(out, result.out)

    def output_tiles(self, op: Op, input_tiles: InputTiles,
                     target: TileMachine) -> list[np.ndarray]:
        out, full = op.output(0), self._full(op)
        updated = self.updated_weight(op)
        if updated is not None and (tiles := flat_tiles(input_tiles, updated)) is not None:
            return [tiles.copy()]
        candidates = [flat_tiles(input_tiles, op_index)
                      for k, (op_index, _) in enumerate(self.operands(op)) if k in full]
        candidates = [c for c in candidates if c is not None]
        if not candidates:
            return [target.linear_tiles(known_shape(op, out), out.dtype)]
        return [candidates[target.elementwise_output(candidates)].copy()]

    def updated_weight(self, op: Op) -> int | None:
        """The input index of the weight ``op`` updates, or None: a result that leaves the
        graph, computed from a weight of its shape and dtype and something else (the step:
        ``w - lr * g``), is the weight's new value, which PopART's optimizer writes into
        the weight (an in-place VarUpdate) and the next step reads there, so it has the
        weight's layout whatever the other inputs'."""
        out = op.output(0)
        operands = self.operands(op)
        if len(op.outputs) != 1 or len(operands) < 2 or not out.is_graph_output():
            return None
        for index, tensor in operands:
            if tensor.tensor_type is TensorType.VARIABLE and tensor.shape == out.shape \
                    and tensor.dtype == out.dtype:
                return index
        return None

    def exchange(self, op: Op, input_tiles: InputTiles,
                 output_tiles: list[np.ndarray], target: TileMachine) -> ExchangeNeed:
        out_shape = known_shape(op, op.output(0))
        readers = np.asarray(output_tiles[0]).reshape(-1)
        need = ExchangeNeed.none(target.num_tiles)
        for op_index, tensor in self.operands(op):
            tiles = flat_tiles(input_tiles, op_index)
            if tiles is None:
                continue
            shape = known_shape(op, tensor)
            size = target.dtype_size(tensor.dtype)
            if shape == out_shape:
                need = need + read_need(readers, None, tiles, size, target.num_tiles)
            else:
                need = need + broadcast_read_need(readers, out_shape, shape, tiles, size,
                                                  target.num_tiles)
        return need

    def agreement(self, op: Op, input_tiles: InputTiles, target: TileMachine,
                  valuations: Any) -> tuple[float, float]:
        full, partners = self._full(op), self._partners(op)
        if not partners:
            return 0.0, 0.0
        operands = self.operands(op)
        left_out = set(full) - set(partners)  # left untied: no pair (see _partners)
        full = partners
        tiles = [flat_tiles(input_tiles, i) for i, _ in operands]
        out_shape = known_shape(op, op.output(0))
        score = bound = 0.0
        for a, b in ((a, b) for n, a in enumerate(full) for b in full[n + 1:]):
            bound += valuations.elementwise * prod(out_shape)
            if tiles[a] is not None and tiles[b] is not None:
                score += valuations.elementwise * count_equal(tiles[a], tiles[b])
        first = tiles[full[0]]
        for k, (_, tensor) in enumerate(operands):
            if k in full or k in left_out:
                continue
            shape = known_shape(op, tensor)
            bound += valuations.bias * prod(shape)
            if first is not None and tiles[k] is not None:
                wanted = target.broadcast_operand_tiles(first, out_shape, shape)
                score += valuations.bias * count_equal(tiles[k], wanted)
        return score, bound

    def best_input_tiles(self, op: Op, index: int, output_tiles: list[np.ndarray],
                         target: TileMachine) -> np.ndarray | None:
        """A full-shape input on the result's tiles; a broadcast one where most of its
        readers are (Poplibs' broadcast-operand layout)."""
        if index not in dict(self.operands(op)):
            return None
        return operand_of_result(op, op.input(index), output_tiles[0], target)

    def least_received(self, op: Op, input_tiles: InputTiles,
                       output_tiles: list[np.ndarray], planned: set[int],
                       target: TileMachine) -> int:
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

    def popart_view(self, op: Op, in_index: int, out_index: int) -> Chain | None:
        """A same-shape data input is its result, element for element
        (``ElementWiseBinaryOpx::unwindTensorLayout``)."""
        if not self.popart_unwinds or out_index != 0 or not op.has_input(in_index):
            return None
        if self.data_inputs is not None and in_index not in self.data_inputs:
            return None
        shape = known_shape(op, op.input(in_index))
        return Chain(shape) if shape == known_shape(op, op.output(0)) else None


ELEMENTWISE = ElementwiseRule()
#: CastLike reads only input 0's values (input 1 gives the type).
FIRST_INPUT_ELEMENTWISE = ElementwiseRule(data_inputs=(0,))
#: PopART's ``AddOpx`` is a dead end for the creator search (``getInputCreatorType``,
#: willow/src/popx/op/addx.cpp: only with decomposeGradSum or batch serialisation does it
#: defer to the elementwise rule).
ADD = ElementwiseRule(popart_unwinds=False)
#: PopART's ``BaseWhereOpx`` answers Deadend for every input (``getInputCreatorType``,
#: willow/src/popx/op/wherex.cpp: unwinding through it is left for later there).
WHERE = ElementwiseRule(popart_unwinds=False)
#: PopART's ``ScaledAddOpx`` and ``NopOpx`` (``willow/src/popx/op/scaledaddx.cpp``,
#: ``nopx.cpp``) derive from ``Opx`` itself, whose creator type is Deadend.
OPX_DEADEND = ElementwiseRule(popart_unwinds=False)


# -- the table ----------------------------------------------------------------------------
_UNARY: dict[str, Kernel] = {
    "Relu": _unary(lambda x: np.maximum(x, np.zeros((), x.dtype))),
    "Tanh": _unary(np.tanh),
    "Sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))),
    "Erf": _unary(_erf),
    "Sqrt": _unary(np.sqrt),
    "Exp": _unary(np.exp),
    "Log": _unary(np.log),
    "Neg": _unary(np.negative),
    "Abs": _unary(np.abs),
    "Reciprocal": _unary(lambda x: 1 / x),
    "Softplus": _unary(_softplus),
    "Softsign": _unary(lambda x: x / (1 + np.abs(x))),
    "Mish": _unary(lambda x: x * np.tanh(_softplus(x))),
    "Elu": _activation(_elu),
    "Selu": _activation(_selu),
    "LeakyRelu": _activation(_leaky_relu),
    "HardSigmoid": _activation(_hard_sigmoid),
    "HardSwish": _activation(_hard_swish),
    "ThresholdedRelu": _activation(_thresholded_relu),
    "Shrink": _activation(_shrink),
    "Celu": _activation(_celu),
    "Swish": _activation(_swish),
    "Sin": _unary(np.sin),
    "Cos": _unary(np.cos),
    "Tan": _unary(np.tan),
    "Asin": _unary(np.arcsin),
    "Acos": _unary(np.arccos),
    "Atan": _unary(np.arctan),
    "Sinh": _unary(np.sinh),
    "Cosh": _unary(np.cosh),
    "Asinh": _unary(np.arcsinh),
    "Acosh": _unary(np.arccosh),
    "Atanh": _unary(np.arctanh),
    "Floor": _unary(np.floor),
    "Ceil": _unary(np.ceil),
    "Round": _unary(np.round),  # half to even, as ONNX
    "Sign": _unary(np.sign),
    "Not": _unary(np.logical_not),
    "BitwiseNot": _integers(np.invert),
}
_UNARY_BOOL: dict[str, Kernel] = {
    "IsNaN": _unary(np.isnan),
    "IsInf": lambda op, values: _is_inf(op, values[0]),
}
_BINARY: dict[str, Kernel] = {
    "Add": lambda op, v: np.add(*v),
    "Sub": lambda op, v: np.subtract(*v),
    "Mul": lambda op, v: np.multiply(*v),
    "Div": _divide,
    "Pow": _power,
    "Mod": _modulo,
    "BitShift": _bit_shift,
    "BitwiseAnd": _integers(np.bitwise_and),
    "BitwiseOr": _integers(np.bitwise_or),
    "BitwiseXor": _integers(np.bitwise_xor),
}
#: PopART's own elementwise ops (its ai.graphcore opset 1) and their arity (None: two or
#: four). The bitwise ones mean what ONNX's do (and Xnor); Gelu is the tanh approximation
#: and GeluErf the exact form, as PopART's operator tests check them; Remainder takes the
#: divisor's sign (PopART rewrites it into Fmods that do so) and Fmod the dividend's;
#: NearbyInt rounds half to even. Round is not folded: what PopART's Round does with
#: halves is not stated here.
_GRAPHCORE: dict[str, tuple[Kernel, int | None]] = {
    "BitwiseNot": (_integers(np.invert), 1),
    "BitwiseAnd": (_integers(np.bitwise_and), 2),
    "BitwiseOr": (_integers(np.bitwise_or), 2),
    "BitwiseXor": (_integers(np.bitwise_xor), 2),
    "BitwiseXnor": (_integers(lambda a, b: np.invert(np.bitwise_xor(a, b))), 2),
    "Atan2": (lambda op, v: np.arctan2(*v), 2),
    "Fmod": (lambda op, v: None if _is_int(v[1]) and np.any(v[1] == 0) else np.fmod(*v), 2),
    "Remainder": (lambda op, v: None if _is_int(v[1]) and np.any(v[1] == 0) else np.mod(*v),
                  2),
    "Expm1": (_unary(np.expm1), 1),
    "Log1p": (_unary(np.log1p), 1),
    "NearbyInt": (_unary(np.round), 1),
    "Round": (lambda op, v: None, 1),
    "Gelu": (lambda op, v: _gelu_tanh(v[0]), 1),
    "GeluErf": (lambda op, v: 0.5 * v[0] * (1 + _erf(v[0] / math.sqrt(2))), 1),
    "Swish": (_unary(lambda x: x / (1 + np.exp(-x))), 1),
    "Scale": (lambda op, v: v[0] * _attribute(op, "scale", 1.0), 1),
    "ScaledAdd": (lambda op, v: _scaled_add(op, v), None),
    "Detach": (_unary(lambda x: x), 1),
    "Nop": (_unary(lambda x: x), 1),
    "Square": (_unary(np.square), 1),
    "IncrementMod": (lambda op, v: _increment_mod(op, v[0]), 1),
    "BinaryConstScalar": (lambda op, v: _binary_const_scalar(op, v[0]), 1),
    "AddLhsInplace": (lambda op, v: np.add(*v), 2),
}
_COMPARISONS: dict[str, Kernel] = {
    "Equal": lambda op, v: np.equal(*v),
    "Less": lambda op, v: np.less(*v),
    "Greater": lambda op, v: np.greater(*v),
    "LessOrEqual": lambda op, v: np.less_equal(*v),
    "GreaterOrEqual": lambda op, v: np.greater_equal(*v),
    "And": lambda op, v: np.logical_and(*v),
    "Or": lambda op, v: np.logical_or(*v),
    "Xor": lambda op, v: np.logical_xor(*v),
}
_VARIADIC: dict[str, Kernel] = {
    "Max": _variadic(np.maximum),
    "Min": _variadic(np.minimum),
    "Sum": _variadic(np.add),
    "Mean": _mean,
}
#: Operands may be swapped (only binary instances are, by the canonicalizer).
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "And", "Or", "Xor", "Equal", "Sum",
                         "Mean", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseXnor"})

_INFER: dict[str, Callable[[Op], InferredOutputs]] = {}


# -- gradients --------------------------------------------------------------------------------
# Each rule builds ONNX ops; x is input 0, y output 0, dY the result's gradient. Where PopART
# has a grad op of its own, the docstring names it.
def _op(builder: GradientBuilder, op_type: str, *inputs: Tensor, **attributes: Any) -> Tensor:
    return one(builder, op_type, list(inputs), attributes or None)


def _where_else_zero(builder: GradientBuilder, condition: Tensor, grad: Tensor) -> Tensor:
    """``dY`` where ``condition`` holds, 0 elsewhere."""
    return _op(builder, "Where", condition, grad, scalar(builder, 0.0, grad))


def _positive(builder: GradientBuilder, tensor: Tensor) -> Tensor:
    return _op(builder, "Greater", tensor, scalar(builder, 0.0, tensor))


def _binary_gradient(of_a: Callable[[GradientBuilder, Op, Tensor], Tensor | None],
                     of_b: Callable[[GradientBuilder, Op, Tensor], Tensor | None]
                     ) -> GradientRule:
    """A broadcasting binary op's rule from each operand's gradient at the result's shape
    (``of_a(builder, op, dY)``), summed back to the operand's shape."""
    def rule(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
        grad = grads[0]
        if grad is None:
            return [None, None]
        found: list[Tensor | None] = []
        for index, of in ((0, of_a), (1, of_b)):
            operand = op.input(index)
            full = of(builder, op, grad) if gets_gradient(operand) else None
            found.append(None if full is None else sum_to_shape(builder, full, operand.shape))
        return found
    return rule


def _negated(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    return one(builder, "Neg", [grad])


def _times_other(index: int) -> Callable[[GradientBuilder, Op, Tensor], Tensor]:
    return lambda builder, op, grad: one(builder, "Mul", [grad, op.input(1 - index)])


def _div_numerator(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    return one(builder, "Div", [grad, op.input(1)])


def _div_denominator(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    """d(a / b)/db = -(a / b) / b."""
    quotient = one(builder, "Div", [op.output(0), op.input(1)])
    return one(builder, "Neg", [one(builder, "Mul", [grad, quotient])])


def _pow_base(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    """d(a^b)/da = b · a^(b-1) (PopART's PowArg0GradOp); an integer exponent is cast to
    the base's type."""
    base, exponent = op.input(0), op.input(1)
    if exponent.dtype != base.dtype:
        exponent = _op(builder, "Cast", exponent, to=ONNX_DTYPES[base.dtype])
    lowered = _op(builder, "Pow", base, _op(builder, "Sub", exponent,
                                                 scalar(builder, 1.0, exponent)))
    return _op(builder, "Mul", grad, _op(builder, "Mul", exponent, lowered))


def _pow_exponent(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    """d(a^b)/db = a^b · ln a (PopART's PowArg1GradOp): defined for a > 0."""
    return _op(builder, "Mul", grad, _op(builder, "Mul", op.output(0),
                                         _op(builder, "Log", op.input(0))))


def _passed(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    return grad


def _sum_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """Every operand of a Sum gets the result's gradient, summed to its shape."""
    grad = grads[0]
    return [sum_to_shape(builder, grad, t.shape) if grad is not None and gets_gradient(t)
            else None for t in op.inputs]


def _mean_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """Every operand of a Mean gets dY / n, summed to its shape."""
    grad = grads[0]
    if grad is None:
        return [None] * len(op.inputs)
    share = _op(builder, "Div", grad, scalar(builder, len(op.inputs), grad))
    return _sum_gradient(builder, op, [share])


def _selected_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """Max, Min: each operand gets dY where it equals the result, summed to its shape (an
    operand tied with another for the result gets all of dY too, as the mask of PopART's
    MaxArgGradOp / MinArgGradOp gives it)."""
    grad, result = grads[0], op.output(0)
    return [sum_to_shape(builder, _where_else_zero(builder, _op(builder, "Equal", t, result),
                                                   grad), t.shape)
            if grad is not None and gets_gradient(t) else None for t in op.inputs]


def _unary_gradient(local: Callable[[GradientBuilder, Op, Tensor], Tensor]) -> GradientRule:
    """A unary map's rule: ``local(builder, op, dY)`` is dX."""
    def rule(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
        if grads[0] is None or not gets_gradient(op.input(0)):
            return [None]
        return [local(builder, op, grads[0])]
    return rule


def _no_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """A step function (Floor, Ceil, Round, Sign) or PopART's Detach: the partial is 0
    wherever it is defined, so no gradient flows back."""
    return [None] * len(op.inputs)


def _times(builder: GradientBuilder, grad: Tensor, *factors: Tensor) -> Tensor:
    for factor in factors:
        grad = _op(builder, "Mul", grad, factor)
    return grad


def _one_minus(builder: GradientBuilder, tensor: Tensor) -> Tensor:
    return _op(builder, "Sub", scalar(builder, 1.0, tensor), tensor)


def _gelu_erf_slope(builder: GradientBuilder, x: Tensor) -> Tensor:
    """d/dx [x · Φ(x)] = Φ(x) + x · φ(x), Φ the normal CDF and φ its density."""
    def c(value: float) -> Tensor:
        return scalar(builder, value, x)
    cdf = _times(builder, _op(builder, "Add", c(1.0), _op(builder, "Erf", _times(
        builder, x, c(1 / math.sqrt(2))))), c(0.5))
    density = _times(builder, _op(builder, "Exp", _times(builder, x, x, c(-0.5))),
                     c(1 / math.sqrt(2 * math.pi)))
    return _op(builder, "Add", cdf, _times(builder, x, density))


def _gelu_tanh_slope(builder: GradientBuilder, x: Tensor) -> Tensor:
    """With t = tanh(k (x + 0.044715 x³)), k = √(2/π): d/dx [x (1 + t) / 2] =
    (1 + t) / 2 + x (1 - t²) k (1 + 3 · 0.044715 x²) / 2."""
    def c(value: float) -> Tensor:
        return scalar(builder, value, x)
    k, cubic = math.sqrt(2 / math.pi), 0.044715
    square = _times(builder, x, x)
    t = _op(builder, "Tanh", _times(builder, x, _op(builder, "Add", c(1.0),
                                                    _times(builder, square, c(cubic))), c(k)))
    inner = _op(builder, "Add", c(1.0), _times(builder, square, c(3 * cubic)))
    slope = _times(builder, x, _one_minus(builder, _times(builder, t, t)), inner, c(k / 2))
    return _op(builder, "Add", _times(builder, _op(builder, "Add", c(1.0), t), c(0.5)), slope)


def _gelu_gradient(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    """ONNX Gelu: the exact or the tanh form's slope, as ``approximate`` says."""
    tanh = op.attributes.get("approximate", "none") == "tanh"
    slope = (_gelu_tanh_slope if tanh else _gelu_erf_slope)(builder, op.input(0))
    return _times(builder, grad, slope)


def _y(op: Op) -> Tensor:
    return op.output(0)


def _x(op: Op) -> Tensor:
    return op.input(0)


def _hard_sigmoid_gradient(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    """alpha · dY where 0 < y < 1, else 0 (PopART's HardSigmoidGradOp)."""
    y = _y(op)
    inside = _op(builder, "And", _positive(builder, y),
                 _op(builder, "Less", y, scalar(builder, 1.0, y)))
    return _where_else_zero(builder, inside, _times(builder, grad, scalar(
        builder, _attribute(op, "alpha", 0.2), grad)))


def _selu_gradient(builder: GradientBuilder, op: Op, grad: Tensor) -> Tensor:
    """gamma · dY for x > 0, else (y + alpha · gamma) · dY (PopART's SeluGradOp)."""
    alpha = _attribute(op, "alpha", 1.67326319217681884765625)
    gamma = _attribute(op, "gamma", 1.05070102214813232421875)
    below = _op(builder, "Add", _y(op), scalar(builder, alpha * gamma, grad))
    return _op(builder, "Where", _positive(builder, _x(op)),
               _times(builder, grad, scalar(builder, gamma, grad)),
               _times(builder, grad, below))


def _cast_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY cast back to x's type (PopART's CastGradOp); none for an integer x."""
    x = op.input(0)
    if grads[0] is None or not gets_gradient(x):
        return [None]
    return [_op(builder, "Cast", grads[0], to=ONNX_DTYPES[x.dtype])]


def _cast_like_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """dY cast like x; the type giver has none."""
    x = op.input(0)
    if grads[0] is None or not gets_gradient(x):
        return [None, None]
    return [_op(builder, "CastLike", grads[0], x), None]


def _where_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """Each branch gets dY where it was chosen, summed to its shape (PopART's
    WhereXGradOp, WhereYGradOp); the condition none."""
    grad = grads[0]
    if grad is None:
        return [None, None, None]
    condition, zero = op.input(0), scalar(builder, 0.0, grad)
    found: list[Tensor | None] = [None]
    for index, chosen in ((1, (grad, zero)), (2, (zero, grad))):
        branch = op.input(index)
        found.append(sum_to_shape(builder, _op(builder, "Where", condition, *chosen),
                                  branch.shape) if gets_gradient(branch) else None)
    return found


def _clip_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """x gets dY where min <= x <= max, i.e. where y equals x (PopART's ClipGradOp); a
    bound given as a tensor gets the sum of dY where x is beyond it (bounds with
    min <= max)."""
    grad, x = grads[0], op.input(0)
    if grad is None:
        return [None] * (max(op.input_map()) + 1)
    found: list[Tensor | None] = [
        sum_to_shape(builder, _where_else_zero(builder, _op(builder, "Equal", x, op.output(0)),
                                               grad), x.shape) if gets_gradient(x) else None]
    for index, beyond in ((1, "Less"), (2, "Greater")):
        if op.type.version < 11 or not op.has_input(index) or not gets_gradient(
                op.input(index)):
            found.append(None)
            continue
        bound = op.input(index)
        past = _where_else_zero(builder, _op(builder, beyond, x, bound), grad)
        found.append(sum_to_shape(builder, past, bound.shape))
    return found


def _prelu_gradient(builder: GradientBuilder, op: Op, grads) -> list[Tensor | None]:
    """x gets dY for x > 0 and slope · dY elsewhere; the slope gets x · dY where x <= 0,
    summed to its shape (PopART's PReluGradOp builds the same from an elementwise pass)."""
    grad = grads[0]
    x, slope = op.input(0), op.input(1)
    if grad is None:
        return [None, None]
    above = _positive(builder, x)
    grad_x = (_op(builder, "Where", above, grad, _times(builder, grad, slope))
              if gets_gradient(x) else None)
    grad_slope = None
    if gets_gradient(slope):
        below = _op(builder, "Where", above, scalar(builder, 0.0, grad), _times(builder, grad, x))
        grad_slope = sum_to_shape(builder, below, slope.shape)
    return [grad_x, grad_slope]


def _c(builder: GradientBuilder, value: float, like: Tensor) -> Tensor:
    return scalar(builder, value, like)


#: The local gradients of the unary maps: (builder, op, dY) -> dX.
_UNARY_GRADIENTS: dict[str, Callable[[GradientBuilder, Op, Tensor], Tensor]] = {
    # dY where y > 0 (ReluGradOp)
    "Relu": lambda b, op, g: _where_else_zero(b, _positive(b, _y(op)), g),
    # dY (1 - y²) (TanhGradOp)
    "Tanh": lambda b, op, g: _times(b, g, _one_minus(b, _times(b, _y(op), _y(op)))),
    # dY y (1 - y) (SigmoidGradOp)
    "Sigmoid": lambda b, op, g: _times(b, g, _y(op), _one_minus(b, _y(op))),
    # dY 2/√π exp(-x²)
    "Erf": lambda b, op, g: _times(b, g, _op(b, "Exp", _times(b, _x(op), _x(op), _c(b, -1, g))),
                                   _c(b, 2 / math.sqrt(math.pi), g)),
    # dY / (2 y) (SqrtGradOp)
    "Sqrt": lambda b, op, g: _op(b, "Div", _times(b, g, _c(b, 0.5, g)), _y(op)),
    # dY y (ExpGradOp)
    "Exp": lambda b, op, g: _times(b, g, _y(op)),
    # dY / x (LogGradOp)
    "Log": lambda b, op, g: _op(b, "Div", g, _x(op)),
    # dY sign(x) (AbsGradOp)
    "Abs": lambda b, op, g: _times(b, g, _op(b, "Sign", _x(op))),
    # -dY y² (ReciprocalGradOp)
    "Reciprocal": lambda b, op, g: _op(b, "Neg", _times(b, g, _y(op), _y(op))),
    # dY sigmoid(x) (SoftPlusGradOp)
    "Softplus": lambda b, op, g: _times(b, g, _op(b, "Sigmoid", _x(op))),
    # dY / (1 + |x|)² (SoftSignGradOp)
    "Softsign": lambda b, op, g: _op(b, "Div", g, _times(
        b, *[_op(b, "Add", _op(b, "Abs", _x(op)), _c(b, 1, g))] * 2)),
    # dY cos x (SinGradOp), -dY sin x (CosGradOp)
    "Sin": lambda b, op, g: _times(b, g, _op(b, "Cos", _x(op))),
    "Cos": lambda b, op, g: _op(b, "Neg", _times(b, g, _op(b, "Sin", _x(op)))),
    # dY for x > 0, alpha dY else (LeakyReluGradOp)
    "LeakyRelu": lambda b, op, g: _op(b, "Where", _positive(b, _x(op)), g, _times(
        b, g, _c(b, _attribute(op, "alpha", 0.01), g))),
    # dY for x > 0, (y + alpha) dY else (EluGradOp)
    "Elu": lambda b, op, g: _op(b, "Where", _positive(b, _x(op)), g, _times(
        b, g, _op(b, "Add", _y(op), _c(b, _attribute(op, "alpha", 1.0), g)))),
    "Selu": _selu_gradient,
    "HardSigmoid": _hard_sigmoid_gradient,
    "Gelu": _gelu_gradient,
}
#: PopART's ai.graphcore ops and com.microsoft's Gelu (the exact form).
_DOMAIN_GRADIENTS: dict[str, Callable[[GradientBuilder, Op, Tensor], Tensor]] = {
    f"{GRAPHCORE_DOMAIN}.Gelu": lambda b, op, g: _times(b, g, _gelu_tanh_slope(b, _x(op))),
    f"{GRAPHCORE_DOMAIN}.GeluErf": lambda b, op, g: _times(b, g, _gelu_erf_slope(b, _x(op))),
    f"{MICROSOFT_DOMAIN}.Gelu": lambda b, op, g: _times(b, g, _gelu_erf_slope(b, _x(op))),
    f"{GRAPHCORE_DOMAIN}.Scale": lambda b, op, g: _times(b, g, _c(
        b, _attribute(op, "scale", 1.0), g)),
    f"{GRAPHCORE_DOMAIN}.Nop": lambda b, op, g: g,
    # 2 x dY (PopART's Square has no grad op of its own: it is made by its patterns)
    f"{GRAPHCORE_DOMAIN}.Square": lambda b, op, g: _times(b, g, _x(op), _c(b, 2.0, g)),
}

#: The gradient rules of the table's ops, by name (``domain.name`` outside ai.onnx).
_GRADIENTS: dict[str, GradientRule] = {
    "Add": _binary_gradient(_passed, _passed),
    "Sub": _binary_gradient(_passed, _negated),
    "Mul": _binary_gradient(_times_other(0), _times_other(1)),
    "Div": _binary_gradient(_div_numerator, _div_denominator),
    "Pow": _binary_gradient(_pow_base, _pow_exponent),
    "Sum": _sum_gradient,
    "Mean": _mean_gradient,
    "Max": _selected_gradient,
    "Min": _selected_gradient,
    "Neg": _unary_gradient(_negated),
    "Cast": _cast_gradient,
    "CastLike": _cast_like_gradient,
    "Where": _where_gradient,
    "Clip": _clip_gradient,
    "PRelu": _prelu_gradient,
    f"{GRAPHCORE_DOMAIN}.Detach": _no_gradient,
    f"{GRAPHCORE_DOMAIN}.AddLhsInplace": _binary_gradient(_passed, _passed),
    **{name: _no_gradient for name in ("Floor", "Ceil", "Round", "Sign")},
    **{name: _unary_gradient(local) for name, local in _UNARY_GRADIENTS.items()},
    **{name: _unary_gradient(local) for name, local in _DOMAIN_GRADIENTS.items()},
}


def _define(name: str, kernel: Kernel, kind: str, arity: int | None, broadcast: bool,
            domain: str = ONNX_DOMAIN) -> None:
    key = name if domain == ONNX_DOMAIN else f"{domain}.{name}"
    infer = _INFER.setdefault(key, _infer_rule(kind, arity, broadcast))
    layout = (FIRST_INPUT_ELEMENTWISE if kind == "like" else ADD if name == "Add"
              else WHERE if name == "Where"
              else OPX_DEADEND if domain == GRAPHCORE_DOMAIN and name in ("ScaledAdd", "Nop")
              else ELEMENTWISE)
    register(OpDef(name, domain=domain, infer=infer, fold=_fold_rule(kernel),
                   commutative=name in COMMUTATIVE, layout=layout,
                   gradient=_GRADIENTS.get(key)))


for _name, _kernel in _UNARY.items():
    _define(_name, _kernel, "same", 1, broadcast=False)
for _name, _kernel in _UNARY_BOOL.items():
    _define(_name, _kernel, "bool", 1, broadcast=False)
for _name, _kernel in _BINARY.items():
    _define(_name, _kernel, "same", 2, broadcast=True)
for _name, _kernel in _COMPARISONS.items():
    _define(_name, _kernel, "bool", 2, broadcast=True)
for _name, _kernel in _VARIADIC.items():
    _define(_name, _kernel, "same", None, broadcast=True)
_define("Cast", _cast, "cast", 1, broadcast=False)
_define("CastLike", lambda op, v: None if op.input(1).dtype == "bfloat16" else v[0], "like", 2,
        broadcast=False)
_define("Where", _where, "where", 3, broadcast=True)
_INFER["PRelu"] = _infer_prelu
_define("PRelu", _prelu, "same", 2, broadcast=True)  # the slope a broadcast operand
_INFER["Clip"] = _infer_clip
_define("Clip", _clip, "same", None, broadcast=True)  # the bounds broadcast as scalars
_same_unary = _infer_rule("same", 1, broadcast=False)


def _checked_attributes(check: Callable[[Op], object]):
    """The unary shape rule, after ``check`` has read the op's attributes."""
    def infer(op: Op) -> InferredOutputs:
        check(op)
        return _same_unary(op)

    return infer


def _increment_mod_attributes(op: Op) -> None:
    if "increment" not in op.attributes or "modulus" not in op.attributes:
        raise ShapeError(f"op {op.debug_name()} needs 'increment' and 'modulus' attributes")


_INFER[f"{GRAPHCORE_DOMAIN}.BinaryConstScalar"] = _checked_attributes(binary_const_scalar)
_INFER[f"{GRAPHCORE_DOMAIN}.IncrementMod"] = _checked_attributes(_increment_mod_attributes)
for _name, (_kernel, _arity) in _GRAPHCORE.items():
    _define(_name, _kernel, "same", _arity, broadcast=_arity != 1, domain=GRAPHCORE_DOMAIN)
for _domain in (ONNX_DOMAIN, MICROSOFT_DOMAIN):
    _define("Gelu", lambda op, v: _gelu(op, v[0]), "same", 1, broadcast=False, domain=_domain)
