"""Reductions: reduce.* over constant axes (keepdims, empty axes), arg_max/arg_min, cumulative
sums/products, and the softmax family.

Reductions accumulate in the reference's dtype (float32 for 16-bit floats, the input's dtype for
integers; float64 where the reference leaves integers for floats) and round once at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kiln import te, tir
from kiln.op.reduce import reduced_axes, softmax_axes
from kiln.te.tensor import CommReducer, highest, lowest
from kiln.tir import PrimExpr, select
from kiln.topi.elemwise import wide_dtype
from kiln.topi.registry import ComputeError, const_ints, register_compute
from kiln.topi.x86_rowwise import softmax_eligible, softmax_rows


def _arg_reducer(name: str, better: Callable[[PrimExpr, PrimExpr], PrimExpr], last: bool,
                 from_lowest: bool) -> CommReducer:
    """(index, value) reducer keeping the first (or last) index of the best value. Unlike te.argmax
    it also replaces the identity's index -1 on a tie (a slice made only of the identity value)."""
    def combine(ia, va, ib, vb):
        earlier = (ib > ia) if last else ((ib < ia) | (ia < tir.const(0, ia.dtype)))
        take_b = better(vb, va) | (tir.eq(vb, va) & earlier)
        return tir.Select(take_b, ib, ia), tir.Select(take_b, vb, va)

    ident = lowest if from_lowest else highest
    return CommReducer(name, combine, lambda di, dv: (tir.const(-1, di), ident(dv)))


ARGMAX = _arg_reducer("argmax", lambda a, b: a > b, False, True)
ARGMAX_LAST = _arg_reducer("argmax_last", lambda a, b: a > b, True, True)
ARGMIN = _arg_reducer("argmin", lambda a, b: a < b, False, False)
ARGMIN_LAST = _arg_reducer("argmin_last", lambda a, b: a < b, True, False)


def keep_index(out_idx: Sequence[PrimExpr], axes: Sequence[int], ndim: int, keepdims: bool) -> list[PrimExpr]:
    """Index into a keepdims-shaped reduction from an output index with or without kept dims."""
    if keepdims:
        return list(out_idx)
    it = iter(out_idx)
    return [tir.const(0) if a in axes else next(it) for a in range(ndim)]


def reduce_compute(x: te.Tensor, axes: Sequence[int], keepdims: bool, body: Callable, name: str) -> te.Tensor:
    """A tensor over x's non-reduced dims (kept as 1 with keepdims): body(load, ks, kidx), where ks
    are new reduce IterVars over the reduced axes, load(vs) reads x with those axes at vs, and kidx
    is the output index in keepdims form (to read other keepdims-shaped reductions)."""
    axes = tuple(sorted(axes))
    shape = tuple(tir.const(1) if a in axes else d for a, d in enumerate(x.shape) if keepdims or a not in axes)

    def f(*i):
        ks = [te.reduce_axis(x.shape[a], f"k{a}") for a in axes]
        kidx = keep_index(i, axes, x.ndim, keepdims)

        def load(vs):
            vs = iter(vs)
            return x(*(next(vs) if a in axes else kidx[a] for a in range(x.ndim)))

        return body(load, ks, kidx)

    return te.compute(shape, f, name=name)


def _count(x: te.Tensor, axes: Sequence[int], dtype: str) -> PrimExpr:
    n: PrimExpr = tir.const(1)
    for a in axes:
        n = n * x.shape[a]
    return tir.cast(dtype, n)


def _map(t: te.Tensor, f: Callable[..., PrimExpr], name: str) -> te.Tensor:
    return te.compute(t.shape, lambda *i: f(t(*i), i), name=name)


def _reduction(kind: str):
    def compute(attrs, inputs, out_type, consts):
        x = inputs[0]
        axes_v = const_ints(f"reduce.{kind}", consts, 1, "axes", required=inputs[1] is not None)
        axes = reduced_axes(attrs, x.ndim, None if axes_v is None else np.asarray(axes_v, np.int64))
        return reduce_kind(kind, x, axes, bool(attrs.keepdims))

    return compute


