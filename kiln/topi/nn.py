"""Sliding-window computes: convolution (N-d, groups, dilation, auto_pad), transposed
convolution, max/average/Lp pooling (ceil_mode, count_include_pad, dilations, argmax indices),
global pools and LRN.

Geometry comes from kiln.op.nn.Window, as in the references. Padding is a separate compute (a
Select on bounds) that the window reads without conditions; schedules may inline it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kiln import te, tir
from kiln.op.nn import Window, convt_axis
from kiln.te.tensor import lowest
from kiln.tir import PrimExpr, select
from kiln.topi.elemwise import wide_dtype
from kiln.topi.injective import ravel, unravel
from kiln.topi.reduction import ARGMAX, reduce_kind
from kiln.topi.registry import ComputeError, register_compute, static_shape


def pad_spatial(x: te.Tensor, widths: Sequence[tuple[int, int]], fill: PrimExpr, name: str = "pad") -> te.Tensor:
    """x padded on its trailing len(widths) axes by (before, after) with `fill`."""
    if not any(b or e for b, e in widths):
        return x
    lead = x.ndim - len(widths)
    shape = list(x.shape[:lead]) + [d + b + e for d, (b, e) in zip(x.shape[lead:], widths)]

    def f(*i):
        src, ok = list(i[:lead]), []
        for v, d, (b, _) in zip(i[lead:], x.shape[lead:], widths):
            src.append(v - b)
            if b or _:
                ok.append((v >= b) & (v - b < d))
        cond = ok[0]
        for c in ok[1:]:
            cond = cond & c
        return select(cond, x(*src), fill)

    return te.compute(shape, f, name=name)


def _cast(dtype: str, v: PrimExpr) -> PrimExpr:
    return tir.cast(dtype, v)


def batch_static_shape(name: str, x: te.Tensor) -> tuple:
    """x's shape with the batch dim as it is (it may be symbolic); channels and spatial dims must be
    static, since the window geometry is computed from them."""
    tail = x.shape[1:]
    if not all(isinstance(d, tir.IntImm) for d in tail):
        raise ComputeError(f"{name}: needs static channel and spatial dims, got {x.shape}")
    return (x.shape[0],) + tuple(d.value for d in tail)


# ---------------------------------------------------------------------------------------------
# convolution


@register_compute("nn.conv")
def _conv(attrs, inputs, out_type, consts):
    x, w, b = inputs[:3]
    xs, ws = batch_static_shape("nn.conv", x), static_shape("nn.conv", w)
    win = Window.of(attrs, ws[2:])
    out, pads, _ = win.layout(xs[2:])
    acc = wide_dtype(x.dtype)
    xp = pad_spatial(x, pads, tir.const(0, x.dtype))
    m_per_g, c_per_g = ws[0] // attrs.group, ws[1]

    def f(n, m, *o):
        c = te.reduce_axis(c_per_g, "c")
        ks = [te.reduce_axis(k, f"k{a}") for a, k in enumerate(win.kernel)]
        g = m // m_per_g
        pos = [oa * s + ka.var * d for oa, ka, s, d in zip(o, ks, win.strides, win.dilations)]
        v = _cast(acc, xp(n, g * c_per_g + c.var, *pos)) * _cast(acc, w(m, c.var, *(k.var for k in ks)))
        return te.sum(v, [c] + ks)

    y = te.compute((xs[0], ws[0]) + tuple(out), f, name="conv_acc")

    def finish(n, m, *o):
        v = y(n, m, *o)
        return _cast(x.dtype, v + _cast(acc, b(m)) if b is not None else v)

    return te.compute(y.shape, finish, name="conv")


@register_compute("nn.conv_transpose")
def _conv_transpose(attrs, inputs, out_type, consts):
    x, w, b = inputs[:3]
    xs, ws = batch_static_shape("nn.conv_transpose", x), static_shape("nn.conv_transpose", w)
    win = Window.of(attrs, ws[2:])
    geo = [convt_axis(attrs, win, a, d) for a, d in enumerate(xs[2:])]
    acc = wide_dtype(x.dtype)
    c_per_g, m_per_g = ws[0] // attrs.group, ws[1]

    def f(n, m, *o):
        c = te.reduce_axis(c_per_g, "c")
        ks = [te.reduce_axis(k, f"k{a}") for a, k in enumerate(win.kernel)]
        g = m // m_per_g
        conds, src = [], []
        for oa, ka, s, d, (_, begin), size in zip(o, ks, win.strides, win.dilations, geo, xs[2:]):
            t = oa + begin - ka.var * d  # = input position * stride
            conds.append(tir.eq(t % s, tir.const(0)) & (t >= 0) & (t < size * s))
            src.append(t // s)
        cond = conds[0]
        for cc in conds[1:]:
            cond = cond & cc
        ci = g * c_per_g + c.var
        v = _cast(acc, x(n, ci, *src)) * _cast(acc, w(ci, m % m_per_g, *(k.var for k in ks)))
        return te.sum(v, [c] + ks, where=cond)

    y = te.compute((xs[0], ws[1] * attrs.group) + tuple(o for o, _ in geo), f, name="conv_transpose_acc")

    def finish(n, m, *o):
        v = y(n, m, *o)
        return _cast(x.dtype, v + _cast(acc, b(m)) if b is not None else v)

    return te.compute(y.shape, finish, name="conv_transpose")


# ---------------------------------------------------------------------------------------------
# pooling


def _pool_geometry(attrs, x: te.Tensor):
    win = Window.of(attrs, attrs.kernel_shape, attrs.ceil_mode)
    xs = batch_static_shape("pool", x)
    out, pads, extra = win.layout(xs[2:])
    return win, xs, out, pads, extra


def _window_reduce(xp: te.Tensor, xs, win: Window, out, body, name: str) -> te.Tensor:
    """body(load(ks), ks, o) over the kernel taps ks of each output position o."""
    def f(n, c, *o):
        ks = [te.reduce_axis(k, f"k{a}") for a, k in enumerate(win.kernel)]
        pos = [oa * s + ka.var * d for oa, ka, s, d in zip(o, ks, win.strides, win.dilations)]
        return body(xp(n, c, *pos), ks, o)

    return te.compute(tuple(xs[:2]) + tuple(out), f, name=name)


# the values of ARGMAX alone: a tap replaces the best only when greater (a NaN tap is never taken)
MAX_TAKEN = te.CommReducer("max_taken", lambda a, b: (select(b > a, b, a),), lambda d: (lowest(d),))


@register_compute("nn.max_pool")
def _max_pool(attrs, inputs, out_type, consts):
    x = inputs[0]
    win, xs, out, pads, extra = _pool_geometry(attrs, x)
    acc = wide_dtype(x.dtype)
    fill = tir.const(float("-inf"), acc) if tir.is_float(acc) else lowest(acc)
    xw = te.compute(x.shape, lambda *i: _cast(acc, x(*i)), name="max_pool_in")
    xp = pad_spatial(xw, [(b, e + ex) for (b, e), ex in zip(pads, extra)], fill)
    kernel = [tir.const(k) for k in win.kernel]
    # NOTE: the values are their own plain max reduction, so a group that only uses them (the usual
    # case) never computes the argmax; the indices' reduction exists only when they are read
    top = _window_reduce(xp, xs, win, out, lambda v, ks, o: MAX_TAKEN(v, ks), "max_pool_max")
    best = _window_reduce(xp, xs, win, out, lambda v, ks, o: ARGMAX((ravel([k.var for k in ks], kernel), v), ks),
                          "max_pool_arg")
    spatial = xs[2:]
    order = range(win.rank) if attrs.storage_order == 0 else reversed(range(win.rank))

    def index(n, c, *o):
        taps = unravel(best[0](n, c, *o), kernel)
        flat: PrimExpr = tir.const(0)
        for a in order:
            coord = o[a] * win.strides[a] - pads[a][0] + taps[a] * win.dilations[a]
            flat = flat * spatial[a] + tir.min_(tir.max_(coord, tir.const(0)), tir.const(spatial[a] - 1))
        return (n * xs[1] + c) * math.prod(spatial) + flat

    y = te.compute(top.shape, lambda *i: _cast(x.dtype, top(*i)), name="max_pool")
    return y, te.compute(best[1].shape, index, name="max_pool_indices")


@register_compute("nn.average_pool")
def _average_pool(attrs, inputs, out_type, consts):
    x = inputs[0]
    win, xs, out, pads, extra = _pool_geometry(attrs, x)
    acc = wide_dtype(x.dtype)
    xp = pad_spatial(x, [(b, e + ex) for (b, e), ex in zip(pads, extra)], tir.const(0, x.dtype))
    total = _window_reduce(xp, xs, win, out, lambda v, ks, o: te.sum(_cast(acc, v), ks), "average_pool_sum")

    def f(n, c, *o):
        return _cast(x.dtype, total(n, c, *o) / window_count(o, win, xs[2:], pads, attrs.count_include_pad, acc))

    return te.compute(total.shape, f, name="average_pool")


def window_count(o: Sequence[PrimExpr], win, sizes: Sequence, pads, include_pad: int, acc: str) -> PrimExpr:
    """Taps of the pooling window at output position o inside the image of spatial `sizes` (or inside
    image + explicit pads with count_include_pad): average pooling's divisor."""
    n: PrimExpr = tir.const(1, acc)
    for a, oa in enumerate(o):
        lo = -pads[a][0] if include_pad else 0
        hi = sizes[a] + pads[a][1] if include_pad else sizes[a]
        inside: PrimExpr = tir.const(0, acc)
        for k in range(win.kernel[a]):
            p = oa * win.strides[a] - pads[a][0] + k * win.dilations[a]
            inside = inside + _cast(acc, (p >= lo) & (p < hi))
        n = n * inside
    return n


