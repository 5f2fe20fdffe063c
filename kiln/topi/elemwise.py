"""Elementwise computes: unary math, activations, is_nan/is_inf, cast and bit_cast.

Narrow floats (float16, bfloat16, float8) are computed in float32 and rounded once at the end,
as the references do. ONNX Round is half-to-even: the `nearbyint` intrinsic, not C's `round`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.tir import PrimExpr, select
from kiln.topi.registry import ComputeError, register_compute
from kiln.topi.vmath import verf, vexp, vsigmoid, vtanh

Fn = Callable[..., PrimExpr]


def is_narrow(dtype: str) -> bool:
    return dtype in ("float16", "bfloat16") or dtype in dt.SMALL_FLOATS


def wide_dtype(dtype: str) -> str:
    """The dtype a float is computed in: float32 for narrow floats, itself otherwise."""
    return "float32" if is_narrow(dtype) else dtype


def widened(fn: Fn, attrs, v: PrimExpr) -> PrimExpr:
    """fn(attrs, v) computed in the wide dtype and cast back to v's dtype."""
    w = wide_dtype(v.dtype)
    return tir.cast(v.dtype, fn(attrs, tir.cast(w, v)))


def map_compute(x: te.Tensor, f: Callable[[PrimExpr], PrimExpr], name: str) -> te.Tensor:
    return te.compute(x.shape, lambda *i: f(x(*i)), name=name)


def _unary(op_name: str, fn: Fn) -> None:
    def compute(attrs, inputs, out_type, consts):
        return map_compute(inputs[0], lambda v: widened(fn, attrs, v), op_name.split(".")[1])

    register_compute(op_name)(compute)


def _c(v: PrimExpr, value: float) -> PrimExpr:
    """A constant in v's dtype."""
    return tir.const(value, v.dtype) if tir.is_float(v.dtype) else tir.const(int(value), v.dtype)


def _abs(a, v):
    if v.dtype.startswith("uint") or v.dtype == "bool":
        return v
    return te.fabs(v) if tir.is_float(v.dtype) else select(v < 0, -v, v)


def _sign(a, v):
    one, zero = _c(v, 1), _c(v, 0)
    out = select(v > 0, one, select(v < 0, _c(v, -1) if not v.dtype.startswith("uint") else zero, zero))
    return select(te.isnan(v), v, out) if tir.is_float(v.dtype) else out


def _intrin(name: str) -> Fn:
    f = getattr(te, name)
    return lambda a, v: f(v)


_MATH: dict[str, Fn] = {
    "abs": _abs, "neg": lambda a, v: -v, "sign": _sign, "reciprocal": lambda a, v: _c(v, 1) / v,
    "round": _intrin("nearbyint"), "not": lambda a, v: ~v,
    "bitwise_not": lambda a, v: tir.call("bitwise_not", v),
}
for _n in ("sqrt", "log", "ceil", "floor", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
           "cosh", "asinh", "acosh", "atanh"):
    _MATH[_n] = _intrin(_n)
# float32 exp, erf and tanh as branch-free expressions (within 1-3 ulp of libm), so the loops around
# them vectorize: a libm call keeps a whole fused conv or dense epilogue scalar
_MATH.update({"exp": lambda a, v: vexp(v), "erf": lambda a, v: verf(v), "tanh": lambda a, v: vtanh(v)})
for _n, _fn in _MATH.items():
    _unary(f"math.{_n}", _fn)


@register_compute("math.is_nan")
def _is_nan(attrs, inputs, out_type, consts):
    x = inputs[0]
    return map_compute(x, lambda v: te.isnan(tir.cast(wide_dtype(v.dtype), v)), "is_nan")


@register_compute("math.is_inf")
def _is_inf(attrs, inputs, out_type, consts):
    def f(v):
        w = tir.cast(wide_dtype(v.dtype), v)
        pos = (w > 0) & tir.const(bool(attrs.detect_positive))
        neg = (w < 0) & tir.const(bool(attrs.detect_negative))
        return te.isinf(w) & (pos | neg)

    return map_compute(inputs[0], f, "is_inf")


