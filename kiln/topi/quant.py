"""Linear quantization computes: quantize_linear and dequantize_linear, per tensor, per axis and
per block, to and from every quantized dtype (int2..int16, unsigned too, float8, float4; int32
inputs). Arithmetic follows kiln.op.quant: divide in the precision dtype, round half to even in
float64 (integers only), add the zero point, saturate; dequantize multiplies in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes

from kiln import te, tir
from kiln.ir import dtype as dt
from kiln.op.quant import QUANT_FLOATS, QUANT_INTS
from kiln.tir import PrimExpr
from kiln.topi.reduction import reduce_compute
from kiln.topi.registry import ComputeError, register_compute, tensor_type

STORED_QUANT = QUANT_INTS + QUANT_FLOATS
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_E8M0 = ("float8_e8m0fnu",)


def param_at(p: te.Tensor, i: Sequence[PrimExpr], axis: int, block_size: int) -> PrimExpr:
    """A scale or zero point read for element i of x (kiln.op.quant.expand_param's layout)."""
    if all(isinstance(d, tir.IntImm) and d.value == 1 for d in p.shape):
        return p(*(tir.const(0) for _ in p.shape))
    if not block_size:
        return p(i[axis])
    return p(*(v // block_size if k == axis else v for k, v in enumerate(i)))


def _check(name: str, what: str, dtype: str, allowed: Sequence[str]) -> None:
    if dtype not in allowed:
        raise ComputeError(f"{name}: {what} dtype {dtype} has no compute (supported: {', '.join(allowed)})")


def _saturation_range(out: str, saturate: int) -> tuple[float | None, float | None]:
    """The range kiln.op.quant.quantize_values clamps to: integers always, small floats when saturating
    (float4, which has no inf or NaN, always); None: no clamp."""
    if out in QUANT_INTS:
        info = ml_dtypes.iinfo(dt.to_numpy(out))
        return float(info.min), float(info.max)
    if saturate or out == "float4_e2m1fn":
        top = float(ml_dtypes.finfo(dt.to_numpy(out)).max)
        return -top, top
    return None, None


@register_compute("quant.quantize_linear")
def _quantize_linear(attrs, inputs, out_type, consts):
    x, scale, zp = inputs[:3]
    out = tensor_type(out_type).dtype
    _check("quant.quantize_linear", "output", out, STORED_QUANT)
    _check("quant.quantize_linear", "y_scale", scale.dtype, _FLOATS + ("int32",) + _E8M0)
    prec = attrs.precision or scale.dtype
    prec = prec if prec in _FLOATS else "float32"  # int32 / e8m0 scales divide in float32
    axis = attrs.axis % x.ndim if x.ndim else 0
    lo, hi = _saturation_range(out, attrs.saturate)

    def f(*i):
        q = tir.cast(prec, x(*i)) / tir.cast(prec, param_at(scale, i, axis, attrs.block_size))
        if prec in ("float16", "bfloat16"):  # the quotient rounded to prec, as numpy does
            q = tir.cast(prec, tir.cast("float32", q))
        v = tir.cast("float64", q)
        if out in QUANT_INTS:  # NOTE: round before adding the zero point: ties go to the even quotient
            v = te.nearbyint(v)
        if zp is not None:
            v = v + tir.cast("float64", param_at(zp, i, axis, attrs.block_size))
        if hi is not None:
            v = tir.max_(tir.min_(v, tir.const(hi, "float64")), tir.const(lo, "float64"))
        return tir.cast(out, v)

    return te.compute(x.shape, f, name="quantize_linear")


@register_compute("quant.dequantize_linear")
def _dequantize_linear(attrs, inputs, out_type, consts):
    x, scale, zp = inputs[:3]
    out = tensor_type(out_type).dtype
    _check("quant.dequantize_linear", "x", x.dtype, STORED_QUANT + ("int32",))
    _check("quant.dequantize_linear", "x_scale", scale.dtype, _FLOATS + _E8M0)
    axis = attrs.axis % x.ndim if x.ndim else 0
    real = "float64" if x.dtype in QUANT_FLOATS else "int64"  # kiln.op.quant.as_real

    def f(*i):
        q = tir.cast(real, x(*i))
        if zp is not None:
            q = q - tir.cast(real, param_at(zp, i, axis, attrs.block_size))
        s = tir.cast("float32", param_at(scale, i, axis, attrs.block_size))
        return tir.cast(out, tir.cast("float32", q) * s)

    return te.compute(x.shape, f, name="dequantize_linear")


@register_compute("quant.dynamic_quantize_linear")
def _dynamic_quantize_linear(attrs, inputs, out_type, consts):
    """kiln.op.quant's DynamicQuantizeLinear in float32: the range [min(0, min x), max(0, max x)]
    maps onto [0, 255] (scale 1 when it is empty), then x quantizes like quantize_linear."""
    x = inputs[0]
    axes = tuple(range(x.ndim))
    f32 = lambda v: tir.const(v, "float32")

    def over(reducer, name):
        return reduce_compute(x, axes, False, lambda load, ks, kidx: reducer(load([k.var for k in ks]), ks), name)

    lo_t, hi_t = (over(te.min, "dql_min"), over(te.max, "dql_max")) if x.ndim else (x, x)

    def scale_of() -> PrimExpr:
        lo, hi = tir.select(lo_t() < f32(0), lo_t(), f32(0)), tir.select(hi_t() > f32(0), hi_t(), f32(0))
        return tir.select(tir.ne(hi, lo), (hi - lo) / f32(255), f32(1))

    def zp_of(s: PrimExpr) -> PrimExpr:
        lo = tir.select(lo_t() < f32(0), lo_t(), f32(0))
        return te.nearbyint(tir.max_(tir.min_(f32(0) - lo / s, f32(255)), f32(0)))

    scale = te.compute((), scale_of, name="dql_scale")
    zp = te.compute((), lambda: zp_of(scale()), name="dql_zero_point_f")

    def y_of(*i):
        v = tir.cast("float64", te.nearbyint(x(*i) / scale()) + zp())
        return tir.cast("uint8", tir.max_(tir.min_(te.nearbyint(v), tir.const(255.0, "float64")),
                                          tir.const(0.0, "float64")))

    y = te.compute(x.shape, y_of, name="dql_y")
    return y, scale, te.compute((), lambda: tir.cast("uint8", zp()), name="dql_zero_point")