def _lp(v: PrimExpr, p: int, acc: str) -> PrimExpr:
    return te.power(te.fabs(_cast(acc, v)), tir.const(float(p), acc))


@register_compute("nn.lp_pool")
def _lp_pool(attrs, inputs, out_type, consts):
    x = inputs[0]
    win, xs, out, pads, extra = _pool_geometry(attrs, x)
    acc = wide_dtype(x.dtype)
    xp = pad_spatial(x, [(b, e + ex) for (b, e), ex in zip(pads, extra)], tir.const(0, x.dtype))
    total = _window_reduce(xp, xs, win, out, lambda v, ks, o: te.sum(_lp(v, attrs.p, acc), ks), "lp_pool_sum")
    inv = tir.const(1.0 / attrs.p, acc)
    return te.compute(total.shape, lambda *i: _cast(x.dtype, te.power(total(*i), inv)), name="lp_pool")


def _spatial_axes(x: te.Tensor) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@register_compute("nn.global_average_pool")
def _global_average_pool(attrs, inputs, out_type, consts):
    return reduce_kind("mean", inputs[0], _spatial_axes(inputs[0]), True)


@register_compute("nn.global_max_pool")
def _global_max_pool(attrs, inputs, out_type, consts):
    return reduce_kind("max", inputs[0], _spatial_axes(inputs[0]), True)


