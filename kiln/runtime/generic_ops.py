"""The operators the shape-generic kernels run (kiln/codegen/generic/kiln_generic.c), one function each.

Each takes the loaded library, the call, its argument values and the executor's cache of values derived
from constant arguments (a transposed weight), and returns the call's value, or None where the kernels
do not cover these arguments (another dtype, another rank): the executor then runs the operator's
reference. float32 only: the kernels compute in float32, as the compiled kernels do.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.ir.expr import Call, Constant
from kiln.op.nn import Window

Handler = Callable[[ctypes.CDLL, Call, list[Any], dict], Any]


def _f32(*values: Any) -> bool:
    return all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in values)


def _ptr(a: np.ndarray | None) -> int | None:
    return None if a is None else a.ctypes.data


def _geometry(win: Window, spatial: tuple[int, ...]) -> tuple[tuple[int, int], np.ndarray]:
    """(output spatial shape, the kernels' geom array: KH, KW, OH, OW, strides, begin pads, dilations,
    end pads) of a 2-d window over `spatial`."""
    (oh, ow), pads, _ = win.layout(spatial)
    geom = (*win.kernel, oh, ow, *win.strides, pads[0][0], pads[1][0], *win.dilations, pads[0][1], pads[1][1])
    return (oh, ow), np.array(geom, np.int64)


def _constant_derived(cache: dict, call: Call, i: int, value: np.ndarray,
                      make: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """make(value), computed once per call when argument i is a constant (a weight), else every run."""
    if not isinstance(call.args[i], Constant):
        return make(value)
    key = (id(call), i)
    if key not in cache:
        cache[key] = make(value)
    return cache[key]


def conv(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    x, w, b = (args + [None])[:3]
    if not _f32(x, w) or x.ndim != 4 or (b is not None and not _f32(b)):
        return None
    win = Window.of(call.attrs, w.shape[2:])
    (oh, ow), geom = _geometry(win, x.shape[2:])
    n, c, h, wd = x.shape
    m, group = w.shape[0], call.attrs.group
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    bias = None if b is None else np.ascontiguousarray(b)
    y = np.empty((n, m, oh, ow), np.float32)
    col = np.empty((c // group) * win.kernel[0] * win.kernel[1] * oh * ow, np.float32)
    lib.kiln_conv2d(n, c, h, wd, m, group, _ptr(geom), _ptr(x), _ptr(w), _ptr(bias), _ptr(y), _ptr(col))
    return y


def _matmul2d(lib: ctypes.CDLL, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [M, K] @ b [K, N], both C-contiguous."""
    (m, k), n = a.shape, b.shape[1]
    y = np.empty((m, n), np.float32)
    lib.kiln_gemm(m, n, k, _ptr(a), k, _ptr(b), n, _ptr(y), n)
    return y


def gemm(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    a, b, c = (args + [None])[:3]
    if not _f32(a, b) or (c is not None and not _f32(c)):
        return None
    attrs = call.attrs
    a = np.ascontiguousarray(a.T if attrs.transA else a)
    b = _constant_derived(cache, call, 1, b, lambda v: np.ascontiguousarray(v.T if attrs.transB else v))
    y = _matmul2d(lib, a, b)
    if attrs.alpha != 1.0:
        y *= np.float32(attrs.alpha)
    if c is not None:
        y += c * np.float32(attrs.beta) if attrs.beta != 1.0 else c
    return y


def mat_mul(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    """A [..., M, K] @ B [K, N] as one GEMM over all of A's rows."""
    a, b = args
    if not _f32(a, b) or b.ndim != 2 or a.ndim < 2:
        return None
    b = _constant_derived(cache, call, 1, b, np.ascontiguousarray)
    rows = np.ascontiguousarray(a).reshape(-1, a.shape[-1])
    return _matmul2d(lib, rows, b).reshape(*a.shape[:-1], b.shape[1])


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


def batch_normalization(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    """Inference batch norm as one multiply-add per element (scale and shift folded per channel)."""
    x, scale, b, mean, var = args
    if call.attrs.training_mode or not _f32(x, scale, b, mean, var) or x.ndim < 2:
        return None
    inv = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + call.attrs.epsilon)
    mul, add = inv.astype(np.float32), (b - mean * inv).astype(np.float32)
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    lib.kiln_channel_affine(x.shape[0], x.shape[1], x[0, 0].size, _ptr(x), _ptr(mul), _ptr(add), 0, _ptr(y))
    return y


def relu(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    (x,) = args
    if not _f32(x):
        return None
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    lib.kiln_relu(x.size, _ptr(x), _ptr(y))
    return y


def add(lib: ctypes.CDLL, call: Call, args: list[Any], cache: dict) -> np.ndarray | None:
    a, b = args
    if not _f32(a, b) or a.shape != b.shape:
        return None
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    y = np.empty_like(a)
    lib.kiln_add(a.size, _ptr(a), _ptr(b), _ptr(y))
    return y


GENERIC_OPS: dict[str, Handler] = {
    "nn.conv": conv, "linalg.gemm": gemm, "linalg.mat_mul": mat_mul, "nn.max_pool": max_pool,
    "nn.average_pool": average_pool, "nn.global_average_pool": global_average_pool,
    "nn.batch_normalization": batch_normalization, "nn.relu": relu, "math.add": add,
}
