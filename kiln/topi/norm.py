"""Normalizations: batch (inference and training), layer (Y, Mean, InvStdDev), instance, group, RMS, Lp and
mean-variance normalization. Statistics are keepdims-shaped reductions read back by a final
elementwise compute, in the references' compute dtypes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln import te, tir
from kiln.tir import PrimExpr, select
from kiln.topi.elemwise import wide_dtype
from kiln.topi.reduction import reduce_compute
from kiln.topi.registry import broadcast_load, register_compute
from kiln.topi.schedule_anchor import static
from kiln.topi.x86_rowwise import eligible as rowwise_eligible
from kiln.topi.x86_rowwise import group_norm_rows, instance_eligible, instance_norm_rows, layer_norm_rows


def _stash(x_dtype: str, stash: str = "float32") -> str:
    """The wider of x's dtype and stash, at least float32 (kiln.op.norm._wide)."""
    order = ["float32", "float64"]
    w = wide_dtype(x_dtype)
    return max(w, stash if stash in order else "float32", key=order.index)


def _at(t: te.Tensor, i: Sequence[PrimExpr], axes: Sequence[int]) -> PrimExpr:
    return t(*(tir.const(0) if a in axes else v for a, v in enumerate(i)))


def moments(x: te.Tensor, axes: Sequence[int], dtype: str) -> tuple[te.Tensor, te.Tensor]:
    """(mean, biased variance) over axes, keepdims-shaped, computed as E[(x - mean)^2]."""
    n: PrimExpr = tir.const(1.0, dtype)
    for a in axes:
        n = n * tir.cast(dtype, x.shape[a])
    s = reduce_compute(x, axes, True, lambda load, ks, kidx: te.sum(tir.cast(dtype, load([k.var for k in ks])), ks),
                       "norm_sum")
    mean = te.compute(s.shape, lambda *i: s(*i) / n, name="norm_mean")

    def sq(load, ks, kidx):
        d = tir.cast(dtype, load([k.var for k in ks])) - mean(*kidx)
        return te.sum(d * d, ks)

    ss = reduce_compute(x, axes, True, sq, "norm_sqsum")
    var = te.compute(ss.shape, lambda *i: ss(*i) / n, name="norm_var")
    return mean, var


def _channel(p: te.Tensor, c: PrimExpr, dtype: str) -> PrimExpr:
    return tir.cast(dtype, p(c))


@register_compute("nn.batch_normalization")
def _batch_norm(attrs, inputs, out_type, consts):
    x, scale, b, mean, var = inputs[:5]
    w = _stash(x.dtype)
    eps = tir.const(attrs.epsilon, w)
    if attrs.training_mode:  # the batch's own (biased) statistics, over every axis but the channel's
        axes = (0, *range(2, x.ndim))
        bm, bv = moments(x, axes, w)

        def stat(t: te.Tensor) -> Callable[[PrimExpr, str], PrimExpr]:
            return lambda c, dtype: tir.cast(dtype, t(*(c if a == 1 else tir.const(0) for a in range(x.ndim))))

        use_mean, use_var = stat(bm), stat(bv)
    else:
        use_mean, use_var = (lambda c, dtype: _channel(mean, c, dtype)), (lambda c, dtype: _channel(var, c, dtype))

    def f(n, c, *s):
        inv = tir.const(1.0, w) / te.sqrt(use_var(c, w) + eps)
        y = (tir.cast(w, x(n, c, *s)) - use_mean(c, w)) * (inv * _channel(scale, c, w)) + _channel(b, c, w)
        return tir.cast(x.dtype, y)

    y = te.compute(x.shape, f, name="batch_norm")
    if not attrs.training_mode:
        return y

    def running(old: te.Tensor, new, what: str) -> te.Tensor:
        """old * momentum + new * (1 - momentum), in the wider of the two dtypes (as the reference)."""
        rw = _stash(old.dtype, w)
        mom = attrs.momentum
        return te.compute(old.shape, lambda c: tir.cast(old.dtype, _channel(old, c, rw) * tir.const(mom, rw)
                                                       + new(c, rw) * tir.const(1 - mom, rw)), name=what)

    return y, running(mean, use_mean, "running_mean"), running(var, use_var, "running_var")


def _standardized(x: te.Tensor, axes: Sequence[int], eps: float, dtype: str):
    mean, var = moments(x, axes, dtype)
    inv = te.compute(var.shape, lambda *i: tir.const(1.0, dtype) / te.sqrt(var(*i) + tir.const(eps, dtype)),
                     name="norm_inv")
    return mean, inv


@register_compute("nn.instance_normalization")
def _instance_norm(attrs, inputs, out_type, consts):
    x, scale, b = inputs[:3]
    w = _stash(x.dtype)
    if instance_eligible(x, w):  # static images: vectorized lanes, rows in parallel (x86_rowwise)
        return instance_norm_rows(x, scale, b, attrs.epsilon, w)
    axes = tuple(range(2, x.ndim))
    mean, inv = _standardized(x, axes, attrs.epsilon, w)

    def f(n, c, *s):
        i = (n, c, *s)
        y = (tir.cast(w, x(*i)) - _at(mean, i, axes)) * _at(inv, i, axes)
        return tir.cast(x.dtype, y * _channel(scale, c, w) + _channel(b, c, w))

    return te.compute(x.shape, f, name="instance_norm")


