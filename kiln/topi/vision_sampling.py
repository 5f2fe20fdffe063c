"""Computes for the sampling operators of kiln/op/vision.py: grid_sample (nearest, linear and
cubic taps; zeros, border and reflection padding), affine_grid and roi_align, each following its
numpy reference step by step with coordinates in float64, as the reference computes them.

roi_align needs a static sampling_ratio: with 0 the number of samples per bin depends on each
RoI's size (data), so such calls raise ComputeError and run on the host.
"""

from __future__ import annotations

import itertools

from kiln import te, tir
from kiln.tir import PrimExpr, select
from kiln.topi.registry import F64, ComputeError, f64, out_dims, register_compute, static_dim, tensor_type

I64 = "int64"


def _index(pos: PrimExpr, n: int) -> PrimExpr:
    """A float64 position as an int64 index clamped into [0, n): memory-safe for any value."""
    return tir.max_(tir.min_(tir.cast(I64, tir.max_(tir.min_(pos, f64(n - 1)), f64(0))), tir.const(n - 1)),
                    tir.const(0))


def _and(conds: list[PrimExpr]) -> PrimExpr | None:
    out = None
    for c in conds:
        out = c if out is None else tir.And(out, c)
    return out


# ---------------------------------------------------------------------------------------------
# vision.grid_sample


def reflect(x: PrimExpr, lo: float, hi: float) -> PrimExpr:
    """x folded into [lo, hi] by mirroring at the borders (kiln.op.vision.reflect)."""
    span = hi - lo
    if span <= 0:
        return f64(lo)
    below = x < f64(lo)
    dist = select(below, f64(lo) - x, x - f64(hi))
    flips = te.floor(dist / f64(span))
    rem = dist - flips * f64(span)
    even = tir.eq(flips - f64(2) * te.floor(flips / f64(2)), f64(0))
    folded = select(tir.eq(below, even), f64(lo) + rem, f64(hi) - rem)
    return select(tir.Or(x < f64(lo), x > f64(hi)), folded, x)


def _cubic(d: PrimExpr, a: float = -0.75) -> PrimExpr:
    """Keys' cubic kernel (kiln.op.vision.cubic_kernel) at float64 distance d."""
    d = te.fabs(d)
    near = ((f64(a + 2) * d - f64(a + 3)) * d * d) + f64(1)
    far = ((f64(a) * d - f64(5 * a)) * d + f64(8 * a)) * d - f64(4 * a)
    return select(d <= f64(1), near, select(d < f64(2), far, f64(0)))


def grid_taps(attrs, g: PrimExpr, n: int) -> list[tuple[PrimExpr, PrimExpr | None, PrimExpr | None]]:
    """(index into an axis of size n, weight or None, validity or None) per tap at normalized
    coordinate g. Nearest and linear positions are clamped or reflected first; cubic taps are
    padded one by one (as the reference does)."""
    pos = (g + f64(1)) / f64(2) * f64(n - 1) if attrs.align_corners else ((g + f64(1)) * f64(n) - f64(1)) / f64(2)
    lo, hi = (0.0, n - 1.0) if attrs.align_corners else (-0.5, n - 0.5)
    if attrs.mode == "nearest":
        pos = te.nearbyint(pos)
    if attrs.mode != "cubic" and attrs.padding_mode == "border":
        pos = select(tir.Or(pos < f64(lo), pos > f64(hi)), tir.max_(tir.min_(pos, f64(n - 1)), f64(0)), pos)
    elif attrs.mode != "cubic" and attrs.padding_mode == "reflection":
        pos = reflect(pos, lo, hi)
    if attrs.mode == "nearest":
        taps: list[tuple[PrimExpr, PrimExpr | None]] = [(pos, None)]
    else:
        base = te.floor(pos)
        offsets = (0, 1) if attrs.mode == "linear" else (-1, 0, 1, 2)
        taps = []
        for o in offsets:
            idx = base + f64(o)
            d = pos - idx
            taps.append((idx, tir.max_(f64(1) - te.fabs(d), f64(0)) if attrs.mode == "linear" else _cubic(d)))
    out = []
    for idx, w in taps:
        valid = None
        if attrs.padding_mode == "zeros":
            valid = tir.And(idx >= f64(0), idx < f64(n))
        elif attrs.padding_mode == "reflection":
            idx = te.trunc(reflect(idx, lo, hi))
        out.append((_index(idx, n), w, valid))
    return out


