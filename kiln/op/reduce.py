"""Reductions, arg-reductions, cumulative scans, the softmax family and the classification losses.

Every op follows the latest ONNX opset: reduction axes are an optional int64 input (absent or
empty means all axes, or none with `noop_with_empty_axes`); the frontend turns older `axes`
attributes into a Constant input. 16-bit floats are computed at float32 and rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.registry import COMM_REDUCE, OPAQUE, define_op
from kiln.op.typerel import check_dtype, norm_axis, tensor, unknown_shape

INDEX_DTYPES = ("int32", "int64")


def wide(x: np.ndarray) -> np.ndarray:
    """x with 16-bit floats widened to float32, so accumulations do not lose precision."""
    return x.astype(np.float32) if dt.from_numpy(x.dtype) in ("float16", "bfloat16") else x


def unify_dim(a: Dim, b: Dim, what: str) -> Dim:
    """The dim two equal-sized positions share; an error only when both are known and differ."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise TypeInferenceError(f"{what}: {a} != {b}")
    if a == ANY or (isinstance(b, int) and not isinstance(a, int)):
        return b
    return a


# ---------------------------------------------------------------------------------------------
# reductions


@dataclass(frozen=True)
class ReduceAttrs:
    keepdims: int = 1
    noop_with_empty_axes: int = 0


def reduced_axes(attrs: ReduceAttrs, rank: int, axes: np.ndarray | None) -> tuple[int, ...]:
    """Sorted axes to reduce: all when `axes` is absent or empty (none with noop_with_empty_axes)."""
    if axes is None or axes.size == 0:
        return () if attrs.noop_with_empty_axes else tuple(range(rank))
    norm = [norm_axis(int(a), rank, "axes value") for a in axes.reshape(-1)]
    if len(set(norm)) != len(norm):
        raise TypeInferenceError(f"axes {axes.tolist()} name an axis twice")
    return tuple(sorted(norm))


def reduced_shape(shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: int) -> tuple[Dim, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


def _reduce_rel(allowed: tuple[str, ...]):
    def rel(attrs, types, values) -> TensorType:
        x = tensor(types[0], "data")
        check_dtype(x, allowed, "data")
        axes_t, axes = (types[1], values[1]) if len(types) > 1 else (None, None)
        if axes_t is not None:
            axes_t = tensor(axes_t, "axes")
            check_dtype(axes_t, INDEX_DTYPES, "axes")
            if axes_t.ndim not in (None, 1):
                raise TypeInferenceError(f"axes must be 1-D, got {axes_t}")
            if axes is None and axes_t.shape == (0,):
                axes = np.zeros(0, np.int64)
        if axes_t is not None and axes is None:
            return TensorType(_shape_for_runtime_axes(attrs, x, axes_t), x.dtype)
        if x.shape is None:
            all_axes = (axes is None or axes.size == 0) and not attrs.noop_with_empty_axes
            return TensorType(() if all_axes and not attrs.keepdims else None, x.dtype)
        axes_ = reduced_axes(attrs, len(x.shape), axes)
        return TensorType(reduced_shape(x.shape, axes_, attrs.keepdims), x.dtype)

    return rel


def _shape_for_runtime_axes(attrs: ReduceAttrs, x: TensorType, axes_t: TensorType):
    """Axes known only at run time: with keepdims the rank (and every unit dim) stays; else the rank
    drops by len(axes) when that is known."""
    if x.shape is None:
        return None
    if attrs.keepdims:
        return tuple(1 if d == 1 else ANY for d in x.shape)
    n = axes_t.shape[0] if axes_t.shape is not None else ANY
    return unknown_shape(x.ndim - n) if isinstance(n, int) and n > 0 else None


def _count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _extreme(dtype: np.dtype, largest: bool):
    """The identity of max (largest=False) or min (largest=True): what an empty set reduces to."""
    if dtype == np.bool_:
        return largest
    if dtype.kind == "f":
        return np.inf if largest else -np.inf
    info = np.iinfo(dtype)
    return info.max if largest else info.min


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """log(sum(exp(x))) shifted by the max, so large inputs do not overflow."""
    x = x.astype(np.float64) if x.dtype.kind != "f" else x
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out.reshape(reduced_shape(x.shape, axes, keepdims))


_REDUCERS = {
    "sum": lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd),
    "mean": lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd) / _count(x.shape, ax),
    "max": lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd, initial=_extreme(x.dtype, False)),
    "min": lambda x, ax, kd: np.min(x, axis=ax, keepdims=kd, initial=_extreme(x.dtype, True)),
    "prod": lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd),
    "l1": lambda x, ax, kd: np.sum(np.abs(x), axis=ax, keepdims=kd),
    "l2": lambda x, ax, kd: np.sqrt(np.sum(np.square(x), axis=ax, keepdims=kd)),
    "log_sum": lambda x, ax, kd: np.log(np.sum(x, axis=ax, keepdims=kd)),
    "log_sum_exp": _log_sum_exp,
    "sum_square": lambda x, ax, kd: np.sum(np.square(x), axis=ax, keepdims=kd),
}

