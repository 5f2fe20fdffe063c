"""Linear resize of float tensors in their own dtype, as let-free, branch-free expressions.

The general resize (kiln.topi.resize) follows the float64 reference operation for operation and binds
its positions and weights with Lets. Inlined into a consumer's select (a concat after an upsample, as
in U-Nets) those Lets are control flow, so gcc leaves the loop scalar: 3.9 ns per output element of a
2x bilinear upsample in NCHWc. Here the source position is one affine map of the output index (every
coordinate mode but tf_crop_and_resize is one), its floor is a truncation of a shifted, positive
position, and the blend reads two taps in the input's dtype: the loop vectorizes, and the position
math (per output row/column) is invariant in the channel-block loop of NCHWc. Linear weights are
continuous in the position, so the last-bit differences from the reference's float64 order do not
move a result by more than float32 rounding.
"""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.op.vision import ResizeAttrs
from kiln.tir import PrimExpr

F64 = "float64"
# blended in float32, the narrow floats rounded once at the end (as the reference's float64 result is)
LINEAR_DTYPES = ("float32", "float16", "bfloat16")
F32 = "float32"


def linear_in_input_dtype(attrs: ResizeAttrs, dtype: str) -> bool:
    """2-tap linear interpolation with weights that need no normalizing: no antialias (more taps),
    no exclude_outside (renormalized edges), no tf_crop_and_resize (extrapolation outside the roi)."""
    return (attrs.mode == "linear" and not attrs.antialias and not attrs.exclude_outside
            and attrs.coordinate_transformation_mode != "tf_crop_and_resize" and dtype in LINEAR_DTYPES)


def affine_source(mode: str, s: float, n: int, out: int) -> tuple[float, float]:
    """(a, b) with source position a * y + b of output index y (kiln.op.vision.SOURCE_COORD)."""
    w = s * n
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and w <= 1:
            return 0.0, 0.0
        return 1.0 / s, 0.5 / s - 0.5
    if mode == "half_pixel_symmetric":
        return 1.0 / s, n / 2 * (1 - out / w) + 0.5 / s - 0.5
    if mode == "align_corners":
        return ((n - 1) / (w - 1), 0.0) if w != 1 else (0.0, 0.0)
    if mode == "asymmetric":
        return 1.0 / s, 0.0
    if mode == "tf_half_pixel_for_nn":
        return 1.0 / s, 0.5 / s
    raise ValueError(f"no affine source position for coordinate mode {mode!r}")


def linear_axis(prev: te.Tensor, axis: int, out: int, src: tuple[float, float]) -> te.Tensor:
    """prev resampled along `axis` to `out` float32 points: prev[first] + (prev[first + 1] - prev[first]) * w
    with first = floor(pos), w = pos - first, both taps clamped to the edge (as the reference reads them)."""
    n = prev.shape[axis].value
    a, b = src
    # floor(pos) = trunc(pos + shift) - shift once pos + shift >= 0 over all outputs (pos is affine in y)
    lowest = min(b, a * (out - 1) + b)
    shift = max(0, math.ceil(-lowest)) + 1
    shape = list(prev.shape)
    shape[axis] = tir.const(out)

    def f(*i):
        p = tir.cast(F64, i[axis]) * tir.const(a, F64) + tir.const(b + shift, F64)  # pos + shift > 0
        t = tir.cast("int64", p)
        w = tir.cast(F32, p - tir.cast(F64, t))

        def tap(k: int) -> PrimExpr:
            at = tir.min_(tir.max_(t + tir.const(k - shift), tir.const(0)), tir.const(max(n - 1, 0)))
            v = prev(*(at if d == axis else v for d, v in enumerate(i)))
            return v if v.dtype == F32 else tir.cast(F32, v)

        v0 = tap(0)
        return v0 + (tap(1) - v0) * w

    return te.compute(shape, f, name=f"resize_linear{axis}")