# ---------------------------------------------------------------------------------------------
# activations


def sigmoid(v: PrimExpr) -> PrimExpr:
    return vsigmoid(v)  # float32: vectorizable (SiLU and swish epilogues of convs)


def softplus(v: PrimExpr) -> PrimExpr:
    """log(1 + e^v) = max(v, 0) + log1p(e^-|v|), overflow-free."""
    return tir.max_(v, _c(v, 0)) + te.log1p(te.exp(-te.fabs(v)))


def _clip01(v: PrimExpr) -> PrimExpr:
    return tir.min_(tir.max_(v, _c(v, 0)), _c(v, 1))


def _gelu(a, v):
    if a.approximate == "tanh":
        inner = _c(v, math.sqrt(2 / math.pi)) * (v + _c(v, 0.044715) * v * v * v)
        return _c(v, 0.5) * v * (_c(v, 1) + vtanh(inner))
    return _c(v, 0.5) * v * (_c(v, 1) + verf(v * _c(v, 1 / math.sqrt(2))))  # float32: vectorizable erf


_ACTIVATIONS: dict[str, Fn] = {
    "leaky_relu": lambda a, v: select(v < 0, _c(v, a.alpha) * v, v),
    "elu": lambda a, v: select(v < 0, _c(v, a.alpha) * te.expm1(v), v),
    "selu": lambda a, v: _c(v, a.gamma) * select(v > 0, v, _c(v, a.alpha) * te.expm1(v)),
    "celu": lambda a, v: tir.max_(v, _c(v, 0)) + tir.min_(_c(v, 0), _c(v, a.alpha) * te.expm1(v / _c(v, a.alpha))),
    "sigmoid": lambda a, v: sigmoid(v),
    "hard_sigmoid": lambda a, v: _clip01(_c(v, a.alpha) * v + _c(v, a.beta)),
    "hard_swish": lambda a, v: v * _clip01(v / _c(v, 6) + _c(v, 0.5)),
    "softplus": lambda a, v: softplus(v),
    "softsign": lambda a, v: v / (_c(v, 1) + te.fabs(v)),
    "mish": lambda a, v: v * te.tanh(softplus(v)),
    "gelu": _gelu,
    "swish": lambda a, v: v * sigmoid(_c(v, a.alpha) * v),
    "thresholded_relu": lambda a, v: select(v > _c(v, a.alpha), v, _c(v, 0)),
}
for _n, _fn in _ACTIVATIONS.items():
    _unary(f"nn.{_n}", _fn)


@register_compute("nn.relu")
def _relu(attrs, inputs, out_type, consts):
    return map_compute(inputs[0], lambda v: tir.max_(v, _c(v, 0)), "relu")


@register_compute("nn.shrink")
def _shrink(attrs, inputs, out_type, consts):
    def f(v):
        w = tir.cast("float64" if not tir.is_float(v.dtype) else wide_dtype(v.dtype), v)
        out = select(w < _c(w, -attrs.lambd), w + _c(w, attrs.bias),
                     select(w > _c(w, attrs.lambd), w - _c(w, attrs.bias), _c(w, 0)))
        return tir.cast(v.dtype, out)

    return map_compute(inputs[0], f, "shrink")


# ---------------------------------------------------------------------------------------------
# casts


@register_compute("math.cast")
def _cast(attrs, inputs, out_type, consts):
    """Sub-byte ints are held one per byte, so casts to and from them are plain (wrapping) casts;
    float8_e8m0fnu follows its round_mode/saturate rules on the float32 exponent bits."""
    x, to = inputs[0], attrs.to
    if "string" in (x.dtype, to):
        raise ComputeError(f"math.cast from {x.dtype} to {to} has no compute")
    if to == "float8_e8m0fnu":
        return map_compute(x, lambda v: to_e8m0(v, attrs.saturate, attrs.round_mode), "cast")

    def f(v):
        if to in dt.SMALL_FLOATS and attrs.saturate:
            top = float(ml_dtypes.finfo(dt.to_numpy(to)).max)
            w = tir.cast(wide_dtype(v.dtype) if tir.is_float(v.dtype) else "float32", v)
            v = tir.min_(tir.max_(w, _c(w, -top)), _c(w, top))
        return tir.cast(to, v)

    return map_compute(x, f, "cast")


