"""Resize (nearest / linear / cubic, antialias, exclude_outside, every coordinate transformation
mode) as one separable stage per resized axis, each computed in float64 like the reference.

Scales or sizes (and roi) must be constants: they fix the output shape. The source position of
each output index and the tap weights are closed-form expressions of that index, so no tables
are needed; a tap outside the input reads the clamped edge, as in the reference. Plain linear
resizes of float tensors take the let-free float32 path of kiln.topi.resize_linear instead (it
vectorizes inside a consumer's select).
"""

from __future__ import annotations

import math

import numpy as np

from kiln import te, tir
from kiln.ir.types import ANY
from kiln.op.vision import NEAREST_MODE as _NEAREST_REF
from kiln.op.vision import SOURCE_COORD, ResizeAttrs, resize_axes, resize_plan
from kiln.tir import PrimExpr
from kiln.tir.expr import Let, Var
from kiln.topi.registry import ComputeError, register_compute
from kiln.topi.resize_linear import affine_source, linear_axis, linear_in_input_dtype

F64 = "float64"


def _f(v: float) -> PrimExpr:
    return tir.const(float(v), F64)


def _source(mode: str, y: PrimExpr, s: float, n: int, w: float, wi: int, r0: float, r1: float) -> PrimExpr:
    """The input coordinate of output index y (kiln.op.vision.SOURCE_COORD, operation for operation)."""
    half = (y + _f(0.5)) / _f(s)
    if mode == "half_pixel":
        return half - _f(0.5)
    if mode == "half_pixel_symmetric":
        return (_f(n / 2 * (1 - wi / w)) + half) - _f(0.5)
    if mode == "pytorch_half_pixel":
        return half - _f(0.5) if w > 1 else _f(0.0)
    if mode == "align_corners":
        return y * _f(n - 1) / _f(w - 1) if w != 1 else _f(0.0)
    if mode == "asymmetric":
        return y / _f(s)
    if mode == "tf_half_pixel_for_nn":
        return half
    if w != 1:  # tf_crop_and_resize
        return _f(r0 * (n - 1)) + y * _f(r1 - r0) * _f(n - 1) / _f(w - 1)
    return _f(r0 * (n - 1)) + _f((r1 - r0) * (n - 1) / 2)


def _floor(v: PrimExpr) -> PrimExpr:
    """floor of a float64 position, exactly, from its truncation: floor() vectorizes only without
    -ftrapping-math, so a resize's loop stayed scalar (a 2x nearest upsample took 7x ORT's time)."""
    t = tir.cast(F64, tir.cast("int64", v))
    return t - tir.select(v < t, _f(1.0), _f(0.0))


def _ceil(v: PrimExpr) -> PrimExpr:
    t = tir.cast(F64, tir.cast("int64", v))
    return t + tir.select(v > t, _f(1.0), _f(0.0))


_NEAREST = {
    "round_prefer_floor": lambda x: _ceil(x - _f(0.5)),
    "round_prefer_ceil": lambda x: _floor(x + _f(0.5)),
    "floor": _floor,
    "ceil": _ceil,
}


def _linear(d: PrimExpr) -> PrimExpr:
    return tir.max_(tir.min_(_f(1.0) - te.fabs(d), _f(1.0)), _f(0.0))


def _cubic(a: float):
    def k(d: PrimExpr) -> PrimExpr:
        d = te.fabs(d)
        near = ((_f(a + 2) * d - _f(a + 3)) * d * d) + _f(1.0)
        far = ((_f(a) * d - _f(5 * a)) * d + _f(8 * a)) * d - _f(4 * a)
        return tir.select(d <= _f(1.0), near, tir.select(d < _f(2.0), far, _f(0.0)))

    return k


def _let(name: str, value: PrimExpr, body) -> PrimExpr:
    v = Var(name, value.dtype)
    return Let(v, value, body(v))


