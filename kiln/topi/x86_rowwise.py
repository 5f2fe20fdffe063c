"""Layer normalization and softmax over the last axis, row by row, vectorized along the row.

The general computes (kiln/topi/norm.py, reduction.py) reduce each row in one sequential chain (gcc
does not reassociate float adds), serially, and softmax calls libm's expf twice per element. Here
each statistic is reduced in L lanes (lane l takes elements l, l + L, ...: one vector op per L
elements) and then across lanes, and rows run in parallel. Layer norm takes two passes as the
reference (the mean, then the mean of (x - mean)^2, the row in cache); its mean and 1/std outputs
are the reductions themselves, so nothing is recomputed or copied. Softmax is one parallel pass over
blocks of rows: lane max, lane sum of exps, then exp / sum, with the vectorizable exp of
kiln.topi.vmath (taken twice: cheaper than a buffer round trip).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kiln import te, tir
from kiln.target import Target
from kiln.te.schedule import Schedule, create_schedule
from kiln.te.tensor import Tensor
from kiln.topi.knobs import knob
from kiln.topi.registry import broadcast_load
from kiln.topi.schedule_anchor import block, parallel_outer, static
from kiln.topi.schedule_generic import loop_nest
from kiln.topi.vmath import fmax, vexp

LANES = (16, 8, 4, 2)
ROWS = 4  # rows per parallel task of the normalized output
NAMES = ("rows_mean_lanes", "rows_mean", "rows_sq_lanes", "rows_inv_std", "rows_layer_norm")
TOTALS = ("rows_sum", "rows_sqsum")  # the lanes' totals (a reduction is a whole compute body)
SOFTMAX = ("rows_max_lanes", "rows_max", "rows_exp_lanes", "rows_exp_sum", "rows_softmax")



def lanes_of(n: int) -> int:
    """The widest lane count that divides the row and leaves at least two adds per lane."""
    return next((k for k in LANES if n % k == 0 and n >= 2 * k), 1)


def eligible(x: te.Tensor, axes: Sequence[int], w: str, stash: str) -> bool:
    """One normalized axis, the last, of static length; statistics computed in the stash dtype."""
    return axes == (x.ndim - 1,) and static(x.shape[-1]) is not None and w == stash


def _lane_sum(rows: tuple, n: int, value, name: str, reducer=te.sum) -> te.Tensor:
    lanes = lanes_of(n)

    def part(*i):
        *r, ln = i
        c = te.reduce_axis(n // lanes, "c")
        return reducer(value(*r, c.var * lanes + ln), c)

    return te.compute((*rows, tir.IntImm(lanes)), part, name=name)


def _across(rows: tuple, lanes: int, parts: te.Tensor, name: str, reducer=te.sum) -> te.Tensor:
    """The lanes reduced, shaped (*rows, 1)."""
    def total(*i):
        ln = te.reduce_axis(lanes, "l")
        return reducer(parts(*i[:-1], ln.var), ln)

    return te.compute((*rows, tir.IntImm(1)), total, name=name)


def layer_norm_rows(x: te.Tensor, scale: te.Tensor, b: te.Tensor | None, eps: float,
                    w: str) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """(y, mean, inv_std) of layer normalization over x's last axis; mean/inv_std keep a unit last dim."""
    n = static(x.shape[-1])
    rows = tuple(x.shape[:-1])
    count = tir.const(float(n), w)
    xw = lambda *i: tir.cast(w, x(*i))  # noqa: E731
    lanes = lanes_of(n)
    s = _lane_sum(rows, n, xw, NAMES[0])

    total = _across(rows, lanes, s, TOTALS[0])
    mean = te.compute((*rows, tir.IntImm(1)), lambda *i: total(*i) / count, name=NAMES[1])

    def dev(*i):
        d = xw(*i) - mean(*i[:-1], tir.const(0))
        return d * d

    sq = _lane_sum(rows, n, dev, NAMES[2])

    sq_total = _across(rows, lanes, sq, TOTALS[1])
    inv = te.compute((*rows, tir.IntImm(1)),
                     lambda *i: tir.const(1.0, w) / te.sqrt(sq_total(*i) / count + tir.const(eps, w)), name=NAMES[3])

    def f(*i):
        at = (*i[:-1], tir.const(0))
        y = (xw(*i) - mean(*at)) * inv(*at) * tir.cast(w, broadcast_load(scale, i))
        if b is not None:
            y = y + tir.cast(w, broadcast_load(b, i))
        return tir.cast(x.dtype, y)

    return te.compute(x.shape, f, name=NAMES[4]), mean, inv


