"""Winograd F(m x m, 3 x 3) convolution as three blocked-layout operators (AlterOpLayout builds them):

    conv3x3(x, w) = winograd_output(conv2d_nchwc(winograd_input(x), U, group=alpha*alpha))

winograd_input turns every (alpha x alpha) input tile d into B^T d B, one group of channel blocks
per (i, j) position of the transformed tile; the grouped 1x1 conv is the batched GEMM with the
weights U = G g G^T (transformed at compile time); winograd_output turns every tile back with
A^T M A, crops the last tiles and adds the bias. Tensors are NCHW[x]c; a tile is m x m outputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import TensorType
from kiln.op.registry import OUT_EWISE_FUSABLE, define_op
from kiln.op.typerel import tensor

KERNEL = 3  # r: the kernel size these transforms are built for
# interpolation points (the last, infinity, is implicit) per output tile size m
POINTS = {2: (0.0, 1.0, -1.0), 4: (0.0, 1.0, -1.0, 2.0, -2.0)}


@functools.cache
def winograd_matrices(m: int, r: int = KERNEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T, G, B^T) of F(m, r) in float64, by Toom-Cook at POINTS[m] and infinity:
    y = A^T [(G g) * (B^T d)] is the correlation y_i = sum_j g_j d_{i+j} of m outputs."""
    if m not in POINTS:
        raise ValueError(f"winograd: no interpolation points for tile size {m} (have {sorted(POINTS)})")
    p = np.array(POINTS[m], dtype=np.float64)
    alpha = m + r - 1
    at = np.zeros((m, alpha))
    at[:, :-1] = p[None, :] ** np.arange(m)[:, None]
    at[m - 1, -1] = 1.0
    g = np.zeros((alpha, r))
    bt = np.zeros((alpha, alpha))
    for k in range(alpha - 1):
        others = np.delete(p, k)
        g[k] = p[k] ** np.arange(r) / np.prod(p[k] - others)
        bt[k, :-1] = np.polynomial.polynomial.polyfromroots(others)  # coefficients of prod (x - p_l), low first
    g[-1, -1] = 1.0
    bt[-1] = np.polynomial.polynomial.polyfromroots(p)
    return at, g, bt


def transform_weight(w: np.ndarray, m: int) -> np.ndarray:
    """OIHW 3x3 weight (K, C, 3, 3) -> the grouped 1x1 weight (alpha*alpha*K, C, 1, 1) of the GEMM:
    group (i, j) holds (G g G^T)[i, j] for every (k, c)."""
    _, g, _ = winograd_matrices(m)
    alpha, (k, c) = g.shape[0], w.shape[:2]
    # (G g G^T)[i, j] = sum over (r, s) of kron(G, G)[i * alpha + j, r * 3 + s] g[r, s]: one product over every
    # (k, c), 5x faster than the three-operand einsum (resnet50's 13 weights: 180 ms of a cached build)
    u = w.reshape(k * c, 9).astype(np.float64) @ np.kron(g, g).T
    return np.ascontiguousarray(u.T.astype(w.dtype)).reshape(alpha * alpha * k, c, 1, 1)


# A weight whose largest magnitude is more than this many times its typical (median nonzero) magnitude runs as a
# direct conv. Winograd sums the transformed weights over a tile, so an outlier's rounding error (eps times its
# magnitude) lands on every output of the tile, also where the direct conv multiplies it by zero padding: a 3x3
# weight of 1e12-1e18 among ones of 0.1 (the fuzzer's byte flips) turned a CNN's softmax one-hot where the
# interpreter and ONNX Runtime agree. Trained and random weights are within a few hundred of their median.
WINOGRAD_MAX_SPREAD = 1e4


def winograd_safe(w: np.ndarray) -> bool:
    """Whether Winograd's rounding stays at a direct conv's scale for this weight: finite values whose largest
    magnitude is within WINOGRAD_MAX_SPREAD of the median nonzero one."""
    a = np.abs(np.asarray(w, np.float64))
    if not np.isfinite(a).all():
        return False
    nonzero = a[a > 0]
    return nonzero.size == 0 or float(nonzero.max()) <= WINOGRAD_MAX_SPREAD * float(np.median(nonzero))


@dataclass(frozen=True)
class WinogradInputAttrs:
    """`tile` is m; `pads` (top, left, bottom, right) are the conv's; `out` its (OH, OW)."""

    tile: int
    pads: tuple[int, int, int, int]
    out: tuple[int, int]