def reduce_kind(kind: str, x: te.Tensor, axes: tuple[int, ...], keepdims: bool) -> te.Tensor:
    """reduce.<kind> of x over axes; with no axes the elementwise part still applies."""
    dtype, w = x.dtype, wide_dtype(x.dtype)
    f64 = w if tir.is_float(dtype) else "float64"  # integers become floats for mean, l2, logs

    big = None if tir.is_float(dtype) else ("uint64" if dtype.startswith("u") else "int64")

    def over(reducer, pre, cast_to=w, keep=keepdims, post=lambda v, kidx: v, acc=None):
        def body(load, ks, kidx):
            v = pre(tir.cast(cast_to, load([k.var for k in ks])), kidx)
            v = tir.cast(acc, v) if acc else v
            return reducer(v, ks) if ks else post(v, kidx)
        return reduce_compute(x, axes, keep, body, f"reduce_{kind}")

    out = lambda t, f: _map(t, lambda v, i: tir.cast(dtype, f(v, i)), f"reduce_{kind}")
    ident = lambda v, kidx: v
    if kind in ("sum", "prod", "max", "min"):
        return out(over({"sum": te.sum, "prod": te.prod, "max": te.max, "min": te.min}[kind], ident), ident)
    if kind == "mean":
        return out(over(te.sum, ident, acc=big), lambda v, i: tir.cast(f64, v) / _count(x, axes, f64))
    if kind == "l1":
        return out(over(te.sum, lambda v, k: select(v < tir.const(0, v.dtype), -v, v)), ident)
    if kind == "sum_square":
        return out(over(te.sum, lambda v, k: v * v), ident)
    if kind == "l2":
        return out(over(te.sum, lambda v, k: v * v, acc=big), lambda v, i: te.sqrt(tir.cast(f64, v)))
    if kind == "log_sum":
        return out(over(te.sum, ident, acc=big), lambda v, i: te.log(tir.cast(f64, v)))
    if kind == "log_sum_exp":  # log(sum(exp(x - m))) + m with m the max (0 when not finite)
        m = over(te.max, ident, f64, True)
        fin = lambda kidx: _finite_or_zero(m(*kidx))
        total = over(te.sum, lambda v, kidx: te.exp(v - fin(kidx)), f64)
        return out(total, lambda v, i: te.log(v) + fin(keep_index(i, axes, x.ndim, keepdims)))
    raise ComputeError(f"reduce.{kind} has no compute")


def _finite_or_zero(v: PrimExpr) -> PrimExpr:
    return select(te.isinf(v) | te.isnan(v), tir.const(0, v.dtype), v)


for _kind in ("sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp", "sum_square"):
    register_compute(f"reduce.{_kind}")(_reduction(_kind))


# ---------------------------------------------------------------------------------------------
# arg-reductions


def arg_reduce(x: te.Tensor, axis: int, keepdims: bool, reducer: CommReducer, name: str) -> te.Tensor:
    w = wide_dtype(x.dtype)

    def body(load, ks, kidx):
        k = ks[0]
        return reducer((k.var, tir.cast(w, load([k.var]))), ks)  # both results: lowering needs the pair

    return reduce_compute(x, (axis,), keepdims, body, name)[0]


def _arg(largest: bool):
    def compute(attrs, inputs, out_type, consts):
        x = inputs[0]
        if largest:
            red = ARGMAX_LAST if attrs.select_last_index else ARGMAX
        else:
            red = ARGMIN_LAST if attrs.select_last_index else ARGMIN
        return arg_reduce(x, attrs.axis % x.ndim, bool(attrs.keepdims), red, "arg_max" if largest else "arg_min")

    return compute


register_compute("reduce.arg_max")(_arg(True))
register_compute("reduce.arg_min")(_arg(False))


# ---------------------------------------------------------------------------------------------
# cumulative sums and products: a reduction over the axis, masked to the running window


