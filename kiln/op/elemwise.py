"""Elementwise and broadcasting math: unary functions, activations, arithmetic, comparisons,
logic, bitwise ops, variadic min/max/sum/mean, clip, where, and the casts.

References compute narrow floats (float16, bfloat16, float8) in float32 and round once at
the end, so every result is the correctly rounded value of the float32 computation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import TensorType
from kiln.op.registry import BROADCAST, ELEMWISE, define_op
from kiln.op.typerel import broadcast_shapes, check_dtype, same_dtype, tensor

SIGNED_NUMERIC = dt.FLOATS + dt.SIGNED
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
ALL_FLOATS = dt.FLOATS + FLOAT8
COMPARABLE = dt.NUMERIC + ("bool", "string")


# ---------------------------------------------------------------------------------------------
# type relations


def check_choice(value, allowed: tuple, what: str) -> None:
    if value not in allowed:
        raise TypeInferenceError(f"{what} is {value!r}; expected one of {', '.join(map(repr, allowed))}")


AttrCheck = Callable[[object], None]


def unary_rel(allowed: tuple[str, ...], out_dtype: str | None = None, check: AttrCheck | None = None):
    """Relation of a one-input op: same shape; dtype kept or fixed to `out_dtype`."""

    def rel(attrs, types, values):
        if check is not None:
            check(attrs)
        t = tensor(types[0])
        check_dtype(t, allowed)
        return TensorType(t.shape, out_dtype or t.dtype)

    return rel


def nary_rel(allowed: tuple[str, ...], out_dtype: str | None = None, check: AttrCheck | None = None):
    """Relation of an n-ary op over one shared dtype: numpy broadcasting of all shapes."""

    def rel(attrs, types, values):
        if check is not None:
            check(attrs)
        ts = [tensor(t, f"input {i}") for i, t in enumerate(types)]
        t = TensorType(broadcast_shapes(*(t.shape for t in ts)), same_dtype(ts))
        check_dtype(t, allowed, "inputs")
        return TensorType(t.shape, out_dtype or t.dtype)

    return rel


# ---------------------------------------------------------------------------------------------
# reference helpers


_NARROW_FLOATS = {dt.to_numpy(n) for n in ("float16", "bfloat16") + dt.SMALL_FLOATS}


def wide(x: np.ndarray) -> np.ndarray:
    """`x` in a dtype numpy computes well in: narrow floats become float32, others stay."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype in _NARROW_FLOATS else x


def _map(fn: Callable[..., np.ndarray], out: type | None = None) -> Callable:
    """Reference of a one-input op: `fn(attrs, x)` on the widened input, cast to the output dtype."""

    def ref(attrs, x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(attrs, wide(x))).astype(out or x.dtype, copy=False)

    return ref


def _zip(fn: Callable[..., np.ndarray], out: type | None = None) -> Callable:
    """Reference of a variadic op folding `fn(a, b)` left to right on widened inputs."""

    def ref(attrs, *xs):
        with np.errstate(all="ignore"):
            r = functools.reduce(fn, (wide(x) for x in xs))
            return np.asarray(r).astype(out or xs[0].dtype, copy=False)

    return ref


_ERF = np.frompyfunc(math.erf, 1, 1)


def np_erf(x: np.ndarray) -> np.ndarray:
    """Gauss error function in float64 (numpy has none)."""
    return np.asarray(_ERF(np.asarray(x, np.float64)), np.float64)


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray], allowed=dt.FLOATS, doc: str = ""):
    return define_op(name, pattern=ELEMWISE, infer=unary_rel(allowed), ref=_map(lambda a, x: fn(x)), doc=doc)


# ---------------------------------------------------------------------------------------------
# unary math

