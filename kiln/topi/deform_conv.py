"""Compute for nn.deform_conv, in the reference's two steps (kiln/op/nn.py): every kernel tap of
every output position samples X bilinearly at its learned offset (zero outside), optionally
scaled by the mask, and a grouped GEMM over (channels, taps) with W gives the output. Sampling
positions and weights are float64, as numpy promotes them in the reference.
"""

from __future__ import annotations

import itertools
import math

from kiln import te, tir
from kiln.op.nn import Window
from kiln.tir import PrimExpr, select
from kiln.topi.elemwise import wide_dtype
from kiln.topi.injective import ravel
from kiln.topi.registry import ComputeError, out_dims, register_compute, static_shape

F64 = "float64"


def _f(v: float) -> PrimExpr:
    return tir.const(float(v), F64)


def bilinear(x: te.Tensor, lead: tuple[PrimExpr, ...], pos: list[PrimExpr], sizes: list[int]) -> PrimExpr:
    """x[*lead, *pos] interpolated N-linearly at float64 positions, corners outside x counting zero."""
    total = None
    base = [te.floor(p) for p in pos]
    for corner in itertools.product((0, 1), repeat=len(pos)):
        weight, valid, idx = None, None, []
        for p, lo, c, n in zip(pos, base, corner, sizes):
            i = lo + _f(c)
            w = _f(1) - te.fabs(p - i)
            weight = w if weight is None else weight * w
            inside = tir.And(i >= _f(0), i < _f(n))
            valid = inside if valid is None else tir.And(valid, inside)
            flat = tir.cast("int64", tir.max_(tir.min_(i, _f(n - 1)), _f(0)))
            idx.append(tir.max_(tir.min_(flat, tir.const(n - 1)), tir.const(0)))  # NaN offsets stay in bounds
        term = select(valid, tir.cast(F64, x(*lead, *idx)) * weight, _f(0))
        total = term if total is None else total + term
    return total


@register_compute("nn.deform_conv")
def _deform_conv(attrs, inputs, out_type, consts):
    x, w, offset, b, mask = inputs
    name = "nn.deform_conv"
    xs, ws = static_shape(name, x), static_shape(name, w)
    win = Window.of(attrs, ws[2:])
    nsp, og, k = win.rank, attrs.offset_group, math.prod(win.kernel)
    c_per_og, c_per_g, m_per_g = xs[1] // og, ws[1], ws[0] // attrs.group
    acc = wide_dtype(x.dtype)
    shape = out_dims(out_type, inputs)
    if not all(isinstance(d, tir.IntImm) for d in shape):
        raise ComputeError(f"{name}: needs a static output shape, got {shape}")
    kdims = [tir.const(d) for d in win.kernel]

    def sample(n, c, *rest):
        """The column entry of channel c, kernel tap rest[:nsp], output position rest[nsp:]."""
        kk, o = rest[:nsp], rest[nsp:]
        # NOTE: the unit reduce axis keeps the columns in a buffer (the generic schedule inlines
        # plain computes), so each sample is taken once, not once per output channel
        unit = te.reduce_axis(1, "unit")
        g = c // c_per_og
        tap = ravel(list(kk), kdims)
        pos = [tir.cast(F64, kk[a] * win.dilations[a] + o[a] * win.strides[a] - win.pads[a])
               + tir.cast(F64, offset(n, (g * k + tap) * nsp + a, *o)) for a in range(nsp)]
        v = tir.cast(acc, bilinear(x, (n, c), pos, list(xs[2:])))
        if mask is not None:
            v = v * tir.cast(acc, mask(n, g * k + tap, *o))
        return te.sum(v, [unit])

    cols = te.compute((shape[0], tir.const(xs[1]), *kdims, *shape[2:]), sample, name="deform_cols")

    def f(n, m, *o):
        c = te.reduce_axis(c_per_g, "c")
        ks = [te.reduce_axis(d, f"k{a}") for a, d in enumerate(win.kernel)]
        ch = (m // m_per_g) * c_per_g + c.var
        return te.sum(cols(n, ch, *(kv.var for kv in ks), *o) * tir.cast(acc, w(m, c.var, *(kv.var for kv in ks))),
                      [c] + ks)

    y = te.compute(shape, f, name="deform_conv_acc")

    def finish(n, m, *o):
        v = y(n, m, *o)
        return tir.cast(x.dtype, v + tir.cast(acc, b(m)) if b is not None else v)

    return te.compute(shape, finish, name="deform_conv")
