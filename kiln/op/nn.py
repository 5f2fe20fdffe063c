"""Sliding-window nn operators: convolutions, pooling, unpooling, dropout.

One `Window` resolves the ONNX geometry attributes (kernel, strides, dilations, pads, auto_pad,
ceil_mode) per spatial axis; type relations (symbolic dims allowed) and numpy references both
use it, so shape rules live in one place. References are vectorized: windows are strided views
of the padded input, and convolutions are one batched matmul over an im2col buffer.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.registry import COMM_REDUCE, OPAQUE, OUT_EWISE_FUSABLE, define_op
from kiln.op.typerel import check_dtype, same_dtype, tensor

SAME = ("SAME_UPPER", "SAME_LOWER")
AUTO_PADS = ("NOTSET", "VALID") + SAME
CONV_DTYPES = ("float16", "bfloat16", "float32", "float64")
MAXPOOL_DTYPES = CONV_DTYPES + ("int8", "uint8")


# ---------------------------------------------------------------------------------------------
# window geometry


def _per_axis(v: tuple[int, ...] | None, n: int, default: int, what: str) -> tuple[int, ...]:
    if v is None:
        return (default,) * n
    if len(v) != n:
        raise TypeInferenceError(f"{what} has {len(v)} values; expected {n}")
    return tuple(int(i) for i in v)


@dataclass(frozen=True)
class Window:
    """Geometry of a sliding window over the spatial axes (all per-axis tuples, pads begin+end)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    auto_pad: str = "NOTSET"
    ceil_mode: bool = False

    @classmethod
    def of(cls, attrs, kernel: tuple[int, ...], ceil_mode: int = 0) -> Window:
        """Validate the attributes of a conv/pool call against its `kernel` (one size per axis)."""
        n = len(kernel)
        auto_pad = getattr(attrs, "auto_pad", "NOTSET")
        if auto_pad not in AUTO_PADS:
            raise TypeInferenceError(f"auto_pad {auto_pad!r} is not one of {', '.join(AUTO_PADS)}")
        w = cls(tuple(int(k) for k in kernel), _per_axis(attrs.strides, n, 1, "strides"),
                _per_axis(getattr(attrs, "dilations", None), n, 1, "dilations"),
                _per_axis(attrs.pads, 2 * n, 0, "pads"), auto_pad,
                bool(ceil_mode) and auto_pad == "NOTSET")
        if min(w.kernel + w.strides + w.dilations, default=1) < 1 or min(w.pads, default=0) < 0:
            raise TypeInferenceError(f"kernel {w.kernel}, strides {w.strides} and dilations "
                                     f"{w.dilations} must be positive and pads {w.pads} non-negative")
        return w

    @property
    def rank(self) -> int:
        return len(self.kernel)

    def span(self, i: int) -> int:
        return self.dilations[i] * (self.kernel[i] - 1) + 1

    def out_dim(self, i: int, n: Dim) -> Dim:
        """Output length along axis i for input length n (symbolic n stays symbolic when equal)."""
        s, span = self.strides[i], self.span(i)
        if self.auto_pad in SAME:
            return n if s == 1 else (-(-n // s) if isinstance(n, int) else ANY)
        total = 0 if self.auto_pad == "VALID" else self.pads[i] + self.pads[self.rank + i]
        if not isinstance(n, int):
            return n if s == 1 and total == span - 1 else ANY
        room = n + total - span
        if room < 0:
            raise TypeInferenceError(f"window of span {span} does not fit spatial axis {i} "
                                     f"of size {n} padded by {total}")
        out = (-(-room // s) if self.ceil_mode else room // s) + 1
        if self.ceil_mode and (out - 1) * s >= n + self.pads[i]:
            out -= 1  # a window may not start in the end padding
        return out

    def out_shape(self, spatial: tuple[Dim, ...]) -> tuple[Dim, ...]:
        return tuple(self.out_dim(i, n) for i, n in enumerate(spatial))

    def pads_for(self, i: int, n: int) -> tuple[int, int]:
        """(begin, end) padding of axis i for input length n, auto_pad resolved."""
        if self.auto_pad == "VALID":
            return 0, 0
        if self.auto_pad in SAME:
            total = max(0, (self.out_dim(i, n) - 1) * self.strides[i] + self.span(i) - n)
            small, big = total // 2, total - total // 2
            return (small, big) if self.auto_pad == "SAME_UPPER" else (big, small)
        return self.pads[i], self.pads[self.rank + i]

    def layout(self, spatial: tuple[int, ...]) -> tuple[tuple[int, ...], list[tuple[int, int]], list[int]]:
        """Output shape, resolved pads, and the extra end padding windows of ceil_mode reach into."""
        out = self.out_shape(spatial)
        pads = [self.pads_for(i, n) for i, n in enumerate(spatial)]
        extra = [max(0, (o - 1) * self.strides[i] + self.span(i) - (n + p[0] + p[1]))
                 for i, (o, n, p) in enumerate(zip(out, spatial, pads))]
        return out, pads, extra


def _pad_spatial(x: np.ndarray, widths: list[tuple[int, int]], fill) -> np.ndarray:
    if not any(a or b for a, b in widths):
        return x
    return np.pad(x, [(0, 0)] * (x.ndim - len(widths)) + widths, constant_values=fill)


def _windows(xp: np.ndarray, out: tuple[int, ...], w: Window) -> np.ndarray:
    """Strided view (..., *out, *kernel) of the windows of the padded input xp (no copy)."""
    axes = tuple(range(xp.ndim - w.rank, xp.ndim))
    view = sliding_window_view(xp, tuple(w.span(i) for i in range(w.rank)), axis=axes)
    pos = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, w.strides))
    ker = tuple(slice(None, None, d) for d in w.dilations)
    return view[(Ellipsis,) + pos + ker]


def _padded_windows(x: np.ndarray, w: Window, fill) -> tuple[np.ndarray, tuple[int, ...]]:
    out, pads, extra = w.layout(x.shape[2:])
    xp = _pad_spatial(x, [(b, e + x_) for (b, e), x_ in zip(pads, extra)], fill)
    return _windows(xp, out, w), out


def _acc_dtype(d: np.dtype) -> np.dtype:
    """Accumulation dtype: float64 for float64 and integers (exact), float32 otherwise."""
    return np.dtype(np.float64) if d == np.float64 or d.kind in "iu" else np.dtype(np.float32)


def _spatial(t: TensorType, what: str) -> tuple[Dim, ...] | None:
    if t.shape is None:
        return None
    if len(t.shape) < 3:
        raise TypeInferenceError(f"{what} must have rank >= 3 (N, C, spatial...), got {t}")
    return t.shape[2:]


def _known(*dims: Dim) -> bool:
    return all(isinstance(d, int) for d in dims)


# ---------------------------------------------------------------------------------------------
# convolution


@dataclass(frozen=True)
class ConvAttrs:
    auto_pad: str = "NOTSET"
    dilations: tuple[int, ...] | None = None
    group: int = 1
    kernel_shape: tuple[int, ...] | None = None
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def _conv_kernel(attrs, w: TensorType, nsp: int) -> tuple[Dim, ...]:
    """Kernel sizes from kernel_shape, checked against the weight's spatial dims."""
    wk = w.shape[2:] if w.shape is not None else (ANY,) * nsp
    if attrs.kernel_shape is None:
        return wk
    k = _per_axis(attrs.kernel_shape, nsp, 1, "kernel_shape")
    if any(isinstance(a, int) and a != b for a, b in zip(wk, k)):
        raise TypeInferenceError(f"kernel_shape {k} does not match weight shape {w.shape}")
    return k


def _conv_shapes(attrs, x: TensorType, w: TensorType, b: TensorType | None,
                 out_channels: Dim, in_per_group: Dim) -> tuple[int | None, Dim, Dim]:
    """Checks shared by conv-like relations; returns (spatial rank or None, batch, out channels)."""
    if attrs.group < 1:
        raise TypeInferenceError(f"group must be >= 1, got {attrs.group}")
    xs, ws = _spatial(x, "X"), _spatial(w, "W")
    if xs is not None and ws is not None and len(xs) != len(ws):
        raise TypeInferenceError(f"X {x} and W {w} have different ranks")
    nsp = len(xs) if xs is not None else len(ws) if ws is not None else None
    c = x.shape[1] if x.shape is not None else ANY
    if _known(c, in_per_group) and c != in_per_group * attrs.group:
        raise TypeInferenceError(f"X has {c} channels but W expects {in_per_group} x group "
                                 f"{attrs.group}")
    if b is not None and b.shape is not None and (
            len(b.shape) != 1 or (_known(b.shape[0], out_channels) and b.shape[0] != out_channels)):
        raise TypeInferenceError(f"bias must have shape ({out_channels},), got {b}")
    return nsp, (x.shape[0] if x.shape is not None else ANY), out_channels


def _conv_out(attrs, x: TensorType, w: TensorType, b: TensorType | None, dtype: str) -> TensorType:
    m = w.shape[0] if w.shape is not None else ANY
    if _known(m) and m % attrs.group:
        raise TypeInferenceError(f"W has {m} output channels, not divisible by group {attrs.group}")
    cg = w.shape[1] if w.shape is not None else ANY
    nsp, n, m = _conv_shapes(attrs, x, w, b, m, cg)
    if nsp is None:
        return TensorType(None, dtype)
    kernel = _conv_kernel(attrs, w, nsp)
    spatial = x.shape[2:] if x.shape is not None else (ANY,) * nsp
    if not _known(*kernel):
        Window.of(attrs, (1,) * nsp)  # still validate the other attributes
        return TensorType((n, m) + (ANY,) * nsp, dtype)
    return TensorType((n, m) + Window.of(attrs, kernel).out_shape(spatial), dtype)


def _conv_rel(attrs, types, values):
    x, w = tensor(types[0], "X"), tensor(types[1], "W")
    check_dtype(x, CONV_DTYPES, "X")
    b = tensor(types[2], "B") if len(types) > 2 and types[2] is not None else None
    same_dtype([x, w] + ([b] if b else []), "X, W and B")
    return _conv_out(attrs, x, w, b, x.dtype)


def _grouped_matmul(cols: np.ndarray, w: np.ndarray, group: int) -> np.ndarray:
    """(N, C, K, P) columns times (M, C/group, *k) weights -> (N, M, P), one GEMM per group."""
    n, c, k, p = cols.shape
    wm = w.reshape(group, w.shape[0] // group, -1)
    return np.matmul(wm, cols.reshape(n, group, (c // group) * k, p)).reshape(n, w.shape[0], p)


def conv_nd(x: np.ndarray, w: np.ndarray, win: Window, group: int) -> np.ndarray:
    """Grouped N-d cross-correlation of x (N, C, *s) with w (M, C/group, *k), im2col + GEMM."""
    view, out = _padded_windows(x, win, 0)
    nsp = win.rank
    cols = np.moveaxis(view, tuple(range(2 + nsp, 2 + 2 * nsp)), tuple(range(2, 2 + nsp)))
    cols = cols.reshape(x.shape[0], x.shape[1], math.prod(win.kernel), math.prod(out))
    return _grouped_matmul(cols, w, group).reshape(x.shape[0], w.shape[0], *out)


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is not None:
        y += b.astype(y.dtype).reshape((-1,) + (1,) * (y.ndim - 2))
    return y


def _conv_ref(attrs, x, w, b=None):
    acc = _acc_dtype(x.dtype)
    win = Window.of(attrs, w.shape[2:])
    y = conv_nd(x.astype(acc, copy=False), w.astype(acc, copy=False), win, attrs.group)
    return _add_bias(y, b).astype(x.dtype, copy=False)


conv = define_op("nn.conv", pattern=OUT_EWISE_FUSABLE, inputs=(2, 3), attrs=ConvAttrs,
                 infer=_conv_rel, ref=_conv_ref,
                 doc="N-d grouped convolution (cross-correlation) of X (N, C, ...) with W (M, C/group, ...).")


def _conv_integer_rel(attrs, types, values):
    x, w = tensor(types[0], "x"), tensor(types[1], "w")
    check_dtype(x, ("int8", "uint8"), "x")
    check_dtype(w, ("int8", "uint8"), "w")
    for i, (t, of) in enumerate(zip(types[2:], (x, w))):
        if t is not None and tensor(t).dtype != of.dtype:
            raise TypeInferenceError(f"zero point {i} has dtype {t.dtype}; expected {of.dtype}")
    return _conv_out(attrs, x, w, None, "int32")


def _conv_integer_ref(attrs, x, w, x_zero_point=None, w_zero_point=None):
    xf = x.astype(np.float64) - (0 if x_zero_point is None else float(np.asarray(x_zero_point).reshape(-1)[0]))
    wf = w.astype(np.float64)
    if w_zero_point is not None:
        wz = np.asarray(w_zero_point, np.float64)
        wf -= wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.size > 1 else wz.reshape(())
    y = conv_nd(xf, wf, Window.of(attrs, w.shape[2:]), attrs.group)
    return y.astype(np.int32)  # exact: int8 products summed in float64


conv_integer = define_op("nn.conv_integer", pattern=OUT_EWISE_FUSABLE, inputs=(2, 4), attrs=ConvAttrs,
                         infer=_conv_integer_rel, ref=_conv_integer_ref,
                         doc="Integer convolution of (x - x_zero_point) and (w - w_zero_point), int32 out.")


# ---------------------------------------------------------------------------------------------
# transposed convolution


@dataclass(frozen=True)
class ConvTransposeAttrs:
    auto_pad: str = "NOTSET"
    dilations: tuple[int, ...] | None = None
    group: int = 1
    kernel_shape: tuple[int, ...] | None = None
    output_padding: tuple[int, ...] | None = None
    output_shape: tuple[int, ...] | None = None
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def convt_axis(attrs, win: Window, i: int, n: Dim) -> tuple[Dim, int | None]:
    """(output length, begin pad) of axis i for input length n, as the ONNX formulas say."""
    s, span = win.strides[i], win.span(i)
    op = _per_axis(attrs.output_padding, win.rank, 0, "output_padding")[i]
    want = None if attrs.output_shape is None else _per_axis(attrs.output_shape, win.rank, 0, "output_shape")[i]
    if want is None and win.auto_pad in SAME:
        want = n * s if isinstance(n, int) else (n if s == 1 else ANY)
    if want is not None:
        if not _known(n, want):
            return want, None
        total = s * (n - 1) + op + span - want
        return want, total // 2 if win.auto_pad == "SAME_UPPER" else total - total // 2
    pb, pe = win.pads_for(i, 0)
    if not isinstance(n, int):
        return (n if s == 1 and op + span - 1 == pb + pe else ANY), pb
    return s * (n - 1) + op + span - pb - pe, pb


def _conv_transpose_rel(attrs, types, values):
    x, w = tensor(types[0], "X"), tensor(types[1], "W")
    check_dtype(x, CONV_DTYPES, "X")
    b = tensor(types[2], "B") if len(types) > 2 and types[2] is not None else None
    same_dtype([x, w] + ([b] if b else []), "X, W and B")
    c = w.shape[0] if w.shape is not None else ANY
    if _known(c) and c % attrs.group:
        raise TypeInferenceError(f"W has {c} input channels, not divisible by group {attrs.group}")
    m = w.shape[1] * attrs.group if w.shape is not None and _known(w.shape[1]) else ANY
    nsp, n, m = _conv_shapes(attrs, x, w, b, m, c // attrs.group if _known(c) else ANY)
    if nsp is None:
        return TensorType(None, x.dtype)
    kernel = _conv_kernel(attrs, w, nsp)
    spatial = x.shape[2:] if x.shape is not None else (ANY,) * nsp
    if not _known(*kernel):
        return TensorType((n, m) + (ANY,) * nsp, x.dtype)
    win = Window.of(attrs, kernel)
    out = tuple(convt_axis(attrs, win, i, d)[0] for i, d in enumerate(spatial))
    if any(_known(o) and o < 1 for o in out):
        raise TypeInferenceError(f"output spatial shape {out} is empty")
    return TensorType((n, m) + out, x.dtype)


def _crop(y: np.ndarray, begins: list[int], sizes: list[int]) -> np.ndarray:
    """y[..., b:b+size] per spatial axis, zero-filled where the range leaves y."""
    nsp = len(sizes)
    widths = [(max(0, -b), max(0, b + s - n)) for b, s, n in zip(begins, sizes, y.shape[-nsp:])]
    y = _pad_spatial(y, widths, 0)
    return y[(Ellipsis,) + tuple(slice(b + lo, b + lo + s) for b, s, (lo, _) in zip(begins, sizes, widths))]


def _conv_transpose_ref(attrs, x, w, b=None):
    acc = _acc_dtype(x.dtype)
    xa, wa = x.astype(acc, copy=False), w.astype(acc, copy=False)
    win = Window.of(attrs, w.shape[2:])
    n, c, ins, g = x.shape[0], x.shape[1], x.shape[2:], attrs.group
    m = w.shape[1] * g
    wm = wa.reshape(g, c // g, -1).transpose(0, 2, 1)  # (G, M/G * K, C/G)
    cols = np.matmul(wm, xa.reshape(n, g, c // g, -1)).reshape(n, m, *win.kernel, *ins)
    full = [(d - 1) * s + win.span(i) for i, (d, s) in enumerate(zip(ins, win.strides))]
    y = np.zeros((n, m, *full), acc)
    for kk in itertools.product(*(range(k) for k in win.kernel)):
        dst = tuple(slice(k * d, k * d + (i - 1) * s + 1, s)
                    for k, d, i, s in zip(kk, win.dilations, ins, win.strides))
        y[(Ellipsis,) + dst] += cols[(slice(None), slice(None)) + kk]
    outs, begins = zip(*(convt_axis(attrs, win, i, d) for i, d in enumerate(ins)))
    return _add_bias(_crop(y, list(begins), list(outs)), b).astype(x.dtype, copy=False)


conv_transpose = define_op("nn.conv_transpose", pattern=OUT_EWISE_FUSABLE, inputs=(2, 3),
                           attrs=ConvTransposeAttrs, infer=_conv_transpose_rel, ref=_conv_transpose_ref,
                           doc="Transposed (fractionally strided) convolution; W is (C, M/group, ...).")


# ---------------------------------------------------------------------------------------------
# deformable convolution


@dataclass(frozen=True)
class DeformConvAttrs:
    dilations: tuple[int, ...] | None = None
    group: int = 1
    kernel_shape: tuple[int, ...] | None = None
    offset_group: int = 1
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def _deform_conv_rel(attrs, types, values):
    x, w, off = tensor(types[0], "X"), tensor(types[1], "W"), tensor(types[2], "offset")
    check_dtype(x, CONV_DTYPES, "X")
    b = tensor(types[3], "B") if len(types) > 3 and types[3] is not None else None
    mask = tensor(types[4], "mask") if len(types) > 4 and types[4] is not None else None
    same_dtype([x, w, off] + [t for t in (b, mask) if t is not None], "inputs")
    if attrs.offset_group < 1:
        raise TypeInferenceError(f"offset_group must be >= 1, got {attrs.offset_group}")
    c = x.shape[1] if x.shape is not None else ANY
    if _known(c) and c % attrs.offset_group:
        raise TypeInferenceError(f"X has {c} channels, not divisible by offset_group {attrs.offset_group}")
    return _conv_out(attrs, x, w, b, x.dtype)


def _bilinear_gather(x: np.ndarray, pos: list[np.ndarray]) -> np.ndarray:
    """Sample x (N, G, Cg, *s) at fractional positions pos[a] (N, G, Q): (N, G, Cg, Q), zero outside."""
    spatial = x.shape[3:]
    flat_x = x.reshape(x.shape[:3] + (-1,))
    out = np.zeros(x.shape[:3] + pos[0].shape[2:], x.dtype)
    base = [np.floor(p) for p in pos]
    for corner in itertools.product((0, 1), repeat=len(spatial)):
        weight, valid, flat = 1.0, True, 0
        for p, lo, c, n in zip(pos, base, corner, spatial):
            idx = lo + c
            weight = weight * (1 - np.abs(p - idx))
            valid = valid & (idx >= 0) & (idx < n)
            flat = flat * n + np.clip(idx, 0, n - 1).astype(np.int64)
        vals = np.take_along_axis(flat_x, flat[:, :, None, :], axis=-1)
        out += vals * (weight * valid)[:, :, None, :]
    return out


def _deform_conv_ref(attrs, x, w, offset, b=None, mask=None):
    acc = _acc_dtype(x.dtype)
    win = Window.of(attrs, w.shape[2:])
    n, c, og = x.shape[0], x.shape[1], attrs.offset_group
    out = tuple(offset.shape[2:])
    nsp, k = win.rank, math.prod(win.kernel)
    off = offset.astype(acc).reshape(n, og, k, nsp, -1)
    pos = []
    for a in range(nsp):
        kk = np.indices(win.kernel)[a].reshape(k, 1) * win.dilations[a]
        oo = np.indices(out)[a].reshape(1, -1) * win.strides[a] - win.pads[a]
        pos.append((kk + oo + off[:, :, :, a]).reshape(n, og, -1))
    cols = _bilinear_gather(x.astype(acc).reshape(n, og, c // og, *x.shape[2:]), pos)
    cols = cols.reshape(n, og, c // og, k, -1)
    if mask is not None:
        cols *= mask.astype(acc).reshape(n, og, 1, k, -1)
    y = _grouped_matmul(cols.reshape(n, c, k, -1), w.astype(acc), attrs.group)
    return _add_bias(y.reshape(n, w.shape[0], *out), b).astype(x.dtype, copy=False)


deform_conv = define_op("nn.deform_conv", pattern=OPAQUE, inputs=(3, 5), attrs=DeformConvAttrs,
                        infer=_deform_conv_rel, ref=_deform_conv_ref,
                        doc="Deformable convolution: kernel taps sampled at learned (bilinear) offsets.")


# ---------------------------------------------------------------------------------------------
# pooling


@dataclass(frozen=True)
class MaxPoolAttrs:
    kernel_shape: tuple[int, ...]
    auto_pad: str = "NOTSET"
    ceil_mode: int = 0
    dilations: tuple[int, ...] | None = None
    pads: tuple[int, ...] | None = None
    storage_order: int = 0
    strides: tuple[int, ...] | None = None


@dataclass(frozen=True)
class AveragePoolAttrs:
    kernel_shape: tuple[int, ...]
    auto_pad: str = "NOTSET"
    ceil_mode: int = 0
    count_include_pad: int = 0
    dilations: tuple[int, ...] | None = None
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LpPoolAttrs:
    kernel_shape: tuple[int, ...]
    auto_pad: str = "NOTSET"
    ceil_mode: int = 0
    dilations: tuple[int, ...] | None = None
    p: int = 2
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def _pool_type(attrs, x: TensorType) -> TensorType:
    nsp = len(attrs.kernel_shape)
    win = Window.of(attrs, attrs.kernel_shape, attrs.ceil_mode)
    if x.shape is None:
        return TensorType((ANY, ANY) + (ANY,) * nsp, x.dtype)
    if len(x.shape) != nsp + 2:
        raise TypeInferenceError(f"X {x} must have rank {nsp + 2} for kernel_shape {attrs.kernel_shape}")
    return TensorType(x.shape[:2] + win.out_shape(x.shape[2:]), x.dtype)


def _max_pool_rel(attrs, types, values):
    x = tensor(types[0], "X")
    check_dtype(x, MAXPOOL_DTYPES, "X")
    if attrs.storage_order not in (0, 1):
        raise TypeInferenceError(f"storage_order must be 0 or 1, got {attrs.storage_order}")
    y = _pool_type(attrs, x)
    return TupleType((y, TensorType(y.shape, "int64")))


def _max_pool_ref(attrs, x):
    win = Window.of(attrs, attrs.kernel_shape, attrs.ceil_mode)
    xc = x if x.dtype.kind in "fiu" else x.astype(np.float32)  # ml_dtypes floats: exact in float32
    fill = -np.inf if xc.dtype.kind == "f" else np.iinfo(xc.dtype).min
    view, out = _padded_windows(xc, win, fill)
    y, arg = _window_argmax(view, win.kernel)
    return y.astype(x.dtype, copy=False), _max_indices(attrs, win, x.shape, out, arg)


def _window_argmax(view: np.ndarray, kernel: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Max over the trailing kernel axes and the first tap reaching it (row-major tap number).
    One vectorized pass per tap: far faster than argmax over a tiny trailing axis."""
    taps = itertools.product(*(range(k) for k in kernel))
    best = view[(Ellipsis,) + next(taps)].copy()
    arg = np.zeros(best.shape, np.int64)
    for t, tap in enumerate(taps, start=1):
        v = view[(Ellipsis,) + tap]
        better = v > best
        np.copyto(best, v, where=better)
        np.copyto(arg, t, where=better)
    return best, arg


def _max_indices(attrs, win: Window, shape: tuple[int, ...], out: tuple[int, ...],
                 arg: np.ndarray) -> np.ndarray:
    """Flat input index of each window's argmax; spatial part column-major when storage_order=1."""
    spatial = shape[2:]
    taps = np.unravel_index(arg, win.kernel)
    order = range(win.rank) if attrs.storage_order == 0 else reversed(range(win.rank))
    flat = np.zeros(arg.shape, np.int64)
    for a in order:
        o = np.arange(out[a]).reshape((-1,) + (1,) * (win.rank - 1 - a))
        coord = o * win.strides[a] - win.pads_for(a, spatial[a])[0] + taps[a] * win.dilations[a]
        flat = flat * spatial[a] + np.clip(coord, 0, spatial[a] - 1)
    plane = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[:2] + (1,) * win.rank)
    return plane * math.prod(spatial) + flat


max_pool = define_op("nn.max_pool", pattern=OUT_EWISE_FUSABLE, attrs=MaxPoolAttrs, infer=_max_pool_rel,
                     ref=_max_pool_ref,
                     doc="Max over sliding windows; returns (Y, Indices) with flat int64 argmax indices.")


def _float_pool_rel(attrs, types, values):
    x = tensor(types[0], "X")
    check_dtype(x, CONV_DTYPES, "X")
    return _pool_type(attrs, x)


def _window_counts(spatial: tuple[int, ...], win: Window, include_pad: bool) -> np.ndarray:
    """Elements each window averages: in-image ones, plus explicit padding if include_pad."""
    out, pads, extra = win.layout(spatial)
    ones = _pad_spatial(np.ones(spatial), pads, float(include_pad))
    ones = _pad_spatial(ones, [(0, e) for e in extra], 0.0)
    return _windows(ones, out, win).sum(axis=tuple(range(-win.rank, 0)))


def _average_pool_ref(attrs, x):
    win = Window.of(attrs, attrs.kernel_shape, attrs.ceil_mode)
    view, _ = _padded_windows(x.astype(_acc_dtype(x.dtype), copy=False), win, 0)
    total = view.sum(axis=tuple(range(-win.rank, 0)))
    return (total / _window_counts(x.shape[2:], win, bool(attrs.count_include_pad))).astype(x.dtype)


average_pool = define_op("nn.average_pool", pattern=OUT_EWISE_FUSABLE, attrs=AveragePoolAttrs,
                         infer=_float_pool_rel, ref=_average_pool_ref,
                         doc="Mean over sliding windows (padding counted only if count_include_pad).")


def _lp_pool_ref(attrs, x):
    win = Window.of(attrs, attrs.kernel_shape, attrs.ceil_mode)
    powed = np.abs(x.astype(_acc_dtype(x.dtype))) ** attrs.p
    view, _ = _padded_windows(powed, win, 0)
    return (view.sum(axis=tuple(range(-win.rank, 0))) ** (1.0 / attrs.p)).astype(x.dtype)


lp_pool = define_op("nn.lp_pool", pattern=OUT_EWISE_FUSABLE, attrs=LpPoolAttrs, infer=_float_pool_rel,
                    ref=_lp_pool_ref, doc="(sum |x|^p)^(1/p) over sliding windows.")


@dataclass(frozen=True)
class GlobalLpPoolAttrs:
    p: int = 2


def _global_pool_rel(dtypes):
    def rel(attrs, types, values):
        x = tensor(types[0], "X")
        check_dtype(x, dtypes, "X")
        if x.shape is None:
            return x
        if len(x.shape) < 2:
            raise TypeInferenceError(f"X must have rank >= 2 (N, C, ...), got {x}")
        return TensorType(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)
    return rel


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


global_average_pool = define_op(
    "nn.global_average_pool", pattern=COMM_REDUCE, infer=_global_pool_rel(CONV_DTYPES),
    ref=lambda a, x: x.astype(_acc_dtype(x.dtype)).mean(axis=_spatial_axes(x), keepdims=True).astype(x.dtype),
    doc="Mean over all spatial axes (kept as size 1).")

global_max_pool = define_op(
    "nn.global_max_pool", pattern=COMM_REDUCE, infer=_global_pool_rel(MAXPOOL_DTYPES),
    ref=lambda a, x: x.max(axis=_spatial_axes(x), keepdims=True),
    doc="Max over all spatial axes (kept as size 1).")


def _global_lp_pool_ref(attrs, x):
    s = (np.abs(x.astype(_acc_dtype(x.dtype))) ** attrs.p).sum(axis=_spatial_axes(x), keepdims=True)
    return (s ** (1.0 / attrs.p)).astype(x.dtype)


global_lp_pool = define_op("nn.global_lp_pool", pattern=COMM_REDUCE, attrs=GlobalLpPoolAttrs,
                           infer=_global_pool_rel(CONV_DTYPES), ref=_global_lp_pool_ref,
                           doc="(sum |x|^p)^(1/p) over all spatial axes (kept as size 1).")


# ---------------------------------------------------------------------------------------------
# unpooling


@dataclass(frozen=True)
class MaxUnpoolAttrs:
    kernel_shape: tuple[int, ...]
    pads: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None


def unpool_dim(win: Window, i: int, n: Dim) -> Dim:
    grow = win.kernel[i] - win.pads[i] - win.pads[win.rank + i]
    if isinstance(n, int):
        return (n - 1) * win.strides[i] + grow
    return n if win.strides[i] == 1 and grow == 1 else ANY


def _max_unpool_rel(attrs, types, values):
    x, idx = tensor(types[0], "X"), tensor(types[1], "I")
    check_dtype(idx, ("int64",), "I")
    win = Window.of(attrs, attrs.kernel_shape)
    if x.shape is not None and len(x.shape) != win.rank + 2:
        raise TypeInferenceError(f"X {x} must have rank {win.rank + 2} for kernel_shape {attrs.kernel_shape}")
    if len(types) > 2 and types[2] is not None:
        check_dtype(tensor(types[2], "output_shape"), ("int64",), "output_shape")
        if values[2] is not None:
            return TensorType(tuple(int(d) for d in values[2]), x.dtype)
        return TensorType((ANY,) * (win.rank + 2), x.dtype)
    if x.shape is None:
        return TensorType((ANY,) * (win.rank + 2), x.dtype)
    return TensorType(x.shape[:2] + tuple(unpool_dim(win, i, d) for i, d in enumerate(x.shape[2:])), x.dtype)


def _max_unpool_ref(attrs, x, indices, output_shape=None):
    """Scatter X into the zero tensor MaxPool read it from (indices are flat in that shape);
    an explicit output_shape extends that tensor with zeros at the end of each axis."""
    win = Window.of(attrs, attrs.kernel_shape)
    natural = x.shape[:2] + tuple(unpool_dim(win, i, d) for i, d in enumerate(x.shape[2:]))
    y = np.zeros(math.prod(natural), x.dtype)
    y[indices.reshape(-1)] = x.reshape(-1)
    y = y.reshape(natural)
    if output_shape is None:
        return y
    shape = tuple(int(d) for d in output_shape)
    if len(shape) != y.ndim or any(s < n for s, n in zip(shape, natural)):
        raise ValueError(f"output_shape {shape} is smaller than the unpooled shape {natural}")
    return np.pad(y, [(0, s - n) for s, n in zip(shape, natural)])


max_unpool = define_op("nn.max_unpool", pattern=OPAQUE, inputs=(2, 3), attrs=MaxUnpoolAttrs,
                       infer=_max_unpool_rel, ref=_max_unpool_ref,
                       doc="Partial inverse of MaxPool: X scattered to its Indices, zeros elsewhere.")


# ---------------------------------------------------------------------------------------------
# dropout


@dataclass(frozen=True)
class DropoutAttrs:
    seed: int | None = None


def _dropout_rel(attrs, types, values):
    x = tensor(types[0], "data")
    check_dtype(x, dt.FLOATS + dt.SMALL_FLOATS, "data")
    if len(types) > 1 and types[1] is not None:
        check_dtype(tensor(types[1], "ratio"), dt.FLOATS + dt.SMALL_FLOATS, "ratio")
    if len(types) > 2 and types[2] is not None:
        check_dtype(tensor(types[2], "training_mode"), ("bool",), "training_mode")
    if values[1:2] and values[1] is not None and not 0 <= float(values[1]) <= 1:
        raise TypeInferenceError(f"ratio must be in [0, 1], got {float(values[1])}")
    return TupleType((x, TensorType(x.shape, "bool")))


def _dropout_ref(attrs, x, ratio=None, training_mode=None):
    """Identity unless training; then keep each element with probability 1 - ratio and scale it.
    With a seed the mask is numpy's MT19937 uniform stream for that seed (reproducible)."""
    r = 0.5 if ratio is None else float(ratio)
    if training_mode is None or not bool(training_mode) or r == 0:
        return x, np.ones(x.shape, np.bool_)
    rng = np.random.RandomState(attrs.seed) if attrs.seed is not None else np.random.RandomState()
    keep = rng.uniform(0.0, 1.0, x.shape) >= r
    if r >= 1:
        return np.zeros_like(x), keep
    return np.where(keep, x * (1.0 / (1.0 - r)), 0).astype(x.dtype), keep


dropout = define_op("nn.dropout", pattern=OPAQUE, inputs=(1, 3), attrs=DropoutAttrs, infer=_dropout_rel,
                    ref=_dropout_ref, doc="Dropout; returns (output, mask). Identity when not training.")