@dataclass(frozen=True)
class WinogradOutputAttrs:
    tile: int
    out: tuple[int, int]


def tiles(out: tuple[int, int], m: int) -> tuple[int, int]:
    return -(-out[0] // m), -(-out[1] // m)


def _blocked5(t: TensorType, what: str) -> tuple[int, ...]:
    if t.shape is None or len(t.shape) != 5 or not all(isinstance(d, int) for d in t.shape[1:]):
        raise TypeInferenceError(f"{what} {t} must be NCHW[x]c with static channels and spatial dims")
    return t.shape


def _input_rel(a: WinogradInputAttrs, types, values) -> TensorType:
    x = tensor(types[0], "X")
    n, cb, h, w, c = _blocked5(x, "X")
    alpha = a.tile + KERNEL - 1
    pt, pl, pb, pr = a.pads
    if (h + pt + pb - KERNEL + 1, w + pl + pr - KERNEL + 1) != tuple(a.out):
        raise TypeInferenceError(f"winograd_input: X {x} padded by {a.pads} does not give a {a.out} output")
    th, tw = tiles(a.out, a.tile)
    return TensorType((n, alpha * alpha * cb, th, tw, c), x.dtype)


def _input_ref(a: WinogradInputAttrs, x: np.ndarray) -> np.ndarray:
    m, (pt, pl, _, _) = a.tile, a.pads
    alpha = m + KERNEL - 1
    th, tw = tiles(a.out, m)
    hp, wp = (th - 1) * m + alpha, (tw - 1) * m + alpha
    n, cb, h, w, c = x.shape
    xp = np.zeros((n, cb, max(hp, h + pt), max(wp, w + pl), c), np.float64)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    d = np.empty((n, cb, th, tw, alpha, alpha, c))
    for i in range(th):
        for j in range(tw):
            d[:, :, i, j] = xp[:, :, i * m:i * m + alpha, j * m:j * m + alpha]
    _, _, bt = winograd_matrices(m)
    v = np.einsum("ir,nbyxrsc,js->nijbyxc", bt, d, bt)
    return np.ascontiguousarray(v.reshape(n, alpha * alpha * cb, th, tw, c).astype(x.dtype))


def _output_rel(a: WinogradOutputAttrs, types, values) -> TensorType:
    y = tensor(types[0], "M")
    n, q, th, tw, k = _blocked5(y, "M")
    alpha = a.tile + KERNEL - 1
    if q % (alpha * alpha) or (th, tw) != tiles(a.out, a.tile):
        raise TypeInferenceError(f"winograd_output: M {y} is not {alpha}x{alpha} groups of {a.out} in tiles of "
                                 f"{a.tile}")
    kb = q // (alpha * alpha)
    if len(types) > 1 and types[1] is not None and tensor(types[1], "B").shape != (kb, k):
        raise TypeInferenceError(f"winograd_output: bias {types[1]} must be C{k}c of {kb * k} channels")
    return TensorType((n, kb, a.out[0], a.out[1], k), y.dtype)


def _output_ref(a: WinogradOutputAttrs, y: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    m = a.tile
    alpha = m + KERNEL - 1
    n, q, th, tw, k = y.shape
    at, _, _ = winograd_matrices(m)
    t = y.astype(np.float64).reshape(n, alpha, alpha, q // (alpha * alpha), th, tw, k)
    o = np.einsum("ui,nijbyxc,vj->nbyuxvc", at, t, at).reshape(n, q // (alpha * alpha), th * m, tw * m, k)
    o = o[:, :, :a.out[0], :a.out[1]]
    if b is not None:
        o = o + b[None, :, None, None, :]
    return np.ascontiguousarray(o.astype(y.dtype))


winograd_input = define_op(
    "nn.winograd_input", pattern=OUT_EWISE_FUSABLE, attrs=WinogradInputAttrs, infer=_input_rel, ref=_input_ref,
    doc="Winograd input transform: X NCHW[x]c -> (alpha*alpha*C/x, ceil(OH/m), ceil(OW/m)) tiles B^T d B.")

winograd_output = define_op(
    "nn.winograd_output", pattern=OUT_EWISE_FUSABLE, inputs=(1, 2), attrs=WinogradOutputAttrs, infer=_output_rel,
    ref=_output_ref,
    doc="Winograd output transform: tiles M -> A^T M A, cropped to `out`, plus bias B C[x]c; NCHW[x]c.")