@register_compute("nn.layer_normalization")
def _layer_norm(attrs, inputs, out_type, consts):
    x, scale, b = inputs[:3]
    w = _stash(x.dtype, attrs.stash_type)
    axes = tuple(range(attrs.axis % x.ndim, x.ndim))
    if rowwise_eligible(x, axes, w, attrs.stash_type):  # the last axis: vectorized rows (x86_rowwise)
        return layer_norm_rows(x, scale, b, attrs.epsilon, w)
    mean, inv = _standardized(x, axes, attrs.epsilon, w)

    def f(*i):
        y = (tir.cast(w, x(*i)) - _at(mean, i, axes)) * _at(inv, i, axes) * tir.cast(w, broadcast_load(scale, i))
        if b is not None:
            y = y + tir.cast(w, broadcast_load(b, i))
        return tir.cast(x.dtype, y)

    y = te.compute(x.shape, f, name="layer_norm")
    stash = attrs.stash_type
    return (y, te.compute(mean.shape, lambda *i: tir.cast(stash, mean(*i)), name="layer_norm_mean"),
            te.compute(inv.shape, lambda *i: tir.cast(stash, inv(*i)), name="layer_norm_inv_std"))


@register_compute("nn.rms_normalization")
def _rms_norm(attrs, inputs, out_type, consts):
    x, scale = inputs[:2]
    w = _stash(x.dtype, attrs.stash_type)
    axes = tuple(range(attrs.axis % x.ndim, x.ndim))
    n: PrimExpr = tir.const(1.0, w)
    for a in axes:
        n = n * tir.cast(w, x.shape[a])

    def sq(load, ks, kidx):
        v = tir.cast(w, load([k.var for k in ks]))
        return te.sum(v * v, ks)

    ss = reduce_compute(x, axes, True, sq, "rms_sqsum")

    def f(*i):
        rms = te.sqrt(_at(ss, i, axes) / n + tir.const(attrs.epsilon, w))
        return tir.cast(x.dtype, tir.cast(w, x(*i)) / rms * tir.cast(w, broadcast_load(scale, i)))

    return te.compute(x.shape, f, name="rms_norm")


@register_compute("nn.group_normalization")
def _group_norm(attrs, inputs, out_type, consts):
    """Statistics in stash_type with variance E[x^2] - E[x]^2 (the ONNX function body), the
    normalized value rounded to x's dtype, then scale and bias in x's dtype."""
    x, scale, bias = inputs[:3]
    sd = attrs.stash_type
    g = attrs.num_groups
    if static(x.shape[1]) is not None and instance_eligible(x, sd):  # vectorized lanes (x86_rowwise)
        return group_norm_rows(x, scale, bias, g, attrs.epsilon, sd)
    c = x.shape[1]
    cg = c // g
    grouped = te.compute((x.shape[0], tir.const(g), cg) + tuple(x.shape[2:]),
                         lambda n, gi, ci, *s: tir.cast(sd, x(n, gi * cg + ci, *s)), name="group_norm_in")
    axes = tuple(range(2, grouped.ndim))
    cnt: PrimExpr = tir.const(1.0, sd)
    for a in axes:
        cnt = cnt * tir.cast(sd, grouped.shape[a])
    s1 = reduce_compute(grouped, axes, True, lambda load, ks, kidx: te.sum(load([k.var for k in ks]), ks), "gn_sum")
    s2 = reduce_compute(grouped, axes, True, lambda load, ks, kidx: te.sum(
        load([k.var for k in ks]) * load([k.var for k in ks]), ks), "gn_sqsum")

    def f(n, ch, *s):
        gi, ci = ch // cg, ch % cg
        i = (n, gi, ci, *s)
        mean = _at(s1, i, axes) / cnt
        var = _at(s2, i, axes) / cnt - mean * mean
        y = tir.cast(x.dtype, (grouped(*i) - mean) / te.sqrt(var + tir.const(attrs.epsilon, sd)))
        return y * scale(ch) + bias(ch)

    return te.compute(x.shape, f, name="group_norm")


@register_compute("nn.lp_normalization")
def _lp_norm(attrs, inputs, out_type, consts):
    x = inputs[0]
    w = _stash(x.dtype)
    axis = attrs.axis % x.ndim

    def body(load, ks, kidx):
        v = tir.cast(w, load([k.var for k in ks]))
        return te.sum(te.fabs(v) if attrs.p == 1 else v * v, ks)

    s = reduce_compute(x, (axis,), True, body, "lp_norm_sum")

    def f(*i):
        norm = _at(s, i, (axis,))
        norm = norm if attrs.p == 1 else te.sqrt(norm)
        zero = tir.eq(norm, tir.const(0.0, w))
        return tir.cast(x.dtype, select(zero, tir.const(0.0, w), tir.cast(w, x(*i)) / select(zero, tir.const(1.0, w),
                                                                                              norm)))

    return te.compute(x.shape, f, name="lp_norm")


@register_compute("nn.mean_variance_normalization")
def _mvn(attrs, inputs, out_type, consts):
    x = inputs[0]
    w = _stash(x.dtype)
    axes = tuple(sorted(a % x.ndim for a in attrs.axes))
    mean, var = moments(x, axes, w)

    def f(*i):
        d = tir.cast(w, x(*i)) - _at(mean, i, axes)
        return tir.cast(x.dtype, d / (te.sqrt(_at(var, i, axes)) + tir.const(1e-9, w)))

    return te.compute(x.shape, f, name="mvn")

