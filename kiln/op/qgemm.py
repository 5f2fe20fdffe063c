"""quant.qgemm: the integer GEMM every quantized matmul, gemm and convolution becomes (kiln/transform/
int8_ops.py): A[..., K] (uint8 or int8) times a constant int8 weight W[K, N], summed exactly in int32,
then one epilogue per output column n:

    acc = sum_k (A[., k] - a_zero_point) * W[k, n]                        (int32, exact)
    v   = float32(acc) * (a_scale * col_scale[n]) + col_bias[n]           (float32)
    out = acc                                   when out_dtype is int32
          v, or max(v, 0) with relu             when out_dtype is float32
          saturate(round_half_even(v) + y_zero_point), with relu clamped below at y_zero_point,
                                                when out_dtype is uint8 / int8

so a requantizing convolution passes col_scale = x_scale * w_scale[n] / y_scale (per channel or not)
and col_bias = bias[n] / y_scale; a dynamic one passes the run-time a_scale and a_zero_point.

W is stored packed for the x86 micro-kernels (kiln/codegen/kiln_int8.h): panels of `nr` columns,
each [ceil(K/4)][nr][4], zero past K and N; `kernel` names the micro-kernel the build chose for the
target and these weights (avx2 needs |w0| + |w1| <= 128 for each pair of adjacent weights).
`wsum[n] = sum_k W[k, n]` is precomputed so the kernel subtracts a_zero_point * wsum[n] once per output
instead of once per product.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import TensorType
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import check_dtype, tensor

NAME = "quant.qgemm"
OUT_DTYPES = ("uint8", "int8", "int32", "float32")
# micro-kernel -> (panel width nr, rows per register tile)
KERNELS = {"avx2": (16, 4), "avx2_split": (16, 4), "vnni": (32, 8)}


@dataclass(frozen=True)
class QGemmAttrs:
    units: int  # N
    depth: int  # K
    out_dtype: str = "float32"
    y_zero_point: int = 0
    relu: bool = False
    kernel: str = "avx2_split"


def pack_weight(w: np.ndarray, nr: int) -> np.ndarray:
    """W[K, N] int8 -> panels [ceil(N/nr), ceil(K/4), nr, 4], zero-padded."""
    k, n = w.shape
    k4, panels = -(-k // 4), -(-n // nr)
    padded = np.zeros((k4 * 4, panels * nr), np.int8)
    padded[:k, :n] = w
    return np.ascontiguousarray(padded.reshape(k4, 4, panels, nr).transpose(2, 0, 3, 1))


def unpack_weight(packed: np.ndarray, depth: int, units: int) -> np.ndarray:
    """pack_weight's inverse: the [K, N] int8 matrix."""
    panels, k4, nr, _ = packed.shape
    return packed.transpose(1, 3, 0, 2).reshape(k4 * 4, panels * nr)[:depth, :units]


def pairs_fit_s16(w: np.ndarray) -> bool:
    """Whether vpmaddubsw cannot saturate on these weights: |w[2j, n]| + |w[2j + 1, n]| <= 128 for every
    pair of rows the instruction adds (uint8 activations reach 255, and 255 * 128 fits int16)."""
    k = w.shape[0]
    even = np.zeros((-(-k // 2) * 2, w.shape[1]), np.int32)
    even[:k] = np.abs(w.astype(np.int32))
    return bool((even[0::2] + even[1::2]).max(initial=0) <= 128)


def epilogue(acc: np.ndarray, attrs: QGemmAttrs, a_scale, col_scale, col_bias) -> np.ndarray:
    """The int32 products to the output dtype, as the module doc says (float32 arithmetic)."""
    if attrs.out_dtype == "int32":
        return acc.astype(np.int32)
    mult = np.float32(np.asarray(a_scale, np.float32).reshape(())) * np.asarray(col_scale, np.float32)
    v = acc.astype(np.float32) * mult + np.asarray(col_bias, np.float32)
    if attrs.out_dtype == "float32":
        return np.maximum(v, np.float32(0)) if attrs.relu else v
    info = np.iinfo(attrs.out_dtype)
    lo = max(info.min, attrs.y_zero_point) if attrs.relu else info.min
    q = np.rint(v).astype(np.float64) + attrs.y_zero_point
    return np.clip(q, lo, info.max).astype(attrs.out_dtype)


def _ref(attrs: QGemmAttrs, a, w, wsum, a_zp, a_scale, col_scale, col_bias):
    wm = unpack_weight(w, attrs.depth, attrs.units).astype(np.int64)
    rows = a.reshape(-1, attrs.depth).astype(np.int64) - np.int64(np.asarray(a_zp).reshape(()))
    acc = (rows @ wm).astype(np.int32)
    out = epilogue(acc, attrs, a_scale, col_scale, col_bias)
    return out.reshape(a.shape[:-1] + (attrs.units,))


def _rel(attrs: QGemmAttrs, types, values) -> TensorType:
    a, w = tensor(types[0], "A"), tensor(types[1], "W")
    check_dtype(a, ("uint8", "int8"), "A")
    check_dtype(w, ("int8",), "W")
    if attrs.out_dtype not in OUT_DTYPES:
        raise TypeInferenceError(f"{NAME}: out_dtype {attrs.out_dtype} is not one of {', '.join(OUT_DTYPES)}")
    if attrs.kernel not in KERNELS:
        raise TypeInferenceError(f"{NAME}: kernel {attrs.kernel!r} is not one of {', '.join(KERNELS)}")
    if a.shape is None:
        return TensorType(None, attrs.out_dtype)
    if not a.shape or a.shape[-1] != attrs.depth:
        raise TypeInferenceError(f"{NAME}: A {a} must end in the depth K = {attrs.depth}")
    nr = KERNELS[attrs.kernel][0]
    expect = (-(-attrs.units // nr), -(-attrs.depth // 4), nr, 4)
    if w.shape is not None and tuple(w.shape) != expect:
        raise TypeInferenceError(f"{NAME}: packed W {w} must have shape {expect} for kernel {attrs.kernel}")
    return TensorType(a.shape[:-1] + (attrs.units,), attrs.out_dtype)


qgemm = define_op(
    NAME, pattern=OPAQUE, attrs=QGemmAttrs, inputs=7, infer=_rel, ref=_ref,
    doc="int8 GEMM with int32 accumulation and a requantize epilogue: A @ packed W (x86 micro-kernels).")
