"""The compute of quant.qlinear_matmul, written as its reference (kiln/op/quant.py) computes it: it
accumulates in int64 and requantizes in float64."""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.tir import PrimExpr
from kiln.topi.registry import F64, ComputeError, f64, out_dims, register_compute, tensor_type

_QINTS = ("int8", "uint8")


def _param(p: te.Tensor, i: PrimExpr) -> PrimExpr:
    """A scalar parameter, or a 1-D per-row / per-column one read at i."""
    if all(isinstance(d, tir.IntImm) and d.value == 1 for d in p.shape):
        return p(*(tir.const(0) for _ in p.shape))
    if p.ndim != 1:
        raise ComputeError(f"quant.qlinear_matmul: a parameter of shape {p.shape} has no compute")
    return p(i)


def _bload(t: te.Tensor, batch: tuple, rest: tuple) -> PrimExpr:
    """t read at (batch..., rest...) with its batch dims broadcast against the output's."""
    nb = t.ndim - len(rest)
    off = len(batch) - nb
    idx = [tir.const(0) if isinstance(d, tir.IntImm) and d.value == 1 else batch[off + k]
           for k, d in enumerate(t.shape[:nb])]
    return t(*idx, *rest)


@register_compute("quant.qlinear_matmul")
def _qlinear_matmul(attrs, inputs, out_type, consts):
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = inputs
    name = "quant.qlinear_matmul"
    out = tensor_type(out_type).dtype
    for t, what in ((a, "a"), (b, "b"), (y_zp, "y_zero_point")):
        if t.dtype not in _QINTS:
            raise ComputeError(f"{name}: {what} dtype {t.dtype} has no compute")
    if a.ndim < 2 or b.ndim < 2:
        raise ComputeError(f"{name}: 1-D operands have no compute")
    k_dim = a.shape[-1]
    a_per_row = not all(isinstance(d, tir.IntImm) and d.value == 1 for d in a_s.shape + a_zp.shape)
    info = np.iinfo(out)

    def acc(*i):
        batch, m, nn = i[:-2], i[-2], i[-1]
        k = te.reduce_axis(k_dim, "k")
        av = tir.cast("int64", _bload(a, batch, (m, k.var))) - tir.cast("int64", _param(a_zp, m))
        bv = tir.cast("int64", _bload(b, batch, (k.var, nn))) - tir.cast("int64", _param(b_zp, nn))
        return te.sum(av * bv, k)

    acc_t = te.compute(out_dims(out_type, inputs), acc, name="qlinear_matmul_acc")

    def f(*i):
        m, nn = i[-2], i[-1]
        sa = tir.cast(F64, _param(a_s, m) if a_per_row else _param(a_s, m))
        mult = sa * tir.cast(F64, _param(b_s, nn)) / tir.cast(F64, _param(y_s, tir.const(0)))
        v = tir.cast(F64, acc_t(*i)) * mult + tir.cast(F64, _param(y_zp, tir.const(0)))
        v = te.nearbyint(v)
        v = tir.max_(tir.min_(v, f64(info.max)), f64(info.min))
        return tir.cast(out, v)

    return te.compute(acc_t.shape, f, name="qlinear_matmul")