abs_ = _unary("math.abs", np.abs, dt.NUMERIC, "|x| (the most negative integer maps to itself).")
neg = _unary("math.neg", np.negative, SIGNED_NUMERIC, "-x (integers wrap).")
sign = _unary("math.sign", np.sign, dt.NUMERIC, "-1, 0 or 1 by the sign of x; NaN stays NaN.")
reciprocal = _unary("math.reciprocal", lambda x: 1 / x)
sqrt = _unary("math.sqrt", np.sqrt)
exp = _unary("math.exp", np.exp)
log = _unary("math.log", np.log)
erf = _unary("math.erf", np_erf)
ceil = _unary("math.ceil", np.ceil)
floor = _unary("math.floor", np.floor)
round_ = _unary("math.round", np.round, doc="Round half to even.")
sin = _unary("math.sin", np.sin)
cos = _unary("math.cos", np.cos)
tan = _unary("math.tan", np.tan)
asin = _unary("math.asin", np.arcsin)
acos = _unary("math.acos", np.arccos)
atan = _unary("math.atan", np.arctan)
sinh = _unary("math.sinh", np.sinh)
cosh = _unary("math.cosh", np.cosh)
tanh = _unary("math.tanh", np.tanh)
asinh = _unary("math.asinh", np.arcsinh)
acosh = _unary("math.acosh", np.arccosh)
atanh = _unary("math.atanh", np.arctanh)
logical_not = _unary("math.not", np.logical_not, ("bool",))
bitwise_not = _unary("math.bitwise_not", np.invert, dt.INTS)
is_nan = define_op("math.is_nan", pattern=ELEMWISE, infer=unary_rel(ALL_FLOATS, "bool"),
                   ref=_map(lambda a, x: np.isnan(x), np.bool_))


@dataclass(frozen=True)
class IsInfAttrs:
    detect_negative: int = 1
    detect_positive: int = 1


def _is_inf(a: IsInfAttrs, x: np.ndarray) -> np.ndarray:
    return np.isinf(x) & (((x > 0) & bool(a.detect_positive)) | ((x < 0) & bool(a.detect_negative)))


is_inf = define_op("math.is_inf", pattern=ELEMWISE, attrs=IsInfAttrs, infer=unary_rel(ALL_FLOATS, "bool"),
                   ref=_map(_is_inf, np.bool_), doc="True at +inf / -inf, each side when enabled.")


# ---------------------------------------------------------------------------------------------
# activations


def _activation(name: str, attrs: type | None, fn: Callable, allowed=dt.FLOATS, check: AttrCheck | None = None,
                doc: str = ""):
    return define_op(name, pattern=ELEMWISE, attrs=attrs, infer=unary_rel(allowed, check=check),
                     ref=_map(fn), doc=doc)


@dataclass(frozen=True)
class LeakyReluAttrs:
    alpha: float = 0.01


@dataclass(frozen=True)
class EluAttrs:
    alpha: float = 1.0


@dataclass(frozen=True)
class SeluAttrs:
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875


@dataclass(frozen=True)
class CeluAttrs:
    alpha: float = 1.0


@dataclass(frozen=True)
class HardSigmoidAttrs:
    alpha: float = 0.2
    beta: float = 0.5


@dataclass(frozen=True)
class GeluAttrs:
    approximate: str = "none"


@dataclass(frozen=True)
class SwishAttrs:
    alpha: float = 1.0


@dataclass(frozen=True)
class ThresholdedReluAttrs:
    alpha: float = 1.0


@dataclass(frozen=True)
class ShrinkAttrs:
    bias: float = 0.0
    lambd: float = 0.5


def _gelu(a: GeluAttrs, x: np.ndarray) -> np.ndarray:
    if a.approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np_erf(x / math.sqrt(2)))


def _shrink(a: ShrinkAttrs, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64) if x.dtype.kind in "iu" else x
    return np.where(x < -a.lambd, x + a.bias, np.where(x > a.lambd, x - a.bias, 0))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x.dtype.type(0), x)