def _cum(reducer):
    def compute(attrs, inputs, out_type, consts):
        x = inputs[0]
        axis = const_ints("reduce.cum", consts, 1, "axis")[0] % x.ndim
        w = wide_dtype(x.dtype)

        def f(*i):
            k = te.reduce_axis(x.shape[axis], "k")
            j = i[axis]
            if attrs.reverse:
                inside = (k.var > j) if attrs.exclusive else (k.var >= j)
            else:
                inside = (k.var < j) if attrs.exclusive else (k.var <= j)
            src = tir.cast(w, x(*(k.var if a == axis else v for a, v in enumerate(i))))
            return reducer(src, k, where=inside)

        acc = te.compute(x.shape, f, name="cum")
        return te.compute(x.shape, lambda *i: tir.cast(x.dtype, acc(*i)), name="cum_out")

    return compute


register_compute("reduce.cum_sum")(_cum(te.sum))
register_compute("reduce.cum_prod")(_cum(te.prod))


# ---------------------------------------------------------------------------------------------
# softmax family (over one axis, or every axis from `axis` on with coerce_2d)


def softmax_parts(x: te.Tensor, axes: tuple[int, ...]):
    """(widened x, max over axes, sum of exp(x - max) over axes), the last two keepdims-shaped."""
    w = wide_dtype(x.dtype)
    xw = te.compute(x.shape, lambda *i: tir.cast(w, x(*i)), name="softmax_in")
    m = reduce_compute(xw, axes, True, lambda load, ks, kidx: te.max(load([k.var for k in ks]), ks), "softmax_max")
    s = reduce_compute(xw, axes, True, lambda load, ks, kidx: te.sum(
        te.exp(load([k.var for k in ks]) - m(*kidx)), ks), "softmax_sum")
    return xw, m, s


def _stat(t: te.Tensor, i: Sequence[PrimExpr], axes: tuple[int, ...]) -> PrimExpr:
    """A keepdims-shaped statistic read at full index i."""
    return t(*(tir.const(0) if a in axes else v for a, v in enumerate(i)))


@register_compute("reduce.softmax")
def _softmax(attrs, inputs, out_type, consts):
    x = inputs[0]
    axes = softmax_axes(attrs, x.ndim)
    if softmax_eligible(x, axes):  # the last axis: vectorized rows (x86_rowwise)
        return softmax_rows(x, wide_dtype(x.dtype))
    xw, m, s = softmax_parts(x, axes)
    return te.compute(x.shape, lambda *i: tir.cast(x.dtype, te.exp(xw(*i) - _stat(m, i, axes)) / _stat(s, i, axes)),
                      name="softmax")


@register_compute("reduce.log_softmax")
def _log_softmax(attrs, inputs, out_type, consts):
    x = inputs[0]
    axes = softmax_axes(attrs, x.ndim)
    xw, m, s = softmax_parts(x, axes)
    return te.compute(x.shape, lambda *i: tir.cast(x.dtype, xw(*i) - _stat(m, i, axes) - te.log(_stat(s, i, axes))),
                      name="log_softmax")


@register_compute("reduce.hardmax")
def _hardmax(attrs, inputs, out_type, consts):
    """One at the first maximum in row-major order over the softmax axes."""
    x = inputs[0]
    axes = softmax_axes(attrs, x.ndim)
    w = wide_dtype(x.dtype)

    def flat(vs: Sequence[PrimExpr]) -> PrimExpr:
        f: PrimExpr = tir.const(0)
        for a, v in zip(axes, vs):
            f = f * x.shape[a] + v
        return f

    def body(load, ks, kidx):
        vs = [k.var for k in ks]
        return ARGMAX((flat(vs), tir.cast(w, load(vs))), ks)

    best = reduce_compute(x, axes, True, body, "hardmax_arg")[0]
    one, zero = tir.const(1, x.dtype), tir.const(0, x.dtype)
    return te.compute(x.shape, lambda *i: select(tir.eq(flat([i[a] for a in axes]), _stat(best, i, axes)), one, zero),
                      name="hardmax")
