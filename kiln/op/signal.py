"""Signal processing: discrete and short-time Fourier transforms, window functions and the
mel filter bank.

Complex tensors follow ONNX: a trailing dim of 2 holds (real, imaginary); a trailing dim of 1
marks a real signal. Transforms run in the input's precision (complex64 up to float32, complex128 for float64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import check_dtype, norm_axis, tensor

INDEX_TYPES = ("int32", "int64")


def scalar_input(t: TensorType | None, value: np.ndarray | None, what: str) -> int | None:
    """The int value of a scalar (or 1-element) index input when constant, else None."""
    if t is None:
        return None
    t = tensor(t, what)
    check_dtype(t, INDEX_TYPES, what)
    if t.shape is not None and len(t.shape) > 1:
        raise TypeInferenceError(f"{what} must be a scalar, got shape {t.shape}")
    if value is None:
        return None
    if value.size != 1:
        raise TypeInferenceError(f"{what} must hold one value, got {value.size}")
    return int(value.reshape(-1)[0])


def _check_signal(x: TensorType, what: str) -> None:
    check_dtype(x, dt.FLOATS, what)
    if x.shape is None:
        return
    if len(x.shape) < 2 or (isinstance(x.shape[-1], int) and x.shape[-1] not in (1, 2)):
        raise TypeInferenceError(f"{what} must end in a dim of 1 (real) or 2 (complex), got {x.shape}")


def to_complex(x: np.ndarray) -> np.ndarray:
    """ONNX's [..., 1|2] real layout as a complex array (of x's precision) without the last dim."""
    ct = np.complex128 if x.dtype == np.float64 else np.complex64
    c = x[..., 0].astype(ct)
    return c + 1j * x[..., 1].astype(ct) if x.shape[-1] == 2 else c


def from_complex(c: np.ndarray, like: np.dtype) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(like)


# ---------------------------------------------------------------------------------------------
# DFT


@dataclass(frozen=True)
class DFTAttrs:
    inverse: int = 0
    onesided: int = 0


def _dft_rel(attrs: DFTAttrs, types, values) -> TensorType:
    x = tensor(types[0], "input")
    _check_signal(x, "input")
    has_n = len(types) > 1 and types[1] is not None
    n = scalar_input(types[1], values[1], "dft_length") if has_n else None
    axis_t = types[2] if len(types) > 2 else None
    axis = scalar_input(axis_t, values[2] if len(values) > 2 else None, "axis")
    irfft = bool(attrs.inverse and attrs.onesided)
    if x.shape is None:
        return TensorType(None, x.dtype)
    last = 1 if irfft else 2
    if axis_t is not None and axis is None:
        return TensorType((ANY,) * (len(x.shape) - 1) + (last,), x.dtype)
    r = len(x.shape)
    ax = norm_axis(-2 if axis is None else axis, r)
    if ax == r - 1:
        raise TypeInferenceError(f"axis {axis} is the (real, imaginary) dim, not a signal axis")
    if n is not None and n < 1:
        raise TypeInferenceError(f"dft_length must be >= 1, got {n}")
    shape = list(x.shape)
    shape[ax] = ANY if has_n and n is None else _dft_out_dim(shape[ax], n, attrs, irfft)
    shape[-1] = last
    return TensorType(tuple(shape), x.dtype)


def _dft_out_dim(d: Dim, n: int | None, attrs: DFTAttrs, irfft: bool) -> Dim:
    if n is None:
        if not isinstance(d, int):
            return ANY if attrs.onesided else d
        n = 2 * (d - 1) if irfft else d
    return n // 2 + 1 if attrs.onesided and not attrs.inverse else n


def _dft_ref(attrs: DFTAttrs, x, dft_length=None, axis=None):
    ax = int(np.asarray(axis).reshape(-1)[0]) if axis is not None else -2
    ax = ax % x.ndim
    c = to_complex(x)
    irfft = attrs.inverse and attrs.onesided
    n = int(np.asarray(dft_length).reshape(-1)[0]) if dft_length is not None else (
        2 * (x.shape[ax] - 1) if irfft else x.shape[ax])
    if irfft:
        return np.fft.irfft(c, n=n, axis=ax)[..., None].astype(x.dtype)
    y = np.fft.ifft(c, n=n, axis=ax) if attrs.inverse else np.fft.fft(c, n=n, axis=ax)
    if attrs.onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=ax)
    return from_complex(y, x.dtype)


dft = define_op("signal.dft", pattern=OPAQUE, inputs=(1, 3), attrs=DFTAttrs, infer=_dft_rel, ref=_dft_ref,
                doc="(Inverse) DFT along `axis` (default -2) of a real [...,1] or complex [...,2] "
                    "signal; onesided gives RFFT / IRFFT.")


# ---------------------------------------------------------------------------------------------
# STFT


@dataclass(frozen=True)
class STFTAttrs:
    onesided: int = 1


def _stft_rel(attrs: STFTAttrs, types, values) -> TensorType:
    x = tensor(types[0], "signal")
    _check_signal(x, "signal")
    if x.shape is not None and len(x.shape) != 3:
        raise TypeInferenceError(f"signal must be [batch, length, 1|2], got {x.shape}")
    step = scalar_input(types[1], values[1], "frame_step")
    if step is not None and step < 1:
        raise TypeInferenceError(f"frame_step must be >= 1, got {step}")
    window = tensor(types[2], "window") if len(types) > 2 and types[2] is not None else None
    has_length = len(types) > 3 and types[3] is not None
    length = scalar_input(types[3], values[3], "frame_length") if has_length else None
    if window is not None:
        if window.dtype != x.dtype or (window.shape is not None and len(window.shape) != 1):
            raise TypeInferenceError(f"window must be 1-D {x.dtype}, got {window}")
        wlen = window.shape[0] if window.shape is not None else ANY
        if not has_length:
            length = wlen if isinstance(wlen, int) else None
        elif isinstance(wlen, int) and length is not None and wlen != length:
            raise TypeInferenceError(f"window length {wlen} differs from frame_length {length}")
    if x.shape is None:
        return TensorType((ANY, ANY, ANY, 2), x.dtype)
    sig_len = x.shape[1]
    if window is None and not has_length and isinstance(sig_len, int):
        length = sig_len
    frames: Dim = ANY
    if isinstance(sig_len, int) and length is not None and step is not None:
        if length > sig_len:
            raise TypeInferenceError(f"frame_length {length} exceeds the signal length {sig_len}")
        frames = (sig_len - length) // step + 1
    bins = ANY if length is None else (length // 2 + 1 if attrs.onesided else length)
    return TensorType((x.shape[0], frames, bins, 2), x.dtype)


def _stft_ref(attrs: STFTAttrs, x, frame_step, window=None, frame_length=None):
    step = int(np.asarray(frame_step).reshape(-1)[0])
    length = (int(np.asarray(frame_length).reshape(-1)[0]) if frame_length is not None
              else window.shape[0] if window is not None else x.shape[1])
    frames = (x.shape[1] - length) // step + 1
    c = to_complex(x)
    idx = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    segments = c[:, idx]  # [batch, frames, length]
    if window is not None:
        segments = segments * window.astype(segments.real.dtype)
    y = np.fft.fft(segments, axis=-1)
    if attrs.onesided:
        y = y[..., : length // 2 + 1]
    return from_complex(y, x.dtype)


stft = define_op("signal.stft", pattern=OPAQUE, inputs=(2, 4), attrs=STFTAttrs, infer=_stft_rel,
                 ref=_stft_ref,
                 doc="Short-time Fourier transform: windowed DFTs of frames taken every frame_step "
                     "samples; output [batch, frames, bins, 2].")


# ---------------------------------------------------------------------------------------------
# windows


@dataclass(frozen=True)
class WindowAttrs:
    output_datatype: str = "float32"
    periodic: int = 1


def _window_rel(attrs: WindowAttrs, types, values) -> TensorType:
    check_dtype(TensorType((), attrs.output_datatype), dt.NUMERIC, "output_datatype")
    size = scalar_input(types[0], values[0], "size")
    if size is not None and size < 0:
        raise TypeInferenceError(f"size must be >= 0, got {size}")
    return TensorType((ANY if size is None else size,), attrs.output_datatype)


def _cosine_window(coeffs: tuple[float, ...]):
    """Reference of a generalized cosine window sum_k (-1)^k a_k cos(2 pi k n / N), where N is
    the size (periodic) or size - 1 (symmetric)."""

    def ref(attrs: WindowAttrs, size):
        n = int(np.asarray(size).reshape(-1)[0])
        period = n if attrs.periodic else n - 1
        if not period:  # NOTE: a 1-point symmetric window is [1] (as numpy and torch define it)
            return np.ones(n, dt.to_numpy(attrs.output_datatype))
        phase = 2 * np.pi * np.arange(n) / period
        w = sum((-1) ** k * a * np.cos(k * phase) for k, a in enumerate(coeffs))
        return np.asarray(w, np.float64).reshape(n).astype(dt.to_numpy(attrs.output_datatype))

    return ref


def _window_op(name: str, coeffs: tuple[float, ...], what: str):
    return define_op(f"signal.{name}", pattern=OPAQUE, attrs=WindowAttrs, infer=_window_rel,
                     ref=_cosine_window(coeffs), doc=f"{what} window of `size` points.")


hann_window = _window_op("hann_window", (0.5, 0.5), "Hann")
hamming_window = _window_op("hamming_window", (25 / 46, 21 / 46), "Hamming")
blackman_window = _window_op("blackman_window", (0.42, 0.5, 0.08), "Blackman")


# ---------------------------------------------------------------------------------------------
# MelWeightMatrix


@dataclass(frozen=True)
class MelWeightMatrixAttrs:
    output_datatype: str = "float32"


def _mel_rel(attrs: MelWeightMatrixAttrs, types, values) -> TensorType:
    check_dtype(TensorType((), attrs.output_datatype), dt.NUMERIC, "output_datatype")
    bins = scalar_input(types[0], values[0], "num_mel_bins")
    n = scalar_input(types[1], values[1], "dft_length")
    scalar_input(types[2], values[2], "sample_rate")
    for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")):
        check_dtype(tensor(types[i], what), dt.FLOATS, what)
    return TensorType((ANY if n is None else n // 2 + 1, ANY if bins is None else bins),
                      attrs.output_datatype)


def hz_to_mel(f):
    return 2595.0 * np.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def _mel_ref(attrs: MelWeightMatrixAttrs, num_mel_bins, dft_length, sample_rate, lower, upper):
    """Triangles with peak 1 between num_mel_bins + 2 points evenly spaced on the mel scale
    (step (mel(upper) - mel(lower)) / (num_mel_bins + 2)), snapped to DFT bins."""
    bins, n, rate = (int(np.asarray(v).reshape(-1)[0]) for v in (num_mel_bins, dft_length, sample_rate))
    lo, hi = hz_to_mel(float(lower)), hz_to_mel(float(upper))
    mel = lo + np.arange(bins + 2) * (hi - lo) / (bins + 2)
    edges = np.floor((n + 1) * mel_to_hz(mel) / rate).astype(np.int64)
    left, center, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(n // 2 + 1)[:, None]
    rise = np.where(center > left, (j - left) / np.maximum(center - left, 1), 1.0)
    fall = (right - j) / np.maximum(right - center, 1)
    out = np.where((j >= left) & (j <= center), rise, np.where((j > center) & (j < right), fall, 0.0))
    return out.astype(dt.to_numpy(attrs.output_datatype))


mel_weight_matrix = define_op(
    "signal.mel_weight_matrix", pattern=OPAQUE, inputs=5, attrs=MelWeightMatrixAttrs, infer=_mel_rel,
    ref=_mel_ref, doc="[dft_length // 2 + 1, num_mel_bins] matrix of triangular mel filters.")