relu = _activation("nn.relu", None, lambda a, x: np.maximum(x, x.dtype.type(0)), SIGNED_NUMERIC)
leaky_relu = _activation("nn.leaky_relu", LeakyReluAttrs, lambda a, x: np.where(x < 0, a.alpha * x, x))
elu = _activation("nn.elu", EluAttrs, lambda a, x: np.where(x < 0, a.alpha * np.expm1(x), x))
selu = _activation("nn.selu", SeluAttrs,
                   lambda a, x: a.gamma * np.where(x > 0, x, a.alpha * np.expm1(x)))
celu = _activation("nn.celu", CeluAttrs,
                   lambda a, x: np.maximum(x, 0) + np.minimum(0, a.alpha * np.expm1(x / a.alpha)))
sigmoid = _activation("nn.sigmoid", None, lambda a, x: np_sigmoid(x))
hard_sigmoid = _activation("nn.hard_sigmoid", HardSigmoidAttrs,
                           lambda a, x: np.clip(a.alpha * x + a.beta, 0, 1))
hard_swish = _activation("nn.hard_swish", None, lambda a, x: x * np.clip(x / 6 + 0.5, 0, 1))
softplus = _activation("nn.softplus", None, lambda a, x: _softplus(x), doc="log(1 + e^x), overflow-free.")
softsign = _activation("nn.softsign", None, lambda a, x: x / (1 + np.abs(x)))
mish = _activation("nn.mish", None, lambda a, x: x * np.tanh(_softplus(x)))
gelu = _activation("nn.gelu", GeluAttrs, _gelu,
                   check=lambda a: check_choice(a.approximate, ("none", "tanh"), "approximate"))
swish = _activation("nn.swish", SwishAttrs, lambda a, x: x * np_sigmoid(a.alpha * x))
thresholded_relu = _activation("nn.thresholded_relu", ThresholdedReluAttrs,
                               lambda a, x: np.where(x > a.alpha, x, 0))
shrink = _activation("nn.shrink", ShrinkAttrs, _shrink, dt.NUMERIC,
                     doc="x + bias below -lambd, x - bias above lambd, 0 between.")


prelu = define_op("nn.prelu", pattern=BROADCAST, inputs=2,
                  infer=nary_rel(SIGNED_NUMERIC + ("uint32", "uint64")),
                  ref=_zip(lambda x, s: np.where(x < 0, s * x, x)),
                  doc="x where x >= 0, slope * x below. ONNX asks slope to broadcast to x; like onnxruntime, "
                      "Kiln broadcasts both ways.")


# ---------------------------------------------------------------------------------------------
# arithmetic


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float division, or integer division truncating toward zero (C semantics)."""
    if a.dtype.kind == "f":
        return a / b
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


def _binary(name: str, fn: Callable, allowed, out: str | None = None, doc: str = ""):
    return define_op(name, pattern=BROADCAST, inputs=2, infer=nary_rel(allowed, out),
                     ref=_zip(fn, out and dt.to_numpy(out)), doc=doc)


add = _binary("math.add", np.add, dt.NUMERIC, doc="x + y with numpy broadcasting (integers wrap).")
sub = _binary("math.sub", np.subtract, dt.NUMERIC)
mul = _binary("math.mul", np.multiply, dt.NUMERIC)
div = _binary("math.div", _div, dt.NUMERIC, doc="x / y; integers truncate toward zero.")


@dataclass(frozen=True)
class ModAttrs:
    fmod: int = 0


def _mod_ref(a: ModAttrs, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    fn = np.fmod if a.fmod else np.mod
    with np.errstate(all="ignore"):
        return np.asarray(fn(wide(x), wide(y))).astype(x.dtype, copy=False)


mod = define_op("math.mod", pattern=BROADCAST, inputs=2, attrs=ModAttrs, ref=_mod_ref,
                infer=nary_rel(dt.NUMERIC, check=lambda a: check_choice(a.fmod, (0, 1), "fmod")),
                doc="Remainder with the sign of y (fmod=0) or of x (fmod=1, C fmod).")


def _pow_rel(attrs, types, values):
    x, y = tensor(types[0], "base"), tensor(types[1], "exponent")
    check_dtype(x, dt.NUMERIC, "base")
    check_dtype(y, dt.NUMERIC, "exponent")
    return TensorType(broadcast_shapes(x.shape, y.shape), x.dtype)


def _int_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Integer power; a negative exponent gives the truncated reciprocal (0 unless |x| == 1)."""
    p = np.power(x, np.maximum(y, 0).astype(x.dtype))
    neg = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 0, 1, -1), 0)).astype(x.dtype)
    return np.where(y < 0, neg, p)