@register_compute("nn.global_lp_pool")
def _global_lp_pool(attrs, inputs, out_type, consts):
    x = inputs[0]
    acc = wide_dtype(x.dtype)
    p = te.compute(x.shape, lambda *i: _lp(x(*i), attrs.p, acc), name="global_lp_pow")
    s = reduce_kind("sum", p, _spatial_axes(x), True)
    inv = tir.const(1.0 / attrs.p, acc)
    return te.compute(s.shape, lambda *i: _cast(x.dtype, te.power(s(*i), inv)), name="global_lp_pool")


@register_compute("nn.lrn")
def _lrn(attrs, inputs, out_type, consts):
    x = inputs[0]
    acc = wide_dtype(x.dtype)
    before = (attrs.size - 1) // 2
    channels = x.shape[1]

    def sq(n, c, *s):
        k = te.reduce_axis(attrs.size, "k")
        ch = c - before + k.var
        v = _cast(acc, x(n, ch, *s))
        return te.sum(v * v, k, where=(ch >= 0) & (ch < channels))

    total = te.compute(x.shape, sq, name="lrn_sum")
    scale = tir.const(attrs.alpha / attrs.size, acc)

    def f(*i):
        base = tir.const(attrs.bias, acc) + scale * total(*i)
        return _cast(x.dtype, _cast(acc, x(*i)) / te.power(base, tir.const(attrs.beta, acc)))

    return te.compute(x.shape, f, name="lrn")
