"""The operators the shape-generic kernels run (kiln/codegen/generic/kiln_generic.c), one function each.

Each takes the loaded library, the call, its argument values and the executor's cache of values derived
from constant arguments (a batch norm folded into a weight), and returns the call's value, or None where
the kernels do not cover these arguments (another dtype, another rank): the executor then runs the
operator's reference. float32 only: the kernels compute in float32, as the compiled kernels do. A conv,
Gemm or MatMul also takes a `Tail` (kiln.runtime.generic_fusion finds them): what the kernel adds as it
stores its result.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.ir.expr import Call, Constant
from kiln.op.nn import Window
from kiln.op.reduce import softmax_axes

Handler = Callable[[ctypes.CDLL, Call, list[Any], dict], Any]
F32 = np.dtype(np.float32)


@dataclass(frozen=True)
class Tail:
    """The epilogue of a conv, Gemm or MatMul: + bias (per output channel of a conv, per column of a
    product), + res (the output's shape), then clamped to [lo, hi]."""

    bias: np.ndarray | None = None
    res: np.ndarray | None = None
    lo: float = -math.inf
    hi: float = math.inf


NO_TAIL = Tail()


def _f32(*values: Any) -> bool:
    return all(isinstance(v, np.ndarray) and v.dtype == F32 for v in values)


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


def _geometry(win: Window, spatial: tuple[int, ...]) -> tuple[tuple[int, int], np.ndarray]:
    """(output spatial shape, the kernels' geom array: KH, KW, OH, OW, strides, begin pads, dilations,
    end pads) of a 2-d window over `spatial`."""
    (oh, ow), pads, _ = win.layout(spatial)
    geom = (*win.kernel, oh, ow, *win.strides, pads[0][0], pads[1][0], *win.dilations, pads[0][1], pads[1][1])
    return (oh, ow), np.array(geom, np.int64)


def constant_derived(cache: dict, key: Any, make: Callable[[], Any]) -> Any:
    """make(), computed once per executor for a key that determines it (a call and what it reads of its
    constants, or of its argument shapes)."""
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _bias_sum(*parts: np.ndarray | None) -> np.ndarray | None:
    """The biases a kernel adds, as one contiguous float32 vector (None when there are none)."""
    given = [p for p in parts if p is not None]
    if not given:
        return None
    return np.ascontiguousarray(sum(given[1:], given[0].astype(np.float32)), np.float32)


def _residual(tail: Tail, shape: tuple[int, ...], view: tuple[int, ...] | None = None) -> np.ndarray | None | bool:
    """The residual as the kernel reads it (contiguous, reshaped to `view`); False when it does not have the
    output's `shape`, so that adding it would broadcast."""
    if tail.res is None:
        return None
    if tail.res.shape != shape or not _f32(tail.res):
        return False
    return np.ascontiguousarray(tail.res).reshape(view or shape)


def _packed_weight(lib: ctypes.CDLL, call: Call, w: np.ndarray, group: int, cache: dict) -> np.ndarray | None:
    """A conv's weight as the GEMM reads it, packed once per executor: for the call's constant weight or the
    one its batch norm was folded into (both live as long as the executor), else None (packed at each call).
    Keyed by the array too, so a call run both folded and unfolded keeps one of each."""
    folded = cache.get((id(call), "folded"))
    if not (isinstance(call.args[1], Constant) and call.args[1].data is w) and (folded is None or folded[0] is not w):
        return None

    def pack() -> tuple[np.ndarray, np.ndarray]:
        m, k = w.shape[0] // group, w[0].size
        rows = -(-m // lib.kiln_tile_rows()) * lib.kiln_tile_rows()
        out = np.empty(group * rows * k, np.float32)
        lib.kiln_pack_a(group, m, k, _ptr(w), _ptr(out))
        return w, out

    return constant_derived(cache, (id(call), "packed", id(w)), pack)[1]


def conv(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict, tail: Tail = NO_TAIL) -> np.ndarray | None:
    x, w, b = (args + [None])[:3]
    if not _f32(x, w) or x.ndim != 4 or w.ndim != 4 or (b is not None and not _f32(b)):
        return None
    group = call.attrs.group
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group or (b is not None and b.shape != (w.shape[0],)):
        return None  # the reference says what is wrong
    key = (id(call), "geometry", x.shape[2:], w.shape[2:])
    (oh, ow), geom = constant_derived(cache, key, lambda: _geometry(Window.of(call.attrs, w.shape[2:]), x.shape[2:]))
    n, c, h, wd = x.shape
    m = w.shape[0]
    y = np.empty((n, m, oh, ow), np.float32)
    res = _residual(tail, y.shape)
    if res is False:
        return None
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    bias = _bias_sum(b, tail.bias)
    packed = _packed_weight(lib, call, w, group, cache)
    lib.kiln_conv2d(n, c, h, wd, m, group, _ptr(geom), _ptr(x), _ptr(w), _ptr(packed), _ptr(bias), _ptr(res), tail.lo,
                    tail.hi, _ptr(y))
    return y


def _elements(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def _product(lib: ctypes.CDLL, a: np.ndarray, b: np.ndarray, tail: Tail, shape: tuple[int, ...]) -> np.ndarray | None:
    """a [batch, M, K] @ b [batch, K, N] (any element strides, b's batch stride may be 0) with the tail, as an
    array of `shape` (the result's, which the residual must have)."""
    (batch, m, k), n = a.shape, b.shape[2]
    res = _residual(tail, shape, (batch, m, n))
    if res is False:
        return None
    y = np.empty(shape, np.float32)
    (bsa, rsa, csa), (bsb, rsb, csb) = _elements(a), _elements(b)
    dims = np.array([batch, m, n, k, bsa, rsa, csa, bsb, rsb, csb, m * n, n, m * n, n], np.int64)
    bias = _bias_sum(tail.bias)
    lib.kiln_gemm(_ptr(dims), _ptr(a), _ptr(b), _ptr(y), None, _ptr(bias), _ptr(res), tail.lo, tail.hi)
    return y


def gemm(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict, tail: Tail = NO_TAIL) -> np.ndarray | None:
    """alpha op(A) op(B) + beta C: the transposes read in place (strides); C as the column bias where it is a
    row vector and alpha = beta = 1, else added after (and then no tail)."""
    a, b, c = (args + [None])[:3]
    if not _f32(a, b) or a.ndim != 2 or b.ndim != 2 or (c is not None and not _f32(c)):
        return None
    attrs = call.attrs
    a, b = a.T if attrs.transA else a, b.T if attrs.transB else b
    if a.shape[1] != b.shape[0]:
        return None
    shape = (a.shape[0], b.shape[1])
    as_bias = c is not None and attrs.alpha == attrs.beta == 1.0 and c.ndim <= 2 and c.size == shape[1] and \
        c.shape[-1] == shape[1]
    if attrs.alpha == 1.0 and (c is None or as_bias):
        bias = _bias_sum(c.reshape(-1) if as_bias else None, tail.bias)
        return _product(lib, a[None], b[None], Tail(bias, tail.res, tail.lo, tail.hi), shape)
    if tail is not NO_TAIL:
        return None
    y = _product(lib, a[None], b[None], NO_TAIL, shape)
    y *= np.float32(attrs.alpha)
    if c is not None:
        y += c * np.float32(attrs.beta) if attrs.beta != 1.0 else c
    return y


def mat_mul(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict, tail: Tail = NO_TAIL) -> np.ndarray | None:
    """A [..., M, K] @ B [..., K, N] (batch dims broadcast); a 2-d B makes one GEMM over all of A's rows."""
    a, b = args
    if not _f32(a, b) or a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2] or not _broadcasts(a, b, 2):
        return None
    if b.ndim == 2:
        rows = a.reshape(-1, a.shape[-1])
        return _product(lib, rows[None], b[None], tail, a.shape[:-1] + b.shape[1:])
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a3 = np.broadcast_to(a, batch + a.shape[-2:]).reshape(-1, *a.shape[-2:])
    b3 = np.broadcast_to(b, batch + b.shape[-2:]).reshape(-1, *b.shape[-2:])
    return _product(lib, a3, b3, tail, batch + (a.shape[-2], b.shape[-1]))


def _pool(lib: ctypes.CDLL, x: np.ndarray, win: Window, mode: int) -> np.ndarray:
    (oh, ow), geom = _geometry(win, x.shape[2:])
    x = np.ascontiguousarray(x)
    y = np.empty(x.shape[:2] + (oh, ow), np.float32)
    lib.kiln_pool2d(x.shape[0] * x.shape[1], x.shape[2], x.shape[3], _ptr(geom), mode, _ptr(x), _ptr(y))
    return y


def max_pool(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> tuple | None:
    """(Y, None): the executor sends here only calls whose Indices output nothing reads."""
    (x,) = args
    if not _f32(x) or x.ndim != 4:
        return None
    return _pool(lib, x, Window.of(call.attrs, call.attrs.kernel_shape, call.attrs.ceil_mode), 0), None


def average_pool(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    (x,) = args
    if not _f32(x) or x.ndim != 4:
        return None
    win = Window.of(call.attrs, call.attrs.kernel_shape, call.attrs.ceil_mode)
    return _pool(lib, x, win, 2 if call.attrs.count_include_pad else 1)


def global_average_pool(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    (x,) = args
    if not _f32(x) or x.ndim < 3:
        return None
    x = np.ascontiguousarray(x)
    y = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), np.float32)
    lib.kiln_plane_mean(x.shape[0] * x.shape[1], x[0, 0].size, _ptr(x), _ptr(y))
    return y


def batch_norm_affine(call: Call, args: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(multiplier, addend) per channel of an inference batch norm (in float64), or None where it is not one
    on float32 values."""
    _, scale, b, mean, var = args
    if call.attrs.training_mode or not _f32(scale, b, mean, var):
        return None
    inv = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + call.attrs.epsilon)
    return inv, b - mean * inv


def batch_normalization(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    """Inference batch norm as one multiply-add per element (scale and shift folded per channel)."""
    x = args[0]
    affine = batch_norm_affine(call, args)
    if affine is None or not _f32(x) or x.ndim < 2:
        return None
    mul, add_ = (v.astype(np.float32) for v in affine)
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    lib.kiln_channel_affine(x.shape[0], x.shape[1], x[0, 0].size, _ptr(x), _ptr(mul), _ptr(add_), _ptr(y))
    return y


def clamp_bounds(call: Call, args: list[Any]) -> tuple[float, float] | None:
    """[lo, hi] of a ReLU or of a float32 Clip with scalar bounds (an omitted one: infinite)."""
    if call.op.name == "nn.relu":
        return 0.0, math.inf
    bounds = (args + [None, None])[1:3]
    if any(v is not None and not (_f32(v) and v.size == 1) for v in bounds):
        return None
    lo, hi = (None if v is None or (isinstance(v, tuple) and not v) else float(v.reshape(())) for v in bounds)
    return -math.inf if lo is None else lo, math.inf if hi is None else hi


def clamp(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    """ReLU and Clip."""
    x = args[0]
    bounds = clamp_bounds(call, args)
    if bounds is None or not _f32(x):
        return None
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    lib.kiln_clamp(x.size, _ptr(x), *bounds, _ptr(y))
    return y


def add(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    a, b = args
    if not _f32(a, b):
        return None
    if a.shape != b.shape:
        return _binary(np.add, a, b) if _broadcasts(a, b) else None
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    y = np.empty_like(a)
    lib.kiln_add(a.size, _ptr(a), _ptr(b), _ptr(y))
    return y


def _broadcasts(a: np.ndarray, b: np.ndarray, matrix_dims: int = 0) -> bool:
    """Whether a's and b's shapes (less their last matrix_dims) broadcast together."""
    try:
        np.broadcast_shapes(a.shape[:a.ndim - matrix_dims], b.shape[:b.ndim - matrix_dims])
    except ValueError:
        return False
    return True


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `target` without growing it."""
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _binary(fn: Callable, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A broadcasting float32 operation in numpy: one correctly rounded float32 operation is what the
    reference's float64 one rounds to."""
    return np.asarray(fn(a, b), np.float32)


def _numpy_binary(fn: Callable) -> Handler:
    def run(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
        a, b = args
        return _binary(fn, a, b) if _f32(a, b) and _broadcasts(a, b) else None

    return run


def erf(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    (x,) = args
    if not _f32(x):
        return None
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    lib.kiln_erf(x.size, _ptr(x), _ptr(y))
    return y


def softmax(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    """Softmax over trailing axes (its rows contiguous)."""
    (x,) = args
    if not _f32(x) or x.ndim == 0 or x.size == 0:
        return None
    axes = softmax_axes(call.attrs, x.ndim)
    if tuple(axes) != tuple(range(x.ndim - len(axes), x.ndim)):
        return None
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    n = math.prod(x.shape[x.ndim - len(axes):])
    lib.kiln_softmax(x.size // n, n, _ptr(x), _ptr(y))
    return y


def layer_normalization(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> tuple | None:
    """(Y, Mean, InvStdDev) over the trailing axes, the statistics in float32."""
    x, scale, b = (args + [None])[:3]
    if not _f32(x, scale) or (b is not None and not _f32(b)) or call.attrs.stash_type != "float32" or x.ndim == 0:
        return None
    axis = call.attrs.axis % x.ndim
    trailing = x.shape[axis:]
    n = math.prod(trailing)
    if n == 0 or not all(_broadcasts_to(p.shape, trailing) for p in (scale, b) if p is not None):
        return None
    scale = np.ascontiguousarray(np.broadcast_to(scale, trailing), np.float32)
    shift = None if b is None else np.ascontiguousarray(np.broadcast_to(b, trailing), np.float32)
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    stat = np.empty(x.shape[:axis] + (1,) * len(trailing), np.float32)
    inv = np.empty_like(stat)
    lib.kiln_layer_norm(x.size // n, n, _ptr(x), _ptr(scale), _ptr(shift), call.attrs.epsilon, _ptr(y), _ptr(stat),
                        _ptr(inv))
    return y, stat, inv


GENERIC_OPS: dict[str, Handler] = {
    "nn.conv": conv, "linalg.gemm": gemm, "linalg.mat_mul": mat_mul, "nn.max_pool": max_pool,
    "nn.average_pool": average_pool, "nn.global_average_pool": global_average_pool,
    "nn.batch_normalization": batch_normalization, "nn.relu": clamp, "math.clip": clamp, "math.add": add,
    "math.sub": _numpy_binary(np.subtract), "math.mul": _numpy_binary(np.multiply),
    "math.div": _numpy_binary(np.divide), "math.erf": erf, "reduce.softmax": softmax,
    "nn.layer_normalization": layer_normalization,
}

# the operators whose kernels take a Tail (kiln.runtime.generic_fusion ends chains on them)
ANCHORS = ("nn.conv", "linalg.gemm", "linalg.mat_mul")