def _pow_ref(attrs, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu" and y.dtype.kind in "iu":
            return np.asarray(_int_pow(x, y))
        calc = np.float64 if np.float64 in (x.dtype, y.dtype) or x.dtype.kind in "iu" else np.float32
        return np.asarray(np.power(x.astype(calc), y.astype(calc))).astype(x.dtype)


pow_ = define_op("math.pow", pattern=BROADCAST, inputs=2, infer=_pow_rel, ref=_pow_ref,
                doc="x ** y; the output has the base's dtype, the exponent may differ.")

# ---------------------------------------------------------------------------------------------
# comparison, logic, bitwise

equal = _binary("math.equal", np.equal, COMPARABLE, "bool")
greater = _binary("math.greater", np.greater, dt.NUMERIC, "bool")
greater_or_equal = _binary("math.greater_or_equal", np.greater_equal, dt.NUMERIC, "bool")
less = _binary("math.less", np.less, dt.NUMERIC, "bool")
less_or_equal = _binary("math.less_or_equal", np.less_equal, dt.NUMERIC, "bool")
logical_and = _binary("math.and", np.logical_and, ("bool",))
logical_or = _binary("math.or", np.logical_or, ("bool",))
logical_xor = _binary("math.xor", np.logical_xor, ("bool",))
bitwise_and = _binary("math.bitwise_and", np.bitwise_and, dt.INTS)
bitwise_or = _binary("math.bitwise_or", np.bitwise_or, dt.INTS)
bitwise_xor = _binary("math.bitwise_xor", np.bitwise_xor, dt.INTS)


@dataclass(frozen=True)
class BitShiftAttrs:
    direction: str


def _bit_shift_ref(a: BitShiftAttrs, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Shifts by y outside [0, bits) leave only the sign fill: -1 for a right shift of a negative
    x, else 0. Left shifts run on the unsigned view so bits past the sign bit drop off."""
    bits = x.dtype.itemsize * 8
    out_of_range = (y < 0) | (y >= bits)
    n = np.clip(y, 0, bits - 1)
    if a.direction == "RIGHT":
        shifted, fill = np.right_shift(x, n), -(x < 0).astype(x.dtype)
    else:
        u = np.dtype(f"u{x.dtype.itemsize}")
        shifted, fill = np.left_shift(x.view(u), n.astype(u)).view(x.dtype), np.zeros_like(x)
    return np.asarray(np.where(out_of_range, fill, shifted))


bit_shift = define_op("math.bit_shift", pattern=BROADCAST, inputs=2, attrs=BitShiftAttrs, ref=_bit_shift_ref,
                      infer=nary_rel(dt.INTS, check=lambda a: check_choice(a.direction, ("LEFT", "RIGHT"),
                                                                            "direction")),
                      doc="x << y or x >> y (arithmetic for signed x).")

# ---------------------------------------------------------------------------------------------
# variadic, clip, where


def _variadic(name: str, fn: Callable, allowed, doc: str = ""):
    return define_op(name, pattern=BROADCAST, inputs=(1, None), infer=nary_rel(allowed), ref=_zip(fn),
                     doc=doc)


max_ = _variadic("math.max", np.maximum, dt.NUMERIC, "Elementwise maximum of all inputs; NaN wins.")
min_ = _variadic("math.min", np.minimum, dt.NUMERIC, "Elementwise minimum of all inputs; NaN wins.")
sum_ = _variadic("math.sum", np.add, dt.FLOATS)


def _mean_ref(attrs, *xs: np.ndarray) -> np.ndarray:
    total = functools.reduce(np.add, (wide(x) for x in xs))
    return np.asarray(total / len(xs)).astype(xs[0].dtype, copy=False)


mean = define_op("math.mean", pattern=BROADCAST, inputs=(1, None), infer=nary_rel(dt.FLOATS),
                 ref=_mean_ref)


def _clip_rel(attrs, types, values):
    x = tensor(types[0])
    check_dtype(x, dt.NUMERIC)
    for t, what in zip(types[1:], ("min", "max")):
        if t is not None:
            bound = tensor(t, what)
            same_dtype([x, bound], f"input and {what}")
            if bound.shape is not None and len(bound.shape) > 0 and bound.shape != (1,):
                raise TypeInferenceError(f"{what} must be a scalar, got shape {bound.shape}")
    return x


def _clip_ref(attrs, x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None):
    """min(hi, max(x, lo)): when lo > hi every element becomes hi."""
    y = wide(x)
    if lo is not None:
        y = np.maximum(y, wide(lo).reshape(()))
    if hi is not None:
        y = np.minimum(y, wide(hi).reshape(()))
    return np.asarray(y).astype(x.dtype, copy=False)


clip = define_op("math.clip", pattern=BROADCAST, inputs=(1, 3), infer=_clip_rel, ref=_clip_ref,
                 doc="x limited to [min, max]; an omitted bound does not limit.")


def _where_rel(attrs, types, values):
    cond, x, y = tensor(types[0], "condition"), tensor(types[1], "x"), tensor(types[2], "y")
    check_dtype(cond, ("bool",), "condition")
    return TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), same_dtype([x, y], "x and y"))


where = define_op("math.where", pattern=BROADCAST, inputs=3, infer=_where_rel,
                  ref=lambda a, c, x, y: np.asarray(np.where(c, x, y)).astype(x.dtype, copy=False),
                  doc="x where condition holds, else y (all three broadcast).")

# ---------------------------------------------------------------------------------------------
# casts

ROUND_MODES = ("up", "down", "nearest")


@dataclass(frozen=True)
class CastAttrs:
    to: str
    saturate: int = 1
    round_mode: str = "up"


def _cast_rel(attrs: CastAttrs, types, values):
    check_choice(attrs.to, dt.ALL, "to")
    check_choice(attrs.saturate, (0, 1), "saturate")
    check_choice(attrs.round_mode, ROUND_MODES, "round_mode")
    return TensorType(tensor(types[0]).shape, attrs.to)


def _parse_number(s: str, integral: bool) -> int | float:
    """ONNX string -> number: plain or scientific literals, case-insensitive [+-]INF and NaN."""
    s = s.strip()
    if integral:
        try:
            return int(s)
        except ValueError:
            return int(float(s))
    return float(s)


def _from_strings(x: np.ndarray, to: str) -> np.ndarray:
    """Strings as int64/uint64 (integral targets, exact) or float64 numbers before the cast."""
    integral = to in dt.INTS + dt.SMALL_INTS + ("bool",)
    nums = [_parse_number(str(s), integral) for s in x.flat]
    if integral:
        return np.array(nums, dtype=object).astype(np.uint64 if to == "uint64" else np.int64).reshape(x.shape)
    return np.array(nums, dtype=np.float64).reshape(x.shape)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers as plain decimal strings; infinities and NaN as the literals Cast parses back."""
    if x.dtype == np.bool_ or dt.from_numpy(x.dtype) in dt.SMALL_INTS:
        x = x.astype(np.int64)
    elif x.dtype != np.float16:
        x = wide(x)
    out = x.astype(np.str_).astype(object)
    if x.dtype.kind == "f":
        out[np.isnan(x)] = "NaN"
        out[np.isposinf(x)] = "INF"
        out[np.isneginf(x)] = "-INF"
    return out


def _to_e8m0(x: np.ndarray, saturate: int, round_mode: str) -> np.ndarray:
    """float8_e8m0fnu keeps only a power-of-two exponent: round |x|'s float32 exponent per
    `round_mode`. Saturation clamps overflow and Inf to the largest exponent; without it,
    overflow, Inf and zero become NaN. The sign is ignored (negative inputs are undefined)."""
    bits = np.abs(x.astype(np.float32)).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.int32)
    frac = bits & 0x7FFFFF
    special = exp == 0xFF
    if round_mode == "up":
        exp = exp + (frac != 0)
    elif round_mode == "nearest":
        exp = exp + (frac >= 0x400000)
    if saturate:
        exp = np.where(special & (frac == 0), 0xFE, np.minimum(exp, 0xFE))
    else:
        exp = np.where((exp > 0xFE) | (bits == 0), 0xFF, exp)
    exp = np.where(special & (frac != 0), 0xFF, exp)
    return exp.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def _cast_ref(attrs: CastAttrs, x: np.ndarray) -> np.ndarray:
    if attrs.to == "string":
        return x.copy() if x.dtype == object else _to_strings(x)
    if x.dtype == object:
        x = _from_strings(x, attrs.to)
    with np.errstate(all="ignore"):
        if attrs.to == "float8_e8m0fnu":
            return _to_e8m0(x, attrs.saturate, attrs.round_mode)
        target = dt.to_numpy(attrs.to)
        if attrs.to in FLOAT8 and attrs.saturate:
            top = float(ml_dtypes.finfo(target).max)
            x = np.clip(wide(x), -top, top)
        return np.asarray(_astype(x, target))


def _astype(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """x.astype(target), through int64 (integers: wraps as ONNX says) or float32 where ml_dtypes has no
    direct cast (between its sub-byte ints, or between them and float8_e8m0fnu)."""
    try:
        return x.astype(target)
    except TypeError:
        via = np.int64 if np.issubdtype(x.dtype, np.integer) or x.dtype.name in SUB_BYTE_INTS else np.float32
        return x.astype(via).astype(target)


SUB_BYTE_INTS = ("int4", "uint4", "int2", "uint2")


cast = define_op("math.cast", pattern=ELEMWISE, attrs=CastAttrs, infer=_cast_rel, ref=_cast_ref,
                 doc="Convert elements to dtype `to` (float8 saturate, e8m0 round_mode, strings).")


@dataclass(frozen=True)
class BitCastAttrs:
    to: str


def bit_width(name: str) -> int:
    if name in ("int4", "uint4", "float4_e2m1fn"):
        return 4
    if name in ("int2", "uint2"):
        return 2
    return dt.to_numpy(name).itemsize * 8


def _bit_cast_rel(attrs: BitCastAttrs, types, values):
    x = tensor(types[0])
    check_choice(attrs.to, dt.ALL, "to")
    if "string" in (x.dtype, attrs.to):
        raise TypeInferenceError("BitCast does not apply to strings")
    if bit_width(x.dtype) != bit_width(attrs.to):
        raise TypeInferenceError(f"cannot bit-cast {x.dtype} ({bit_width(x.dtype)} bits) to {attrs.to} "
                                 f"({bit_width(attrs.to)} bits)")
    return TensorType(x.shape, attrs.to)


def _bit_cast_ref(attrs: BitCastAttrs, x: np.ndarray) -> np.ndarray:
    """Same bits, new dtype (sub-byte types sit in the low bits of one byte each)."""
    if attrs.to == "bool":
        return x.view(np.uint8) != 0
    return x.copy().view(dt.to_numpy(attrs.to))


bit_cast = define_op("math.bit_cast", pattern=ELEMWISE, attrs=BitCastAttrs, infer=_bit_cast_rel,
                     ref=_bit_cast_ref, doc="Reinterpret the bits of each element as dtype `to`.")
