"""The compute of quant.im2col (kiln/op/im2col.py): one read of NHWC x per element, the pad value outside x."""

from __future__ import annotations

from kiln import te, tir
from kiln.op.im2col import NAME, Im2ColAttrs
from kiln.topi.registry import register_compute, static_shape, tensor_type


@register_compute(NAME)
def _im2col(attrs: Im2ColAttrs, inputs, out_type, consts):
    x, pad_value = inputs
    _, h, w, c = static_shape(NAME, x)
    kw = attrs.kernel[1]
    (sh, sw), (dh, dw), (top, left) = attrs.strides, attrs.dilations, attrs.pads[:2]
    fill = pad_value(*(tir.const(0) for _ in pad_value.shape))

    def f(n, ho, wo, k):
        tap, ch = k // c, k % c
        y, xx = ho * sh + (tap // kw) * dh - top, wo * sw + (tap % kw) * dw - left
        inside = tir.And(tir.And(y >= 0, y < h), tir.And(xx >= 0, xx < w))
        at = (n, tir.max_(tir.min_(y, tir.const(h - 1)), tir.const(0)),
              tir.max_(tir.min_(xx, tir.const(w - 1)), tir.const(0)), ch)
        return tir.select(inside, x(*at), fill)

    return te.compute(tuple(tir.const(d) for d in tensor_type(out_type).shape), f, name="im2col")
