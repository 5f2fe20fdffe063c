"""The computes of signal.dft and signal.stft (kiln/op/signal.py): direct O(n^2) sums with cos/sin
twiddles in float64. DFT: forward or inverse, full or onesided, and the real inverse (IRFFT) of a
onesided spectrum; dft_length and axis must be constants, they fix the output shape. STFT: the DFT of
each (windowed) frame; frame_step and frame_length must be constants."""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.tir import PrimExpr
from kiln.topi.registry import ComputeError, const_value, out_dims, register_compute, tensor_type

F64 = "float64"


def _f(v: float) -> PrimExpr:
    return tir.const(float(v), F64)


@register_compute("signal.dft")
def _dft(attrs, inputs, out_type, consts):
    x, length, axis = inputs
    name = "signal.dft"
    ax = (int(const_value(name, consts, 2, "axis")) if axis is not None else -2) % x.ndim
    d = x.shape[ax]
    if not isinstance(d, tir.IntImm) or not isinstance(x.shape[-1], tir.IntImm):
        raise ComputeError(f"{name}: the signal axis and the complex dim must be static")
    n_in, cplx = d.value, x.shape[-1].value == 2
    irfft = bool(attrs.inverse and attrs.onesided)
    if attrs.inverse and not irfft:
        # exact sums miss the float32 FFT round-off ONNX's expected outputs carry near zero
        # (test_dft_inverse: 1.9e-7 against atol 1e-7), so the complex inverse stays on the host
        raise ComputeError(f"{name}: the complex inverse DFT runs on the host")
    n = int(const_value(name, consts, 1, "dft_length")) if length is not None else (
        2 * (n_in - 1) if irfft else n_in)
    taps = min(n_in, n // 2 + 1) if irfft else min(n_in, n)
    out = tensor_type(out_type).dtype
    two_pi_n = _f(2 * math.pi / n)

    def part(i, t, c):
        idx = list(i)
        idx[ax], idx[-1] = t, tir.const(c)
        return tir.cast(F64, x(*idx))

    def f(*i):
        kout, c = i[ax], i[-1]
        r = te.reduce_axis(taps, "t")
        t = r.var
        theta = tir.cast(F64, (kout * t) % tir.const(n)) * two_pi_n
        cs, sn = te.cos(theta), te.sin(theta)
        xr = part(i, t, 0)
        xi = part(i, t, 1) if cplx else _f(0)
        if irfft:  # real output: Hermitian extension of the onesided spectrum
            edge = tir.eq(t, tir.const(0))
            if n % 2 == 0:
                edge = tir.Or(edge, tir.eq(t, tir.const(n // 2)))
            w_re = te.select(edge, _f(1), _f(2))
            w_im = te.select(edge, _f(0), _f(2))
            return te.sum((w_re * xr * cs - w_im * xi * sn) / _f(n), r)
        sign = _f(1) if attrs.inverse else _f(-1)
        re = xr * cs - sign * xi * sn
        im = xi * cs + sign * xr * sn
        v = te.select(tir.eq(c, tir.const(0)), re, im)
        return te.sum(v / _f(n) if attrs.inverse else v, r)

    y = te.compute(out_dims(out_type, inputs), f, name="dft_sum")
    return te.compute(y.shape, lambda *i: tir.cast(out, y(*i)), name="dft")


@register_compute("signal.stft")
def _stft(attrs, inputs, out_type, consts):
    """Windowed direct DFTs of frames taken every frame_step samples; frame_step and frame_length (when
    given) must be constants, the signal and window lengths static: together they fix the output shape."""
    x, _, window, length = inputs
    name = "signal.stft"
    step = int(const_value(name, consts, 1, "frame_step"))
    sig = x.shape[1]
    if not isinstance(sig, tir.IntImm) or not isinstance(x.shape[-1], tir.IntImm):
        raise ComputeError(f"{name}: the signal length and the complex dim must be static")
    if window is not None and not isinstance(window.shape[0], tir.IntImm):
        raise ComputeError(f"{name}: the window length must be static")
    n = int(const_value(name, consts, 3, "frame_length")) if length is not None else (
        window.shape[0].value if window is not None else sig.value)
    if step < 1 or not 1 <= n <= sig.value:
        raise ComputeError(f"{name}: frame_step {step} / frame_length {n} do not fit a signal of {sig.value}")
    frames, bins = (sig.value - n) // step + 1, n // 2 + 1 if attrs.onesided else n
    cplx = x.shape[-1].value == 2
    two_pi_n = _f(2 * math.pi / n)

    def f(b, fr, k, c):
        r = te.reduce_axis(n, "t")
        t = r.var
        pos = fr * tir.const(step) + t
        w = tir.cast(F64, window(t)) if window is not None else _f(1)
        xr = tir.cast(F64, x(b, pos, tir.const(0))) * w
        xi = tir.cast(F64, x(b, pos, tir.const(1))) * w if cplx else _f(0)
        theta = tir.cast(F64, (k * t) % tir.const(n)) * two_pi_n
        cs, sn = te.cos(theta), te.sin(theta)
        return te.sum(te.select(tir.eq(c, tir.const(0)), xr * cs + xi * sn, xi * cs - xr * sn), r)

    y = te.compute((x.shape[0], tir.const(frames), tir.const(bins), tir.const(2)), f, name="stft_sum")
    return te.compute(y.shape, lambda *i: tir.cast(x.dtype, y(*i)), name="stft")
