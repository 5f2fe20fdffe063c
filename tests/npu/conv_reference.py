"""Numpy references for the accelerator tests: an NHWC convolution in exact integers (or float64)."""

from __future__ import annotations

import numpy as np

from kiln.npu.conv_spec import ConvSpec


def conv_nhwc(x: np.ndarray, w: np.ndarray, spec: ConvSpec) -> np.ndarray:
    """x (n, h, w, cin), w (kh, kw, cin or 1, cout) -> (n, out_h, out_w, cout), int64 or float64."""
    wide = np.int64 if x.dtype.kind == "i" else np.float64
    top, left, bottom, right = spec.pads
    xp = np.pad(x.astype(wide), ((0, 0), (top, bottom), (left, right), (0, 0)))
    out = np.zeros((spec.n, spec.out_h, spec.out_w, spec.cout), wide)
    s = spec.stride
    for i in range(spec.kh):
        for j in range(spec.kw):
            window = xp[:, i:i + s * (spec.out_h - 1) + 1:s, j:j + s * (spec.out_w - 1) + 1:s]
            out += window * w[i, j, 0].astype(wide) if spec.depthwise else window @ w[i, j].astype(wide)
    return out


def requantize(acc: np.ndarray, shift: int) -> np.ndarray:
    """int32 accumulators -> int8: a rounding shift right, then saturation."""
    return np.clip((acc + (1 << (shift - 1))) >> shift, -128, 127).astype(np.int8)