_REDUCE_DOCS = {
    "sum": "Sum over `axes` (empty set: 0).",
    "mean": "Arithmetic mean over `axes` (empty set: NaN).",
    "max": "Maximum over `axes` (empty set: -inf or the dtype's minimum; bool: False).",
    "min": "Minimum over `axes` (empty set: +inf or the dtype's maximum; bool: True).",
    "prod": "Product over `axes` (empty set: 1).",
    "l1": "Sum of absolute values over `axes`.",
    "l2": "Euclidean norm over `axes`.",
    "log_sum": "log(sum(x)) over `axes` (empty set: -inf).",
    "log_sum_exp": "log(sum(exp(x))) over `axes`, computed stably (empty set: -inf).",
    "sum_square": "Sum of squares over `axes`.",
}


def _reduce_ref(fn):
    def ref(attrs, x, axes=None):
        ax = reduced_axes(attrs, x.ndim, axes)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # empty sets: log 0, 0/0
            return np.asarray(fn(wide(x), ax, bool(attrs.keepdims))).astype(x.dtype, copy=False)

    return ref


def _define_reductions() -> dict:
    ops = {}
    for kind, fn in _REDUCERS.items():
        allowed = dt.NUMERIC + ("bool",) if kind in ("max", "min") else dt.NUMERIC
        ops[kind] = define_op(f"reduce.{kind}", pattern=COMM_REDUCE, attrs=ReduceAttrs, inputs=(1, 2),
                              infer=_reduce_rel(allowed), ref=_reduce_ref(fn), doc=_REDUCE_DOCS[kind])
    return ops


REDUCTIONS = _define_reductions()


# ---------------------------------------------------------------------------------------------
# arg-reductions


@dataclass(frozen=True)
class ArgReduceAttrs:
    axis: int = 0
    keepdims: int = 1
    select_last_index: int = 0


def _arg_rel(attrs, types, values) -> TensorType:
    x = tensor(types[0], "data")
    check_dtype(x, dt.NUMERIC, "data")
    if x.shape is None:
        return TensorType(None, "int64")
    if not x.shape:
        raise TypeInferenceError("data must have rank >= 1")
    axis = norm_axis(attrs.axis, len(x.shape))
    return TensorType(reduced_shape(x.shape, (axis,), attrs.keepdims), "int64")


def _arg_ref(find):
    def ref(attrs, x):
        axis = attrs.axis % x.ndim
        x = wide(x)
        if attrs.select_last_index:
            idx = x.shape[axis] - 1 - find(np.flip(x, axis), axis=axis)
        else:
            idx = find(x, axis=axis)
        return (np.expand_dims(idx, axis) if attrs.keepdims else idx).astype(np.int64)

    return ref


arg_max = define_op("reduce.arg_max", pattern=COMM_REDUCE, attrs=ArgReduceAttrs, infer=_arg_rel,
                    ref=_arg_ref(np.argmax), doc="int64 index of the maximum along `axis` (ties: first, "
                                                 "or last with select_last_index).")
arg_min = define_op("reduce.arg_min", pattern=COMM_REDUCE, attrs=ArgReduceAttrs, infer=_arg_rel,
                    ref=_arg_ref(np.argmin), doc="int64 index of the minimum along `axis`.")


# ---------------------------------------------------------------------------------------------
# cumulative scans