def to_e8m0(v: PrimExpr, saturate: int, round_mode: str) -> PrimExpr:
    """kiln.op.elemwise's e8m0 cast: |v|'s float32 exponent, rounded up/down/nearest on its fraction;
    saturation clamps overflow and inf to 254, without it overflow and zero are NaN (255)."""
    u32 = lambda n: tir.const(n, "uint32")
    bits = tir.call("bitwise_and", tir.call("reinterpret", tir.cast("float32", v), dtype="uint32"), u32(0x7FFFFFFF),
                    dtype="uint32")
    exp = tir.call("shift_right", bits, u32(23), dtype="uint32")
    frac = tir.call("bitwise_and", bits, u32(0x7FFFFF), dtype="uint32")
    special = tir.eq(exp, u32(0xFF))
    if round_mode == "up":
        exp = exp + tir.cast("uint32", tir.ne(frac, u32(0)))
    elif round_mode == "nearest":
        exp = exp + tir.cast("uint32", frac >= u32(0x400000))
    if saturate:
        exp = select(special & tir.eq(frac, u32(0)), u32(0xFE), tir.min_(exp, u32(0xFE)))
    else:
        exp = select((exp > u32(0xFE)) | tir.eq(bits, u32(0)), u32(0xFF), exp)
    exp = select(special & tir.ne(frac, u32(0)), u32(0xFF), exp)
    return tir.call("reinterpret", tir.cast("uint8", exp), dtype="float8_e8m0fnu")


@register_compute("math.bit_cast")
def _bit_cast(attrs, inputs, out_type, consts):
    x, to = inputs[0], attrs.to
    if np.dtype(dt.to_numpy(x.dtype)).itemsize != np.dtype(dt.to_numpy(to)).itemsize:
        raise ComputeError(f"math.bit_cast from {x.dtype} to {to} has no compute")
    if x.dtype in dt.SMALL_INTS or to in dt.SMALL_INTS:
        return map_compute(x, lambda v: _sub_byte_bit_cast(v, to), "bit_cast")
    if to == "bool":
        return map_compute(x, lambda v: tir.ne(tir.call("reinterpret", v, dtype="uint8"), tir.const(0, "uint8")),
                           "bit_cast")
    return map_compute(x, lambda v: tir.call("reinterpret", v, dtype=to), "bit_cast")


def _sub_byte_bit_cast(v: PrimExpr, to: str) -> PrimExpr:
    """Same low bits between int4/uint4/int2/uint2 and float4_e2m1fn: an integer cast wraps to the
    bits; float4 goes through its code (0..15) as uint8."""
    if v.dtype in dt.SMALL_INTS and to in dt.SMALL_INTS:
        return tir.cast(to, v)
    if to in dt.SMALL_INTS:
        return tir.cast(to, tir.call("reinterpret", v, dtype="uint8"))
    return tir.call("reinterpret", tir.cast("uint8", tir.cast("uint4", v)), dtype=to)


@register_compute("nn.dropout")
def _dropout(attrs, inputs, out_type, consts):
    """Inference dropout: the identity and an all-true mask (training: kiln.topi.dropout)."""
    if inputs[2] is not None and (consts[2] is None or bool(np.asarray(consts[2]).reshape(-1)[0])):
        from kiln.topi.dropout import training_dropout

        return training_dropout(attrs, inputs, out_type)
    x = inputs[0]
    return map_compute(x, lambda v: v, "dropout"), map_compute(x, lambda v: tir.const(True), "dropout_mask")