def _axis(attrs: ResizeAttrs, prev: te.Tensor, axis: int, scale: float, out: int, roi) -> te.Tensor:
    """prev resampled along `axis` to `out` points (float64)."""
    n = prev.shape[axis].value
    mode = attrs.coordinate_transformation_mode
    shape = list(prev.shape)
    shape[axis] = tir.const(out)

    def load(i, idx: PrimExpr) -> PrimExpr:
        at = tir.min_(tir.max_(idx, tir.const(0)), tir.const(max(n - 1, 0)))
        return tir.cast(F64, prev(*(at if k == axis else v for k, v in enumerate(i))))

    rule = _nearest_rule(attrs, n, scale, out, roi)
    if rule is not None:
        mul, add, div = rule

        def nearest(*i):
            return load(i, (i[axis] * mul + add) // div)

        return te.compute(shape, nearest, name=f"resize_axis{axis}")

    def taps(i, pos: PrimExpr) -> PrimExpr:
        if attrs.mode == "nearest":
            return load(i, tir.cast("int64", _NEAREST[attrs.nearest_mode](pos)))
        kernel, support = (_linear, 1.0) if attrs.mode == "linear" else (_cubic(attrs.cubic_coeff_a), 2.0)
        stretch = min(scale, 1.0) if attrs.antialias else 1.0
        reach = support / stretch
        # NOTE: the window's last tap lies `reach` or more from pos, so it weighs 0 when reach is whole:
        # without antialias, linear reads 2 taps and cubic 4, and the weights already sum to 1
        whole = reach == int(reach)
        count = int(2 * math.ceil(reach)) + (0 if whole else 1)
        normalize = attrs.exclude_outside or not whole

        def weighted(first: PrimExpr) -> PrimExpr:
            idx = [first + _f(t) for t in range(count)]
            ws = [kernel(_f(stretch) * (j - pos)) for j in idx]
            if attrs.exclude_outside:
                ws = [tir.select((j < _f(0.0)) | (j >= _f(n)), _f(0.0), w) for j, w in zip(idx, ws)]

            def body(*wv: Var) -> PrimExpr:
                total = wv[0]
                for w in wv[1:]:
                    total = total + w
                total = tir.select(tir.eq(total, _f(0.0)), _f(1.0), total)
                acc = None
                for j, w in zip(idx, wv):
                    term = load(i, tir.cast("int64", j)) * ((w / total) if normalize else w)
                    acc = term if acc is None else acc + term
                return acc

            return _lets("w", ws, body)

        return _let("first", _floor(pos - _f(reach)) + _f(1.0), weighted)

    def f(*i):
        def at(pos: PrimExpr) -> PrimExpr:
            v = taps(i, pos)
            if mode == "tf_crop_and_resize":
                v = tir.select((pos < _f(0.0)) | (pos > _f(n - 1)), _f(attrs.extrapolation_value), v)
            return v

        pos = _source(mode, tir.cast(F64, i[axis]), scale, n, scale * n, out, *roi)
        # nearest reads pos once: no Let, which inside a consumer's select (a concat) is control flow
        # that keeps gcc from vectorizing the loop
        return at(pos) if attrs.mode == "nearest" and mode != "tf_crop_and_resize" else _let("pos", pos, at)

    return te.compute(shape, f, name=f"resize_axis{axis}")


def _nearest_rule(attrs: ResizeAttrs, n: int, scale: float, out: int, roi) -> tuple[int, int, int] | None:
    """(mul, add, div) with the reference's nearest index of every output y equal to (y * mul + add) // div
    (clamped), checked here over all y: an integer up/downsample then reads by integer arithmetic instead
    of float64 positions per element (a 2x upsample of [1, 64, 40, 40] took 6x ORT's time)."""
    if attrs.mode != "nearest" or attrs.coordinate_transformation_mode == "tf_crop_and_resize" or n < 1:
        return None
    y = np.arange(out, dtype=np.float64)
    with np.errstate(all="ignore"):
        pos = SOURCE_COORD[attrs.coordinate_transformation_mode](y, scale, n, scale * n, out, *roi)
        want = np.clip(_NEAREST_REF[attrs.nearest_mode](pos), 0, n - 1)
    yi = np.arange(out, dtype=np.int64)
    up, down = max(1, round(out / n)), max(1, round(n / out))
    for mul, div in ((1, up), (down, 1)):
        for add in range(max(mul, div)):
            if np.array_equal(np.clip((yi * mul + add) // div, 0, n - 1), want):
                return mul, add, div
    return None


def _lets(name: str, values: list[PrimExpr], body) -> PrimExpr:
    """body(*vars) with each value bound to its own Let var."""
    vars_ = [Var(f"{name}{k}", v.dtype) for k, v in enumerate(values)]
    out = body(*vars_)
    for v, val in reversed(list(zip(vars_, values))):
        out = Let(v, val, out)
    return out


def _cast_back(v: PrimExpr, dtype: str) -> PrimExpr:
    """float64 to `dtype`: integers rounded half to even and saturated (kiln.op.vision.cast_back)."""
    if tir.is_float(dtype):
        return tir.cast(dtype, v)
    info = np.iinfo(dtype) if dtype != "bool" else np.iinfo("uint8")
    v = tir.max_(tir.min_(te.nearbyint(v), _f(info.max)), _f(info.min))
    return tir.cast(dtype, v)


def _given(consts, i: int) -> np.ndarray | None:
    v = consts[i] if i < len(consts) else None
    return v if v is not None and v.size else None


@register_compute("vision.resize")
def _resize(attrs, inputs, out_type, consts):
    x = inputs[0]
    scales, sizes = _given(consts, 2), _given(consts, 3)
    if scales is None and sizes is None:
        raise ComputeError("vision.resize: scales or sizes must be a constant to generate code")
    if inputs[1] is not None and consts[1] is None:
        raise ComputeError("vision.resize: roi must be a constant to generate code")
    shape = [d.value if isinstance(d, tir.IntImm) else d for d in x.shape]
    out, scale = resize_plan(attrs, tuple(shape), scales, sizes)
    axes = resize_axes(attrs, x.ndim)
    rois = {a: (0.0, 1.0) for a in axes}
    roi = _given(consts, 1)
    if roi is not None:
        r = roi.astype(np.float64).reshape(2, -1)
        rois = {a: (float(r[0, k]), float(r[1, k])) for k, a in enumerate(axes)}
    fast = linear_in_input_dtype(attrs, x.dtype)
    y = x if fast else te.compute(x.shape, lambda *i: tir.cast(F64, x(*i)), name="resize_in")
    for a in axes:
        same = out[a] is shape[a] or (isinstance(out[a], int) and out[a] == shape[a])
        if same and scale[a] == 1.0 and rois[a] == (0.0, 1.0):
            continue
        if not isinstance(shape[a], int) or out[a] is ANY or scale[a] is None:
            raise ComputeError(f"vision.resize: axis {a} needs a static input size and output size")
        if fast:
            src = affine_source(attrs.coordinate_transformation_mode, scale[a], shape[a], out[a])
            y = linear_axis(y, a, out[a], src)
        else:
            y = _axis(attrs, y, a, scale[a], out[a], rois[a])
    if y.dtype == x.dtype:
        return y
    return te.compute(y.shape, lambda *i: _cast_back(y(*i), x.dtype), name="resize")