@dataclass(frozen=True)
class CumAttrs:
    exclusive: int = 0
    reverse: int = 0


def _cum_rel(attrs, types, values) -> TensorType:
    x, axis_t = tensor(types[0], "x"), tensor(types[1], "axis")
    check_dtype(x, dt.NUMERIC, "x")
    check_dtype(axis_t, INDEX_DTYPES, "axis")
    if axis_t.shape is not None and axis_t.shape not in ((), (1,)):
        raise TypeInferenceError(f"axis must be a scalar, got {axis_t}")
    if x.ndim == 0:
        raise TypeInferenceError("x must have rank >= 1")
    if values[1] is not None:
        norm_axis(int(values[1].reshape(-1)[0]), x.ndim)
    return x


def _cum_ref(ufunc):
    def ref(attrs, x, axis):
        ax = norm_axis(int(axis.reshape(-1)[0]), x.ndim)
        y = np.moveaxis(wide(x), ax, 0)
        if attrs.reverse:
            y = y[::-1]
        out = ufunc.accumulate(y, axis=0, dtype=y.dtype)
        if attrs.exclusive:
            out = np.concatenate([np.full_like(out[:1], ufunc.identity), out[:-1]])[:len(out)]
        if attrs.reverse:
            out = out[::-1]
        return np.moveaxis(out, 0, ax).astype(x.dtype)

    return ref


cum_sum = define_op("reduce.cum_sum", pattern=OPAQUE, attrs=CumAttrs, inputs=2, infer=_cum_rel,
                    ref=_cum_ref(np.add), doc="Running sum along the scalar `axis` input.")
cum_prod = define_op("reduce.cum_prod", pattern=OPAQUE, attrs=CumAttrs, inputs=2, infer=_cum_rel,
                     ref=_cum_ref(np.multiply), doc="Running product along the scalar `axis` input.")


# ---------------------------------------------------------------------------------------------
# softmax family


@dataclass(frozen=True)
class SoftmaxAttrs:
    """`coerce_2d=1` is the opset < 13 meaning: normalize over all axes from `axis` on, jointly."""

    axis: int = -1
    coerce_2d: int = 0


def softmax_axes(attrs: SoftmaxAttrs, rank: int) -> tuple[int, ...]:
    axis = norm_axis(attrs.axis, rank)
    return tuple(range(axis, rank)) if attrs.coerce_2d else (axis,)


def _softmax_rel(attrs, types, values) -> TensorType:
    x = tensor(types[0], "input")
    check_dtype(x, dt.FLOATS, "input")
    if x.ndim == 0:
        raise TypeInferenceError("input must have rank >= 1")
    if x.ndim is not None:
        norm_axis(attrs.axis, x.ndim)
    return x


def _softmax_ref(attrs, x):
    y = wide(x)
    axes = softmax_axes(attrs, x.ndim)
    e = np.exp(y - np.max(y, axis=axes, keepdims=True))
    return (e / np.sum(e, axis=axes, keepdims=True)).astype(x.dtype)


def log_softmax_ref(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    y = wide(x)
    shifted = y - np.max(y, axis=axes, keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axes, keepdims=True))).astype(x.dtype)


def _hardmax_ref(attrs, x):
    """One at the first maximum of each slice over the softmax axes, zero elsewhere."""
    axes = softmax_axes(attrs, x.ndim)
    ends = tuple(range(x.ndim - len(axes), x.ndim))
    moved = np.moveaxis(wide(x), axes, ends)
    flat = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    if flat.size == 0:
        return np.zeros_like(x)
    hot = np.arange(flat.shape[-1]) == np.argmax(flat, axis=-1)[..., None]
    return np.moveaxis(hot.reshape(moved.shape), ends, axes).astype(x.dtype)


softmax = define_op("reduce.softmax", pattern=OPAQUE, attrs=SoftmaxAttrs, infer=_softmax_rel,
                    ref=_softmax_ref, doc="exp(x) / sum(exp(x)) along `axis`.")
log_softmax = define_op("reduce.log_softmax", pattern=OPAQUE, attrs=SoftmaxAttrs, infer=_softmax_rel,
                        ref=lambda a, x: log_softmax_ref(x, softmax_axes(a, x.ndim)),
                        doc="x - log(sum(exp(x))) along `axis`, computed stably.")