def instance_eligible(x: te.Tensor, w: str) -> bool:
    """Statistics over every axis after (N, C), all of static length, the last one long enough for lanes."""
    dims = [static(d) for d in x.shape[2:]]
    return x.ndim >= 3 and all(d is not None for d in dims) and lanes_of(dims[-1]) > 1 and w in ("float32", "float64")


def image_stats(value, rows: tuple, dims: Sequence[int], eps: float, w: str) -> tuple[te.Tensor, te.Tensor]:
    """(mean, 1/std), shaped (*rows, 1), of value(*row, *spatial) over spatial indices of extents `dims`:
    the stage names of layer_norm_rows (so schedule_rowwise takes it), reduced in lanes along the last
    spatial axis with the others as more reduce loops, two passes as the reference."""
    lanes = lanes_of(dims[-1])
    count = tir.const(float(math.prod(dims)), w)

    def lane_sum(fn, name: str) -> te.Tensor:
        def part(*i):
            *r, ln = i
            ks = [te.reduce_axis(d, f"k{a}") for a, d in enumerate(dims[:-1])]
            ks.append(te.reduce_axis(dims[-1] // lanes, "c"))
            return te.sum(fn(*r, *(k.var for k in ks[:-1]), ks[-1].var * lanes + ln), ks)

        return te.compute((*rows, tir.IntImm(lanes)), part, name=name)

    total = _across(rows, lanes, lane_sum(value, NAMES[0]), TOTALS[0])
    mean = te.compute((*rows, tir.IntImm(1)), lambda *i: total(*i) / count, name=NAMES[1])
    nr = len(rows)

    def dev(*i):
        d = value(*i) - mean(*i[:nr], tir.const(0))
        return d * d

    sq_total = _across(rows, lanes, lane_sum(dev, NAMES[2]), TOTALS[1])
    inv = te.compute((*rows, tir.IntImm(1)),
                     lambda *i: tir.const(1.0, w) / te.sqrt(sq_total(*i) / count + tir.const(eps, w)), name=NAMES[3])
    return mean, inv


def instance_norm_rows(x: te.Tensor, scale: te.Tensor, b: te.Tensor, eps: float, w: str) -> te.Tensor:
    """Instance normalization of static images. A GroupNorm exported from PyTorch is this op on
    [N, groups, C/groups * H * W]: 8 rows of 65536 took 1.03 ms as one serial chain per statistic,
    0.33 ms here (U-Net, one core)."""
    xw = lambda *i: tir.cast(w, x(*i))  # noqa: E731
    mean, inv = image_stats(xw, tuple(x.shape[:2]), [static(d) for d in x.shape[2:]], eps, w)

    def f(n, c, *s):
        y = (xw(n, c, *s) - mean(n, c, tir.const(0))) * inv(n, c, tir.const(0))
        return tir.cast(x.dtype, y * tir.cast(w, scale(c)) + tir.cast(w, b(c)))

    return te.compute(x.shape, f, name=NAMES[4])


def group_norm_rows(x: te.Tensor, scale: te.Tensor, b: te.Tensor, groups: int, eps: float, sd: str) -> te.Tensor:
    """Group normalization of static images: the statistics of each (n, group) over its channels and
    pixels as image_stats (two passes: the reference's E[x^2] - E[x]^2 is the same value, less exactly);
    the normalized value rounded to x's dtype, then scale and bias in x's dtype (kiln.op.norm)."""
    cg = static(x.shape[1]) // groups
    xs = lambda n, g, ci, *s: tir.cast(sd, x(n, g * cg + ci, *s))  # noqa: E731
    rows = (x.shape[0], tir.IntImm(groups))
    mean, inv = image_stats(xs, rows, [cg, *(static(d) for d in x.shape[2:])], eps, sd)

    def f(n, ch, *s):
        g = ch // cg
        y = tir.cast(x.dtype, (tir.cast(sd, x(n, ch, *s)) - mean(n, g, tir.const(0))) * inv(n, g, tir.const(0)))
        return y * scale(ch) + b(ch)

    return te.compute(x.shape, f, name=NAMES[4])


def softmax_eligible(x: te.Tensor, axes: Sequence[int]) -> bool:
    return axes == (x.ndim - 1,) and static(x.shape[-1]) is not None and x.ndim >= 1


def softmax_rows(x: te.Tensor, w: str) -> te.Tensor:
    """softmax over x's last axis computed in dtype w: exp(x - max) / sum, as the general compute."""
    n = static(x.shape[-1])
    rows = tuple(x.shape[:-1])
    lanes = lanes_of(n)
    xw = lambda *i: tir.cast(w, x(*i))  # noqa: E731
    peak = _across(rows, lanes, _lane_sum(rows, n, xw, SOFTMAX[0], fmax), SOFTMAX[1], fmax)
    ex = lambda *i: vexp(xw(*i) - peak(*i[:-1], tir.const(0)))  # noqa: E731
    total = _across(rows, lanes, _lane_sum(rows, n, ex, SOFTMAX[2]), SOFTMAX[3])
    return te.compute(x.shape, lambda *i: tir.cast(x.dtype, ex(*i) / total(*i[:-1], tir.const(0))), name=SOFTMAX[4])


def _schedule_softmax(s: Schedule, outputs: Sequence[Tensor], target: Target) -> Schedule:
    by_name = {st.op.name: st for st in s.stages}
    max_l, peak, sum_l, total, y = (by_name[n] for n in SOFTMAX)
    out_ops = {t.op for t in outputs}
    for st in list(s.stages):
        if st not in (max_l, peak, sum_l, total, y) and st.op not in out_ops:
            st.compute_inline()
    row = _row_blocks(y)
    for st in (max_l, peak, sum_l, total) if row is not None else ():  # one row: at the root
        st.compute_at(y, row)
    for lanes in (max_l, sum_l):
        *r, ln = lanes.op.axis
        lanes.reorder(*r, *lanes.op.reduce_axis, ln)
        lanes.vectorize(ln)
    for st in s.stages:
        if st.op in out_ops and st is not y:
            loop_nest(st, target)
    return s


def _row_blocks(y) -> object:
    """Blocks of rows of y in parallel (when big enough), the row vectorized; the block loop.
    NOTE: only the innermost row axis is split, then fused with the outer ones: fusing first and
    splitting the fused loop would leave bound inference unable to confine a block to its rows."""
    *rows, last = y.op.axis
    n = static(last.dom.extent) or 1
    if not rows:
        y.vectorize(last)
        return None
    *outer, inner = rows
    ro, ri = y.split(inner, block(inner.dom.extent, knob("rowwise.rows", (1, 2, 4, 8, 16), ROWS)))
    y.reorder(*outer, ro, ri, last)
    fused = y.fuse(*outer, ro) if outer else ro
    if math.prod(static(r.dom.extent) or 0 for r in rows) * n >= 1 << 14:
        y.parallel(fused)
    y.vectorize(last)
    return fused


def _rows_parallel(st, inner: int) -> object:
    """Fuse the row axes, run them in parallel; returns the row loop the statistics attach to."""
    *rows, last = st.op.axis
    row = parallel_outer(st, rows, math.prod(static(r.dom.extent) or 1 for r in rows) * inner) if rows else last
    return row


def schedule_rowwise(outputs: Sequence[Tensor], target: Target) -> Schedule | None:
    """Statistics per row inside the parallel row loop of their output; the normalized output
    in blocks of rows, vectorized along the row."""
    s = create_schedule(outputs)
    by_name = {st.op.name: st for st in s.stages}
    if all(n in by_name for n in SOFTMAX):
        return _schedule_softmax(s, outputs, target)
    if any(n not in by_name for n in NAMES + TOTALS):
        return None
    s_lanes, mean, sq_lanes, inv, y = (by_name[n] for n in NAMES)
    s_total, sq_total = (by_name[n] for n in TOTALS)
    keep = {s_lanes, mean, sq_lanes, inv, y, s_total, sq_total}
    out_ops = {t.op for t in outputs}
    for st in list(s.stages):
        if st not in keep and st.op not in out_ops:
            st.compute_inline()
    n = static(y.op.axis[-1].dom.extent) or 1
    for stat, total, lanes in ((mean, s_total, s_lanes), (inv, sq_total, sq_lanes)):
        row = _rows_parallel(stat, n)
        total.compute_at(stat, row)
        lanes.compute_at(stat, row)
        *r, ln = lanes.op.axis
        lanes.reorder(*r, *lanes.op.reduce_axis, ln)
        lanes.vectorize(ln)
    _row_blocks(y)
    for st in s.stages:
        if st.op in out_ops and st not in keep:
            loop_nest(st, target)
    return s
