"""QLinearConv (kiln/op/quant.py): ConvInteger's int32 accumulation (kiln/topi/conv_integer.py), plus the
int32 bias, requantized as the reference does: (acc + bias) * (x_scale * w_scale / y_scale) + y_zero_point
in float64, rounded half to even and saturated to y's dtype.

The reference accumulates in int64; int32 is exact as long as the worst-case sum fits, so a reduction too
long for that has no compute. Float8 operands have no compute either (they run on the host).
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.ir.types import TensorType
from kiln.tir import PrimExpr
from kiln.topi.registry import ComputeError, compute_call, register_compute, static_shape, tensor_type

NAME = "quant.qlinear_conv"
F64 = "float64"
_INTS = ("int8", "uint8")
_I32_MAX = 2**31 - 1


def _scalar(p: te.Tensor, what: str) -> PrimExpr:
    """A one-element parameter's value as float64."""
    shape = static_shape(NAME, p)
    if int(np.prod(shape)) != 1:
        raise ComputeError(f"{NAME}: {what} of shape {shape} must hold one value")
    return tir.cast(F64, p(*(tir.const(0) for _ in shape)))


def _per_channel(p: te.Tensor, m: PrimExpr, channels: int, what: str) -> PrimExpr:
    """One value, or one per output channel read at channel m, as float64."""
    shape = static_shape(NAME, p)
    size = int(np.prod(shape))
    if size == 1:
        return _scalar(p, what)
    if len(shape) == 1 and size == channels:
        return tir.cast(F64, p(m))
    raise ComputeError(f"{NAME}: {what} of shape {shape} is neither one value nor one per output channel")


@register_compute(NAME)
def _qlinear_conv(attrs, inputs, out_type, consts):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias = inputs[:9]
    out = tensor_type(out_type)
    for t, what in ((x, "x"), (w, "w"), (y_zp, "y_zero_point")):
        if t.dtype not in _INTS:
            raise ComputeError(f"{NAME}: {what} dtype {t.dtype} has no compute (supported: int8, uint8)")
    ws = static_shape(NAME, w)
    taps = int(np.prod(ws[1:]))
    if taps * 255 * 255 > _I32_MAX:  # |x - x_zp| and |w - w_zp| are at most 255
        raise ComputeError(f"{NAME}: {taps} products per output could overflow the int32 accumulator")
    acc_type = TensorType(out.shape, "int32")
    (acc,) = compute_call("nn.conv_integer", attrs, [x, w, x_zp, w_zp], acc_type, [None] * 4)
    info = np.iinfo(out.dtype)
    x_scale, y_scale, zero = _scalar(x_s, "x_scale"), _scalar(y_s, "y_scale"), _scalar(y_zp, "y_zero_point")

    def f(n, m, *o):
        v = tir.cast(F64, acc(n, m, *o))
        if bias is not None:
            v = v + _per_channel(bias, m, ws[0], "B")
        v = v * (x_scale * _per_channel(w_s, m, ws[0], "w_scale") / y_scale) + zero
        v = tir.max_(tir.min_(te.nearbyint(v), tir.const(float(info.max), F64)), tir.const(float(info.min), F64))
        return tir.cast(out.dtype, v)

    return te.compute(acc.shape, f, name="qlinear_conv")
