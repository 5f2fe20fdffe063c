"""Shape queries and tensors built from shapes or indices: shape, size, constant_of_shape, range,
eye_like, one_hot, trilu."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType
from kiln.op.registry import INJECTIVE, OPAQUE, define_op
from kiln.op.shape_rel import I64, check_rank, index_input, index_vector, int_values
from kiln.op.typerel import check_dtype, norm_axis, same_dtype, shape_product, tensor, unknown_shape


@dataclass(frozen=True)
class ShapeAttrs:
    start: int = 0
    end: int | None = None


def _shape_rel(attrs, types, values):
    x = tensor(types[0])
    n = ANY if x.shape is None else len(range(len(x.shape))[attrs.start:attrs.end])
    return TensorType((n,), "int64")


shape = define_op("tensor.shape", pattern=OPAQUE, attrs=ShapeAttrs, infer=_shape_rel,
                  ref=lambda a, x: np.array(x.shape[a.start:a.end], I64),
                  doc="The input's dims [start:end] as an int64 vector (bounds clamp like Python slices).")

size = define_op("tensor.size", pattern=OPAQUE, infer=lambda a, t, v: TensorType((), "int64"),
                 ref=lambda a, x: np.array(x.size, I64), doc="Number of elements, as an int64 scalar.")


@dataclass(frozen=True)
class ConstantOfShapeAttrs:
    value: np.ndarray | None = None  # one element; None is float32 0


def _fill_value(attrs) -> np.ndarray:
    return np.zeros((), np.float32) if attrs.value is None else attrs.value.reshape(-1)[0:1].reshape(())


def _constant_of_shape_rel(attrs, types, values):
    if attrs.value is not None and attrs.value.size != 1:
        raise TypeInferenceError(f"value must hold one element, got shape {attrs.value.shape}")
    n = index_vector(types[0], "shape")
    dims = int_values(values[0])
    if dims is not None and any(d < 0 for d in dims):
        raise TypeInferenceError(f"shape {dims} has a negative dim")
    dtype = dt.from_numpy(_fill_value(attrs).dtype)
    return TensorType(dims if dims is not None else unknown_shape(n), dtype)


constant_of_shape = define_op(
    "tensor.constant_of_shape", pattern=INJECTIVE, attrs=ConstantOfShapeAttrs, infer=_constant_of_shape_rel,
    ref=lambda a, s: np.full(int_values(s), _fill_value(a)), doc="A tensor of the given shape filled with `value`.")


@dataclass(frozen=True)
class RangeAttrs:
    stash_type: str = "float32"


_RANGE_DTYPES = ("int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
_LOW_PRECISION = ("float16", "bfloat16")


def _range_compute_dtype(attrs, dtype: str) -> np.dtype:
    """Low-precision floats count in `stash_type`; every other type in itself."""
    return dt.to_numpy(attrs.stash_type if dtype in _LOW_PRECISION else dtype)


def _range_count(start, limit, delta) -> int:
    """max(ceil((limit - start) / delta), 0), exact for integers."""
    if delta == 0:
        raise TypeInferenceError("delta may not be 0")
    if isinstance(start, (int, np.integer)):
        return max(-((int(start) - int(limit)) // int(delta)), 0)
    return max(math.ceil((limit - start) / delta), 0)


def _range_args(attrs, start, limit, delta):
    cdt = _range_compute_dtype(attrs, dt.from_numpy(start.dtype))
    return tuple(np.asarray(v).astype(cdt).reshape(()).item() for v in (start, limit, delta))


def _range_rel(attrs, types, values):
    ts = [tensor(t, w) for t, w in zip(types, ("start", "limit", "delta"))]
    dtype = same_dtype(ts, "start, limit and delta")
    check_dtype(ts[0], _RANGE_DTYPES, "start")
    if attrs.stash_type not in ("float32", "float64"):
        raise TypeInferenceError(f"stash_type must be float32 or float64, got {attrs.stash_type}")
    for t, w in zip(ts, ("start", "limit", "delta")):
        n = shape_product(t.shape) if t.shape is not None else 1
        if isinstance(n, int) and n != 1:
            raise TypeInferenceError(f"{w} must be a scalar, got shape {t.shape}")
    if any(v is None for v in values):
        return TensorType((ANY,), dtype)
    return TensorType((_range_count(*_range_args(attrs, *values)),), dtype)


def _range_ref(attrs, start, limit, delta):
    s, lim, d = _range_args(attrs, start, limit, delta)
    n = _range_count(s, lim, d)
    cdt = _range_compute_dtype(attrs, dt.from_numpy(start.dtype))
    return (np.asarray(s, cdt) + np.arange(n, dtype=cdt) * np.asarray(d, cdt)).astype(start.dtype)


range_ = define_op("tensor.range", pattern=INJECTIVE, inputs=3, attrs=RangeAttrs, infer=_range_rel,
                   ref=_range_ref, doc="start + i * delta for i < ceil((limit - start) / delta).")


@dataclass(frozen=True)
class EyeLikeAttrs:
    dtype: str | None = None
    k: int = 0


def _eye_like_rel(attrs, types, values):
    x = tensor(types[0])
    if x.shape is not None and len(x.shape) != 2:
        raise TypeInferenceError(f"input must be 2-D, got shape {x.shape}")
    return TensorType(unknown_shape(2) if x.shape is None else x.shape, attrs.dtype or x.dtype)


def _eye_like_ref(attrs, x):
    return np.eye(*x.shape, k=attrs.k, dtype=dt.to_numpy(attrs.dtype) if attrs.dtype else x.dtype)


eye_like = define_op("tensor.eye_like", pattern=INJECTIVE, attrs=EyeLikeAttrs, infer=_eye_like_rel,
                     ref=_eye_like_ref, doc="Ones on diagonal k of a matrix shaped like the input, zeros elsewhere.")


@dataclass(frozen=True)
class OneHotAttrs:
    axis: int = -1


def _one_hot_rel(attrs, types, values):
    idx = index_input(types[0], "indices", dt.NUMERIC)
    depth = index_input(types[1], "depth", dt.NUMERIC)
    vals = tensor(types[2], "values")
    if vals.shape is not None and (len(vals.shape) != 1 or vals.shape[0] not in (2, ANY)):
        raise TypeInferenceError(f"values must be [off, on], got shape {vals.shape}")
    if depth.shape is not None and shape_product(depth.shape) not in (1, ANY):
        raise TypeInferenceError(f"depth must hold one value, got shape {depth.shape}")
    if idx.shape is None:
        return TensorType(None, vals.dtype)
    axis = norm_axis(attrs.axis, len(idx.shape) + 1)
    d: Dim = ANY if values[1] is None else int(np.asarray(values[1]).reshape(-1)[0])
    if isinstance(d, int) and d < 1:
        raise TypeInferenceError(f"depth must be >= 1, got {d}")
    return TensorType(idx.shape[:axis] + (d,) + idx.shape[axis:], vals.dtype)


def _one_hot_ref(attrs, indices, depth, values):
    depth = int(depth.reshape(-1)[0])
    idx = indices.astype(I64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = idx[..., None] == np.arange(depth)
    out = np.where(hot, values[1], values[0]).astype(values.dtype)
    return np.moveaxis(out, -1, attrs.axis % out.ndim)


one_hot = define_op("tensor.one_hot", pattern=INJECTIVE, inputs=3, attrs=OneHotAttrs, infer=_one_hot_rel,
                    ref=_one_hot_ref,
                    doc="values[1] where the new `axis` equals the index, values[0] elsewhere (out-of-range: all off).")


@dataclass(frozen=True)
class TriluAttrs:
    upper: int = 1


def _trilu_rel(attrs, types, values):
    x = tensor(types[0])
    check_rank(x, 2)
    if len(types) > 1 and types[1] is not None:
        k = index_input(types[1], "k", ("int64",))
        if k.shape is not None and shape_product(k.shape) not in (1, ANY):
            raise TypeInferenceError(f"k must be a scalar, got shape {k.shape}")
    return x


def _trilu_ref(attrs, x, k=None):
    k = 0 if k is None else int(k.reshape(-1)[0])
    return np.triu(x, k) if attrs.upper else np.tril(x, k)


trilu = define_op("tensor.trilu", pattern=INJECTIVE, inputs=(1, 2), attrs=TriluAttrs, infer=_trilu_rel,
                  ref=_trilu_ref, doc="Keep the upper (or lower) triangle from diagonal k of the last two dims.")
