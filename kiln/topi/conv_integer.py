"""ConvInteger: the N-d grouped convolution of (x - x_zero_point) and (w - w_zero_point) in int32.

Zero points are subtracted before padding, so padded positions contribute 0, as in
kiln.op.nn's reference (which pads the shifted values). x's zero point is one value; w's is one
value or one per output channel. Products of int8/uint8 values are summed exactly in int32.
"""

from __future__ import annotations

from kiln import te, tir
from kiln.op.nn import Window
from kiln.tir import PrimExpr
from kiln.topi.nn import batch_static_shape, pad_spatial
from kiln.topi.registry import ComputeError, register_compute, static_shape


def _scalar_or_channel(zp: te.Tensor | None, channel: PrimExpr, channels: int, what: str) -> PrimExpr:
    """A zero point as int32: 0 when absent, its only element, or (per channel) element `channel`."""
    if zp is None:
        return tir.const(0, "int32")
    shape = static_shape("nn.conv_integer", zp)
    size = 1
    for d in shape:
        size *= d
    if size == 1:
        return tir.cast("int32", zp(*(tir.const(0) for _ in shape)))
    if len(shape) == 1 and size == channels:
        return tir.cast("int32", zp(channel))
    raise ComputeError(f"nn.conv_integer: {what} zero point of shape {shape} is neither a scalar nor one per "
                       f"output channel")


@register_compute("nn.conv_integer")
def _conv_integer(attrs, inputs, out_type, consts):
    x, w, x_zp, w_zp = inputs[:4]
    xs, ws = batch_static_shape("nn.conv_integer", x), static_shape("nn.conv_integer", w)
    win = Window.of(attrs, ws[2:])
    out, pads, _ = win.layout(xs[2:])
    xz = _scalar_or_channel(x_zp, tir.const(0), -1, "x")  # one value only
    shifted = te.compute(x.shape, lambda *i: tir.cast("int32", x(*i)) - xz, name="conv_integer_x")
    xp = pad_spatial(shifted, pads, tir.const(0, "int32"))
    m_per_g, c_per_g = ws[0] // attrs.group, ws[1]

    def f(n, m, *o):
        c = te.reduce_axis(c_per_g, "c")
        ks = [te.reduce_axis(k, f"k{a}") for a, k in enumerate(win.kernel)]
        pos = [oa * s + ka.var * d for oa, ka, s, d in zip(o, ks, win.strides, win.dilations)]
        wv = tir.cast("int32", w(m, c.var, *(k.var for k in ks))) - _scalar_or_channel(w_zp, m, ws[0], "w")
        return te.sum(xp(n, (m // m_per_g) * c_per_g + c.var, *pos) * wv, [c] + ks)

    acc = te.compute((xs[0], ws[0]) + tuple(out), f, name="conv_integer_acc")
    # NOTE: a reduction plus an elementwise output, the shape nn.conv's anchor schedule takes
    return te.compute(acc.shape, lambda *i: acc(*i), name="conv_integer")
