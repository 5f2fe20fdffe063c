"""Linear quantization computes: quantize_linear and dequantize_linear, per tensor, per axis and
per block, to and from the integer dtypes the C backend stores (int8/uint8/int16/uint16, int32
inputs). Arithmetic follows kiln.op.quant: divide in the precision dtype, round half to even in
float64, add the zero point, saturate; dequantize multiplies in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kiln import te, tir
from kiln.tir import PrimExpr
from kiln.topi.registry import ComputeError, register_compute, tensor_type

STORED_QUANT = ("int8", "uint8", "int16", "uint16")
_FLOATS = ("float16", "bfloat16", "float32", "float64")


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


@register_compute("quant.quantize_linear")
def _quantize_linear(attrs, inputs, out_type, consts):
    x, scale, zp = inputs[:3]
    out = tensor_type(out_type).dtype
    _check("quant.quantize_linear", "output", out, STORED_QUANT)
    _check("quant.quantize_linear", "y_scale", scale.dtype, _FLOATS + ("int32",))
    prec = attrs.precision or scale.dtype
    prec = prec if prec in _FLOATS else "float32"  # int32 scales divide in float32
    axis = attrs.axis % x.ndim if x.ndim else 0
    info = np.iinfo(out)

    def f(*i):
        q = tir.cast(prec, x(*i)) / tir.cast(prec, param_at(scale, i, axis, attrs.block_size))
        if prec in ("float16", "bfloat16"):  # the quotient rounded to prec, as numpy does
            q = tir.cast(prec, tir.cast("float32", q))
        v = te.nearbyint(tir.cast("float64", q))
        if zp is not None:
            v = v + tir.cast("float64", param_at(zp, i, axis, attrs.block_size))
        v = tir.max_(tir.min_(v, tir.const(float(info.max), "float64")), tir.const(float(info.min), "float64"))
        return tir.cast(out, v)

    return te.compute(x.shape, f, name="quantize_linear")


@register_compute("quant.dequantize_linear")
def _dequantize_linear(attrs, inputs, out_type, consts):
    x, scale, zp = inputs[:3]
    out = tensor_type(out_type).dtype
    _check("quant.dequantize_linear", "x", x.dtype, STORED_QUANT + ("int32",))
    _check("quant.dequantize_linear", "x_scale", scale.dtype, _FLOATS)
    axis = attrs.axis % x.ndim if x.ndim else 0

    def f(*i):
        q = tir.cast("int64", x(*i))
        if zp is not None:
            q = q - tir.cast("int64", param_at(zp, i, axis, attrs.block_size))
        s = tir.cast("float32", param_at(scale, i, axis, attrs.block_size))
        return tir.cast(out, tir.cast("float32", q) * s)

    return te.compute(x.shape, f, name="dequantize_linear")
