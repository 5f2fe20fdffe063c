"""Quantization: linear (de)quantization per tensor, per axis and per block, dynamic
quantization, and the quantized convolution and matmul that accumulate in integers.

Quantized values are integers (int2..int16, unsigned too) or small floats (float8, float4);
every float -> quantized conversion rounds half to even and saturates to the target range.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.nn import ConvAttrs, Window, conv_nd
from kiln.op.registry import INJECTIVE, OPAQUE, OUT_EWISE_FUSABLE, define_op
from kiln.op.typerel import broadcast_shapes, check_dtype, norm_axis, tensor

QUANT_INTS = ("int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16")
QUANT_FLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")
QUANT_TYPES = QUANT_INTS + QUANT_FLOATS
SCALE_TYPES = ("float32", "float16", "bfloat16")


def quantize_values(v: np.ndarray, out: str, saturate: bool = True) -> np.ndarray:
    """Convert real values to quantized dtype `out`: round half to even, then clamp to the range
    (integers always; small floats when `saturate`, and float4, which has no inf/NaN, always)."""
    target = dt.to_numpy(out)
    if out in QUANT_FLOATS:
        if saturate or out == "float4_e2m1fn":
            top = float(ml_dtypes.finfo(target).max)
            v = np.clip(v.astype(np.float64), -top, top)
        return v.astype(target)
    info = ml_dtypes.iinfo(target)
    return np.clip(np.rint(v.astype(np.float64)), info.min, info.max).astype(target)


def as_real(q: np.ndarray) -> np.ndarray:
    """A quantized or integer array as exact integers (int64) or, for small floats, float64."""
    return q.astype(np.int64 if q.dtype.kind in "iub" or dt.from_numpy(q.dtype) in QUANT_INTS
                    else np.float64)


# ---------------------------------------------------------------------------------------------
# granularity: per tensor, per axis, per block


def _param_rel(x: TensorType, p: TensorType, axis: int, block_size: int, what: str) -> None:
    """Check that scale/zero-point shape `p` fits x for the granularity it implies. One value in 1-D is per
    tensor too, whatever the axis says (ONNX Runtime's quantizer writes axis=1 on 1-D biases)."""
    if p.shape is None or x.shape is None or p.ndim == 0 or (p.shape == (1,) and not block_size):
        return
    if block_size < 0:
        raise TypeInferenceError(f"block_size must be >= 0, got {block_size}")
    ax = norm_axis(axis, x.ndim)
    if not block_size:
        if p.ndim != 1:
            raise TypeInferenceError(f"{what} of shape {p.shape} must be a scalar or 1-D "
                                     f"(per-axis) unless block_size is set")
        n, d = p.shape[0], x.shape[ax] if x.ndim else 1
        if isinstance(n, int) and isinstance(d, int) and n not in (1, d):
            raise TypeInferenceError(f"{what} has {n} elements; axis {axis} of x has {d}")
        return
    if p.ndim != x.ndim:
        raise TypeInferenceError(f"blocked {what} must have x's rank {x.ndim}, got shape {p.shape}")
    for i, (pd, xd) in enumerate(zip(p.shape, x.shape)):
        if not (isinstance(pd, int) and isinstance(xd, int)):
            continue
        want = -(-xd // block_size) if i == ax else xd
        if pd != want:
            raise TypeInferenceError(f"blocked {what} shape {p.shape} does not fit x shape {x.shape} "
                                     f"with block_size {block_size} on axis {ax}")


def _check_same_shape(zp: TensorType, scale: TensorType, name: str) -> None:
    """Zero point and scale share a shape; single-element tensors of any rank count as scalars."""
    single = lambda t: t.shape is not None and all(d == 1 for d in t.shape)
    if zp.shape != scale.shape and not (single(zp) and single(scale)):
        raise TypeInferenceError(f"{name}_zero_point shape {zp.shape} differs from {name}_scale's "
                                 f"{scale.shape}")


def expand_param(p: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point broadcastable against x: scalars stay, per-axis vectors lie along
    `axis`, per-block tensors are repeated block_size times along `axis` and cut to x's size."""
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    ax = axis % len(shape)
    if not block_size:
        return p.reshape([-1 if i == ax else 1 for i in range(len(shape))])
    return np.repeat(p, block_size, axis=ax).take(np.arange(shape[ax]), axis=ax)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


@dataclass(frozen=True)
class QuantizeLinearAttrs:
    axis: int = 1
    saturate: int = 1
    block_size: int = 0
    output_dtype: str | None = None  # None: y_zero_point's dtype, else uint8
    precision: str | None = None  # dtype of x / y_scale; None: y_scale's dtype


def _quantize_out_dtype(attrs: QuantizeLinearAttrs, zp: TensorType | None) -> str:
    out = attrs.output_dtype or (zp.dtype if zp is not None else "uint8")
    if zp is not None and zp.dtype != out:
        raise TypeInferenceError(f"output_dtype {attrs.output_dtype} differs from y_zero_point's "
                                 f"dtype {zp.dtype}")
    if out not in QUANT_TYPES:
        raise TypeInferenceError(f"cannot quantize to {out}; expected one of {', '.join(QUANT_TYPES)}")
    return out


def _quantize_rel(attrs: QuantizeLinearAttrs, types, values) -> TensorType:
    x, scale = tensor(types[0], "x"), tensor(types[1], "y_scale")
    zp = types[2] if len(types) > 2 else None
    check_dtype(x, SCALE_TYPES + ("int32",), "x")
    check_dtype(scale, SCALE_TYPES + ("int32", "float8_e8m0fnu"), "y_scale")
    if attrs.precision is not None:
        check_dtype(TensorType((), attrs.precision), SCALE_TYPES, "precision")
    _param_rel(x, scale, attrs.axis, attrs.block_size, "y_scale")
    if zp is not None:
        _check_same_shape(tensor(zp, "y_zero_point"), scale, "y")
    return TensorType(x.shape, _quantize_out_dtype(attrs, zp))


def _quantize_ref(attrs: QuantizeLinearAttrs, x, scale, zp=None):
    out = attrs.output_dtype or (dt.from_numpy(zp.dtype) if zp is not None else "uint8")
    prec = dt.to_numpy(attrs.precision) if attrs.precision else scale.dtype
    if dt.from_numpy(prec) not in dt.FLOATS:
        prec = np.dtype(np.float32)  # int32 / e8m0 scales divide in float32
    scaled = (x.astype(prec) / expand_param(scale, x.shape, attrs.axis, attrs.block_size).astype(prec))
    if out in QUANT_INTS:  # NOTE: round before adding the zero point: ties go to the even quotient
        scaled = np.rint(scaled.astype(np.float64))
    if zp is not None:
        scaled = scaled.astype(np.float64) + as_real(expand_param(zp, x.shape, attrs.axis, attrs.block_size))
    return quantize_values(np.asarray(scaled), out, bool(attrs.saturate))


quantize_linear = define_op(
    "quant.quantize_linear", pattern=INJECTIVE, inputs=(2, 3), attrs=QuantizeLinearAttrs,
    infer=_quantize_rel, ref=_quantize_ref,
    doc="y = saturate(round_half_even(x / y_scale) + y_zero_point), per tensor, axis or block.")


@dataclass(frozen=True)
class DequantizeLinearAttrs:
    axis: int = 1
    block_size: int = 0
    output_dtype: str | None = None  # None: x_scale's dtype


def _dequantize_rel(attrs: DequantizeLinearAttrs, types, values) -> TensorType:
    x, scale = tensor(types[0], "x"), tensor(types[1], "x_scale")
    zp = types[2] if len(types) > 2 else None
    check_dtype(x, QUANT_TYPES + ("int32",), "x")
    check_dtype(scale, SCALE_TYPES + ("float8_e8m0fnu",), "x_scale")
    _param_rel(x, scale, attrs.axis, attrs.block_size, "x_scale")
    if zp is not None:
        zp = tensor(zp, "x_zero_point")
        if zp.dtype != x.dtype:
            raise TypeInferenceError(f"x_zero_point dtype {zp.dtype} differs from x's {x.dtype}")
        _check_same_shape(zp, scale, "x")
    out = attrs.output_dtype or scale.dtype
    if out not in SCALE_TYPES:
        raise TypeInferenceError(f"output dtype {out} is not one of {', '.join(SCALE_TYPES)} "
                                 f"(set output_dtype when x_scale is float8_e8m0fnu)")
    return TensorType(x.shape, out)


def _dequantize_ref(attrs: DequantizeLinearAttrs, x, scale, zp=None):
    q = as_real(x)
    if zp is not None:
        q = q - as_real(expand_param(zp, x.shape, attrs.axis, attrs.block_size))
    s = expand_param(scale, x.shape, attrs.axis, attrs.block_size).astype(np.float32)
    out = dt.to_numpy(attrs.output_dtype) if attrs.output_dtype else scale.dtype
    return np.asarray(q.astype(np.float32) * s).astype(out)


dequantize_linear = define_op(
    "quant.dequantize_linear", pattern=INJECTIVE, inputs=(2, 3), attrs=DequantizeLinearAttrs,
    infer=_dequantize_rel, ref=_dequantize_ref,
    doc="y = (x - x_zero_point) * x_scale, per tensor, axis or block; product in float32.")


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear


def _dynamic_quantize_rel(attrs, types, values) -> TupleType:
    x = tensor(types[0], "x")
    check_dtype(x, ("float32",), "x")
    return TupleType((TensorType(x.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")))


def _dynamic_quantize_ref(attrs, x):
    """Scale and zero point map [min(0, min x), max(0, max x)] onto [0, 255]; an all-zero x
    gets scale 1 (as in ONNX Runtime)."""
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    scale = (hi - lo) / np.float32(255) if hi != lo else np.float32(1)
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    y = quantize_values(np.rint(x / scale) + zp, "uint8")
    return y, np.array(scale, np.float32), np.array(zp, np.uint8)


dynamic_quantize_linear = define_op(
    "quant.dynamic_quantize_linear", pattern=OPAQUE, infer=_dynamic_quantize_rel,
    ref=_dynamic_quantize_ref,
    doc="Quantize float32 to uint8 with a scale and zero point computed from x's range; "
        "returns (y, y_scale, y_zero_point).")


# ---------------------------------------------------------------------------------------------
# QLinearMatMul


def _requantize(acc: np.ndarray, multiplier: np.ndarray, zp: np.ndarray) -> np.ndarray:
    """Accumulator * (in scales / out scale) + out zero point, saturated to zp's dtype."""
    return quantize_values(acc * multiplier + as_real(zp), dt.from_numpy(zp.dtype))


def _check_pair(q: TensorType, zp: TensorType, what: str) -> None:
    check_dtype(q, QUANT_INTS[4:6] + QUANT_FLOATS[:4], what)
    if zp.dtype != q.dtype:
        raise TypeInferenceError(f"{what}_zero_point dtype {zp.dtype} differs from {what}'s {q.dtype}")


def _qlinear_matmul_rel(attrs, types, values) -> TensorType:
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (tensor(t) for t in types)
    _check_pair(a, a_zp, "a")
    _check_pair(b, b_zp, "b")
    check_dtype(y_zp, QUANT_INTS[4:6] + QUANT_FLOATS[:4], "y_zero_point")
    for s in (a_s, b_s, y_s):
        check_dtype(s, SCALE_TYPES, "scale")
    if a.shape is None or b.shape is None:
        return TensorType(None, y_zp.dtype)
    return TensorType(matmul_shape(a.shape, b.shape), y_zp.dtype)


def matmul_shape(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """numpy.matmul's result shape (1-D operands are promoted, then their dim dropped)."""
    if not a or not b:
        raise TypeInferenceError("matmul operands must have rank >= 1")
    a2, b2 = ((1,) + a if len(a) == 1 else a), (b + (1,) if len(b) == 1 else b)
    k1, k2 = a2[-1], b2[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        raise TypeInferenceError(f"matmul inner dims differ: {a} @ {b}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _row_param(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A 1-D per-row parameter of `a` ([M] for an [.., M, K] input) as a column [M, 1]."""
    return p.reshape(-1, 1) if p.ndim == 1 and p.size > 1 and a.ndim >= 2 else p


def _qlinear_matmul_ref(attrs, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
    acc = np.matmul(as_real(a) - as_real(_row_param(a_zp, a)), as_real(b) - as_real(b_zp))
    mult = (_row_param(a_s, a).astype(np.float64) * b_s.astype(np.float64)) / y_s.astype(np.float64)
    return _requantize(acc, mult, y_zp)


qlinear_matmul = define_op(
    "quant.qlinear_matmul", pattern=OUT_EWISE_FUSABLE, inputs=8, infer=_qlinear_matmul_rel,
    ref=_qlinear_matmul_ref,
    doc="numpy.matmul of quantized a and b (integer accumulation), requantized to y's scale/zero point.")


# ---------------------------------------------------------------------------------------------
# QLinearConv


def conv_geometry(attrs: ConvAttrs, spatial: tuple[Dim, ...], kernel: tuple[Dim, ...]):
    """Per spatial axis: (output dim, pad before, pad after); unknown ones are ANY."""
    n = len(spatial)
    strides, dil = attrs.strides or (1,) * n, attrs.dilations or (1,) * n
    pads = attrs.pads or (0,) * (2 * n)
    if len(strides) != n or len(dil) != n or len(pads) != 2 * n:
        raise TypeInferenceError(f"strides/dilations/pads do not match {n} spatial dims")
    out = []
    for i, (d, k, s, r) in enumerate(zip(spatial, kernel, strides, dil)):
        if not (isinstance(d, int) and isinstance(k, int)):
            out.append((ANY, ANY, ANY))
            continue
        span = (k - 1) * r + 1
        if attrs.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-d // s)
            total = max(0, (o - 1) * s + span - d)
            small, big = total // 2, total - total // 2
            lo, hi = (small, big) if attrs.auto_pad == "SAME_UPPER" else (big, small)
        elif attrs.auto_pad == "VALID":
            lo = hi = 0
        elif attrs.auto_pad == "NOTSET":
            lo, hi = pads[i], pads[i + n]
        else:
            raise TypeInferenceError(f"unknown auto_pad {attrs.auto_pad!r}")
        o = (d + lo + hi - span) // s + 1
        if o < 1:
            raise TypeInferenceError(f"kernel {kernel} does not fit input spatial dims {spatial}")
        out.append((o, lo, hi))
    return out


def _qlinear_conv_rel(attrs: ConvAttrs, types, values) -> TensorType:
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = (tensor(t) for t in types[:8])
    _check_pair(x, x_zp, "x")
    _check_pair(w, w_zp, "w")
    check_dtype(y_zp, ("int8", "uint8"), "y_zero_point")
    for s, what in ((x_s, "x_scale"), (w_s, "w_scale"), (y_s, "y_scale")):
        check_dtype(s, ("float32",), what)
    if len(types) > 8 and types[8] is not None:
        check_dtype(tensor(types[8], "B"), ("int32",), "B")
    if x.shape is None or w.shape is None:
        return TensorType(None, y_zp.dtype)
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise TypeInferenceError(f"x {x.shape} and w {w.shape} must be (N, C, ...) and (M, C/group, ...)")
    c, cg = x.shape[1], w.shape[1]
    if isinstance(c, int) and isinstance(cg, int) and c != cg * attrs.group:
        raise TypeInferenceError(f"x has {c} channels; w expects {cg} x group {attrs.group}")
    kernel = attrs.kernel_shape or w.shape[2:]
    geo = conv_geometry(attrs, x.shape[2:], tuple(kernel))
    return TensorType((x.shape[0], w.shape[0]) + tuple(o for o, _, _ in geo), y_zp.dtype)


def _qlinear_conv_ref(attrs: ConvAttrs, x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, bias=None):
    per_m = (-1,) + (1,) * (w.ndim - 1)
    wq = as_real(w) - as_real(w_zp.reshape(per_m) if w_zp.size > 1 else w_zp.reshape(()))
    acc = conv_nd(as_real(x) - as_real(x_zp.reshape(())), wq, Window.of(attrs, w.shape[2:]), attrs.group)
    per_c = (1, -1) + (1,) * (x.ndim - 2)
    if bias is not None:
        acc = acc + bias.astype(np.int64).reshape(per_c)
    ws = w_s.astype(np.float64).reshape(per_c if w_s.size > 1 else ())
    return _requantize(acc, x_s.astype(np.float64) * ws / y_s.astype(np.float64), y_zp)


qlinear_conv = define_op(
    "quant.qlinear_conv", pattern=OUT_EWISE_FUSABLE, inputs=(8, 9), attrs=ConvAttrs,
    infer=_qlinear_conv_rel, ref=_qlinear_conv_ref,
    doc="Convolution of quantized x and w (per-tensor or per-output-channel w) with integer "
        "accumulation and int32 bias, requantized to y's scale and zero point.")
