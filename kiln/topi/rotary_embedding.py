"""The compute of nn.rotary_embedding, written as its reference (kiln/op/attention.py) computes it."""

from __future__ import annotations

from kiln import te, tir
from kiln.tir import PrimExpr
from kiln.topi.registry import register_compute, static_dim


@register_compute("nn.rotary_embedding")
def _rotary_embedding(attrs, inputs, out_type, consts):
    x, cos, sin, pos = inputs
    name = "nn.rotary_embedding"
    if x.ndim == 4:
        head = static_dim(name, x.shape[3], "head size")
    else:
        head = static_dim(name, x.shape[2], "hidden size") // attrs.num_heads
    rd = attrs.rotary_embedding_dim or head
    half = rd // 2

    def trig(t: te.Tensor, b, s, j) -> PrimExpr:
        if pos is None:
            return t(b, s, j)
        return t(tir.cast("int64", pos(b, s)), j)

    def f(*i):
        if x.ndim == 4:
            b, h, s, d = i
            load = lambda e: x(b, h, s, e)  # noqa: E731
        else:
            b, s, hd = i
            h, d = hd // head, hd % head
            load = lambda e: x(b, s, h * head + e)  # noqa: E731
        if attrs.interleaved:
            j = (d // 2) % half
            x1, x2, first = load(j * 2), load(j * 2 + 1), tir.eq(d % 2, tir.const(0))
        else:
            j = d % half
            x1, x2, first = load(j), load(j + half), d < half
        c, sn = trig(cos, b, s, j), trig(sin, b, s, j)
        rot = te.select(first, c * x1 - sn * x2, sn * x1 + c * x2)
        return te.select(d < rd, rot, load(d)) if rd < head else rot

    return te.compute(x.shape, f, name="rotary_embedding")