hardmax = define_op("reduce.hardmax", pattern=OPAQUE, attrs=SoftmaxAttrs, infer=_softmax_rel,
                    ref=_hardmax_ref, doc="One-hot of the first maximum along `axis`.")


# ---------------------------------------------------------------------------------------------
# losses


@dataclass(frozen=True)
class LossAttrs:
    ignore_index: int | None = None
    reduction: str = "mean"


def _loss_type(attrs: LossAttrs, types: list) -> TensorType:
    """Type of the loss: checks (N, C, d1..dk) scores against (N, d1..dk) labels and (C,) weights."""
    if attrs.reduction not in ("none", "sum", "mean"):
        raise TypeInferenceError(f"reduction must be none, sum or mean, got {attrs.reduction!r}")
    x, t = tensor(types[0], "input"), tensor(types[1], "target")
    check_dtype(x, dt.FLOATS, "input")
    check_dtype(t, INDEX_DTYPES, "target")
    if x.ndim is not None and x.ndim < 2:
        raise TypeInferenceError(f"input must be (N, C, d1, ..., dk), got {x}")
    if len(types) > 2 and types[2] is not None:
        _check_class_weights(tensor(types[2], "weight"), x)
    per_sample = t.shape if x.shape is None else (x.shape[0],) + x.shape[2:]
    if x.shape is not None and t.shape is not None:
        if len(t.shape) != len(per_sample):
            raise TypeInferenceError(f"target {t} must have rank {len(per_sample)} for input {x}")
        per_sample = tuple(unify_dim(a, b, f"target dim {i} vs input")
                           for i, (a, b) in enumerate(zip(per_sample, t.shape)))
    return TensorType(per_sample if attrs.reduction == "none" else (), x.dtype)


def _check_class_weights(w: TensorType, x: TensorType) -> None:
    check_dtype(w, (x.dtype,), "weight")
    if w.ndim not in (None, 1):
        raise TypeInferenceError(f"weight must be 1-D (C,), got {w}")
    if w.shape is not None and x.shape is not None:
        unify_dim(w.shape[0], x.shape[1], "weight length vs classes C")


def _nll(attrs: LossAttrs, logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    """Weighted negative log-likelihood; ignored labels weigh 0 and are left out of the mean."""
    ignored = target == attrs.ignore_index if attrs.ignore_index is not None else np.zeros(target.shape, bool)
    label = np.where(ignored, 0, target).astype(np.int64)
    picked = np.take_along_axis(logp, label[:, None], axis=1)[:, 0]
    w = np.ones(label.shape, logp.dtype) if weight is None else wide(weight)[label]
    w = np.where(ignored, 0, w)
    loss = -picked * w
    if attrs.reduction == "sum":
        return np.sum(loss)
    if attrs.reduction == "mean":
        with np.errstate(divide="ignore", invalid="ignore"):  # every label ignored: NaN, as PyTorch
            return np.sum(loss) / np.sum(w)
    return loss


def _nll_ref(attrs, x, target, weight=None):
    return np.asarray(_nll(attrs, wide(x), target, weight)).astype(x.dtype)


def _sce_rel(attrs, types, values) -> TupleType:
    return TupleType((_loss_type(attrs, types), tensor(types[0])))


def _sce_ref(attrs, scores, labels, weights=None):
    logp = log_softmax_ref(wide(scores), (1,))
    return np.asarray(_nll(attrs, logp, labels, weights)).astype(scores.dtype), logp.astype(scores.dtype)


negative_log_likelihood_loss = define_op(
    "reduce.negative_log_likelihood_loss", pattern=OPAQUE, attrs=LossAttrs, inputs=(2, 3),
    infer=lambda a, t, v: _loss_type(a, t), ref=_nll_ref,
    doc="-input[n, target[n, ...], ...] * weight[target], reduced by `reduction`.")
softmax_cross_entropy_loss = define_op(
    "reduce.softmax_cross_entropy_loss", pattern=OPAQUE, attrs=LossAttrs, inputs=(2, 3),
    infer=_sce_rel, ref=_sce_ref,
    doc="NLL of log_softmax(scores, axis=1); returns (loss, log_prob).")