def _pick(values: list[PrimExpr], i: PrimExpr) -> PrimExpr:
    """values[i] for a loop variable i."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = select(tir.eq(i, tir.const(k)), values[k], out)
    return out


def _tap_table(attrs, grid: te.Tensor, k: int, size: int) -> te.Tensor:
    """(N, *out spatial, taps, 3) float64: per output position, each tap's index, weight and
    validity (1 or 0) along input axis k, computed once for all channels (NOTE: the unit reduce
    axis keeps it in a buffer; the generic schedule would inline a plain compute)."""
    r = grid.ndim - 2
    n_taps = {"nearest": 1, "linear": 2, "cubic": 4}[attrs.mode]

    def f(n, *rest):
        o, t, j = rest[:-2], rest[-2], rest[-1]
        taps = grid_taps(attrs, tir.cast(F64, grid(n, *o, tir.const(r - 1 - k))), size)
        per_tap = [_pick([tir.cast(F64, idx), w if w is not None else f64(1),
                          select(valid, f64(1), f64(0)) if valid is not None else f64(1)], j) for idx, w, valid in taps]
        unit = te.reduce_axis(1, "unit")
        return te.sum(_pick(per_tap, t), [unit])

    shape = (grid.shape[0], *grid.shape[1:-1], tir.const(n_taps), tir.const(3))
    return te.compute(shape, f, name=f"grid_sample_taps{k}")


@register_compute("vision.grid_sample")
def _grid_sample(attrs, inputs, out_type, consts):
    x, grid = inputs
    name = "vision.grid_sample"
    if attrs.mode != "nearest" and x.dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise ComputeError(f"{name}: {attrs.mode} sampling of {x.dtype} has no compute")
    sizes = [static_dim(name, d, "spatial size") for d in x.shape[2:]]
    tables = [_tap_table(attrs, grid, k, size) for k, size in enumerate(sizes)]
    out_t = tensor_type(out_type)

    def f(n, c, *o):
        total = None
        for combo in itertools.product(*(range(static_dim(name, t.shape[-2], "taps")) for t in tables)):
            fields = [[t(n, *o, tir.const(tap), tir.const(j)) for j in range(3)] for t, tap in zip(tables, combo)]
            val = x(n, c, *(tir.cast(I64, fl[0]) for fl in fields))
            valid = _and([fl[2] > f64(0) for fl in fields]) if attrs.padding_mode == "zeros" else None
            if attrs.mode == "nearest":
                zero = tir.const(False, "bool") if x.dtype == "bool" else tir.const(0, x.dtype)
                return val if valid is None else select(valid, val, zero)
            w = fields[0][1]
            for fl in fields[1:]:
                w = w * fl[1]
            term = tir.cast(F64, val) * w
            if valid is not None:
                term = select(valid, term, f64(0))
            total = term if total is None else total + term
        return tir.cast(out_t.dtype, total)

    return te.compute(out_dims(out_type, inputs), f, name="grid_sample")


# ---------------------------------------------------------------------------------------------
# vision.affine_grid


def _base_coord(i: PrimExpr, n: int, align_corners: int) -> PrimExpr:
    """Position i of n evenly spaced ones in [-1, 1] (kiln.op.vision._base_coords)."""
    if n == 1:
        return f64(0)
    fi = tir.cast(F64, i)
    if align_corners:
        return fi * f64(2.0 / (n - 1)) + f64(-1)
    return (f64(2) * fi + f64(1)) / f64(n) - f64(1)


@register_compute("vision.affine_grid")
def _affine_grid(attrs, inputs, out_type, consts):
    theta = inputs[0]
    name = "vision.affine_grid"
    shape = out_dims(out_type, inputs)
    spatial = [static_dim(name, d, "output size") for d in shape[1:-1]]
    r = len(spatial)
    out_t = tensor_type(out_type)

    def f(n, *rest):
        s, i = rest[:-1], rest[-1]
        homo = [_base_coord(s[r - 1 - k], spatial[r - 1 - k], attrs.align_corners) for k in range(r)] + [f64(1)]
        total = None
        for k, h in enumerate(homo):
            term = h * tir.cast(F64, theta(n, i, tir.const(k)))
            total = term if total is None else total + term
        return tir.cast(out_t.dtype, total)

    return te.compute(shape, f, name="affine_grid")


# ---------------------------------------------------------------------------------------------
# vision.roi_align


def _roi_axis(start: PrimExpr, extent: PrimExpr, bins: int, ratio: int, size: int, b: PrimExpr, s: PrimExpr):
    """Sample s of bin b along one axis (kiln.op.vision._roi_samples): low/high index, their
    weights, and whether the sample lies inside [-1, size]."""
    step = extent / f64(bins)
    p = start + (tir.cast(F64, b) * step + (tir.cast(F64, s) + f64(0.5)) * step / f64(ratio))
    valid = tir.And(p >= f64(-1), p <= f64(size))
    p = tir.max_(p, f64(0))
    low = tir.max_(tir.min_(tir.cast(I64, te.floor(tir.min_(p, f64(size)))), tir.const(size - 1)), tir.const(0))
    high = tir.min_(low + 1, tir.const(size - 1))
    frac = select(low >= tir.const(size - 1), f64(0), p - tir.cast(F64, low))
    return low, high, f64(1) - frac, frac, valid


def _roi_geometry(attrs, rois: te.Tensor, axis: int, bins: int, size: int) -> te.Tensor:
    """(R, bins, ratio, 5) float64: per RoI, bin and sample along one axis (0: x, 1: y), the low
    and high pixel index, their weights and validity (1 or 0). Kept in a buffer so the per-channel
    loop only loads it (NOTE: the unit reduce axis stops the generic schedule inlining it)."""
    shift = 0.5 if attrs.coordinate_transformation_mode == "half_pixel" else 0.0
    ratio = attrs.sampling_ratio

    def f(r, b, s, j):
        lo, hi = (tir.cast(F64, rois(r, tir.const(k))) * f64(attrs.spatial_scale) - f64(shift)
                  for k in (axis, axis + 2))
        extent = hi - lo
        if shift == 0.0:
            extent = tir.max_(extent, f64(1))
        low, high, wl, wh, valid = _roi_axis(lo, extent, bins, ratio, size, b, s)
        fields = [tir.cast(F64, low), tir.cast(F64, high), wl, wh, select(valid, f64(1), f64(0))]
        unit = te.reduce_axis(1, "unit")
        return te.sum(_pick(fields, j), [unit])

    return te.compute((rois.shape[0], tir.const(bins), tir.const(ratio), tir.const(5)), f,
                      name=f"roi_align_{'xy'[axis]}")


@register_compute("vision.roi_align")
def _roi_align(attrs, inputs, out_type, consts):
    x, rois, batch = inputs
    name = "vision.roi_align"
    if attrs.sampling_ratio <= 0:
        raise ComputeError(f"{name}: sampling_ratio {attrs.sampling_ratio} makes the samples per bin depend on "
                           f"each RoI's size (data)")
    nb, height, width = (static_dim(name, x.shape[k], "input size") for k in (0, 2, 3))
    oh, ow, ratio = attrs.output_height, attrs.output_width, attrs.sampling_ratio
    out_t = tensor_type(out_type)
    gy, gx = _roi_geometry(attrs, rois, 1, oh, height), _roi_geometry(attrs, rois, 0, ow, width)

    def f(r, c, ph, pw):
        img = tir.max_(tir.min_(tir.cast(I64, batch(r)), tir.const(nb - 1)), tir.const(0))
        sy, sx = te.reduce_axis(ratio, "sy"), te.reduce_axis(ratio, "sx")
        yv = [gy(r, ph, sy.var, tir.const(k)) for k in range(5)]
        xv = [gx(r, pw, sx.var, tir.const(k)) for k in range(5)]
        corners = [wy * wx * tir.cast(F64, x(img, c, tir.cast(I64, ys), tir.cast(I64, xs)))
                   for ys, wy in ((yv[0], yv[2]), (yv[1], yv[3])) for xs, wx in ((xv[0], xv[2]), (xv[1], xv[3]))]
        valid = tir.And(yv[4] > f64(0), xv[4] > f64(0))
        if attrs.mode == "avg":
            sample = select(valid, corners[0] + corners[1] + corners[2] + corners[3], f64(0))
            return te.sum(sample, [sy, sx])
        best = tir.max_(tir.max_(corners[0], corners[1]), tir.max_(corners[2], corners[3]))
        return te.max(select(valid, best, f64(0)), [sy, sx])

    pooled = te.compute(out_dims(out_type, inputs), f, name="roi_align_pool")
    scale = f64(ratio * ratio) if attrs.mode == "avg" else f64(1)
    return te.compute(pooled.shape, lambda *i: tir.cast(out_t.dtype, pooled(*i) / scale), name="roi_align")
