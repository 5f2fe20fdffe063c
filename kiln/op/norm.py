"""Normalizations: batch, instance, layer, group, RMS, Lp, mean-variance and LRN.

Most ops compute in one wide float (at least float32, the input's dtype if wider, and the
stash_type if wider still) and round to the input dtype once at the end, as onnxruntime's
kernels do. GroupNormalization follows its ONNX function body instead, as onnxruntime does too:
statistics exactly in stash_type (variance as E[x^2] - E[x]^2), the normalized value rounded to
the input dtype, then scale and bias in that dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import broadcast_shapes, check_dtype, norm_axis, tensor

FLOATS = dt.FLOATS


def _wide(x: np.ndarray, stash: str = "float32") -> np.ndarray:
    """x in the dtype the op computes in: the wider of x's dtype and stash (at least float32)."""
    s = dt.to_numpy(stash)
    return x.astype(x.dtype if x.dtype.itemsize > max(s.itemsize, 4) else np.promote_types(s, np.float32))


def _channel_param(t: TensorType | None, channels: Dim, what: str) -> None:
    """A per-channel parameter must be 1-D of the channel count (when both are known)."""
    if t is None or t.shape is None:
        return
    if len(t.shape) != 1 or (isinstance(t.shape[0], int) and isinstance(channels, int)
                             and t.shape[0] != channels):
        raise TypeInferenceError(f"{what} must have shape ({channels},), got {t}")


def _float_input(t, what: str = "X", rank_min: int = 0) -> TensorType:
    x = tensor(t, what)
    check_dtype(x, FLOATS, what)
    if x.shape is not None and len(x.shape) < rank_min:
        raise TypeInferenceError(f"{what} must have rank >= {rank_min}, got {x}")
    return x


def _channels(x: TensorType) -> Dim:
    return x.shape[1] if x.shape is not None else ANY


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape((-1,) + (1,) * (ndim - 2))


# ---------------------------------------------------------------------------------------------
# batch normalization


@dataclass(frozen=True)
class BatchNormAttrs:
    epsilon: float = 1e-5
    momentum: float = 0.9
    training_mode: int = 0


def _batch_norm_rel(attrs, types, values):
    x = _float_input(types[0], "X", 2)
    c = _channels(x)
    for t, what in zip(types[1:], ("scale", "B", "input_mean", "input_var")):
        check_dtype(tensor(t, what), FLOATS, what)
        _channel_param(t, c, what)
    if types[3].dtype != types[4].dtype:
        raise TypeInferenceError(f"input_mean {types[3]} and input_var {types[4]} must share a dtype")
    if not attrs.training_mode:
        return x
    return TupleType((x, types[3], types[4]))


def _batch_norm_ref(attrs, x, scale, b, mean, var):
    """Inference normalizes by the running statistics; training by the batch's own (biased) ones,
    and also returns the running statistics updated with `momentum`."""
    xw = _wide(x)
    stat_axes = (0,) + tuple(range(2, x.ndim))
    if attrs.training_mode:
        m, v = xw.mean(axis=stat_axes), xw.var(axis=stat_axes)
    else:
        m, v = _wide(mean), _wide(var)
    inv = 1.0 / np.sqrt(v + attrs.epsilon)
    y = (xw - _per_channel(m, x.ndim)) * _per_channel(inv * _wide(scale), x.ndim) + _per_channel(_wide(b), x.ndim)
    y = y.astype(x.dtype)
    if not attrs.training_mode:
        return y
    mom = attrs.momentum
    run_m = (_wide(mean) * mom + m * (1 - mom)).astype(mean.dtype)
    run_v = (_wide(var) * mom + v * (1 - mom)).astype(var.dtype)
    return y, run_m, run_v


batch_normalization = define_op(
    "nn.batch_normalization", pattern=OPAQUE, inputs=5, attrs=BatchNormAttrs, infer=_batch_norm_rel,
    ref=_batch_norm_ref,
    doc="Per-channel (axis 1) normalization; training_mode=1 returns (Y, running_mean, running_var).")


# ---------------------------------------------------------------------------------------------
# instance and group normalization


@dataclass(frozen=True)
class EpsilonAttrs:
    epsilon: float = 1e-5


def _instance_norm_rel(attrs, types, values):
    x = _float_input(types[0], "input", 2)
    for t, what in zip(types[1:], ("scale", "B")):
        check_dtype(tensor(t, what), (x.dtype,), what)
        _channel_param(t, _channels(x), what)
    return x


def _standardize(xw: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) over axes, with biased variance."""
    mean = xw.mean(axis=axes, keepdims=True)
    d = xw - mean
    return d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)


def _instance_norm_ref(attrs, x, scale, b):
    y = _standardize(_wide(x), tuple(range(2, x.ndim)), attrs.epsilon)
    return (y * _per_channel(_wide(scale), x.ndim) + _per_channel(_wide(b), x.ndim)).astype(x.dtype)


instance_normalization = define_op(
    "nn.instance_normalization", pattern=OPAQUE, inputs=3, attrs=EpsilonAttrs, infer=_instance_norm_rel,
    ref=_instance_norm_ref, doc="Normalize each (sample, channel) over its spatial axes, then scale + B.")


@dataclass(frozen=True)
class GroupNormAttrs:
    num_groups: int
    epsilon: float = 1e-5
    stash_type: str = "float32"


def _group_norm_rel(attrs, types, values):
    x = _float_input(types[0], "X", 2)
    c = _channels(x)
    if attrs.num_groups < 1 or (isinstance(c, int) and c % attrs.num_groups):
        raise TypeInferenceError(f"{c} channels cannot be split into num_groups={attrs.num_groups}")
    check_dtype(TensorType((), attrs.stash_type), FLOATS, "stash_type")
    for t, what in zip(types[1:], ("scale", "bias")):
        check_dtype(tensor(t, what), (x.dtype,), what)
        _channel_param(t, c, what)
    return x


def _group_norm_ref(attrs, x, scale, bias):
    g = x.reshape(x.shape[0], attrs.num_groups, -1).astype(dt.to_numpy(attrs.stash_type))
    mean = g.mean(axis=2, keepdims=True)
    var = (g * g).mean(axis=2, keepdims=True) - mean * mean
    y = ((g - mean) / np.sqrt(var + g.dtype.type(attrs.epsilon))).astype(x.dtype).reshape(x.shape)
    return (y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype)


group_normalization = define_op(
    "nn.group_normalization", pattern=OPAQUE, inputs=3, attrs=GroupNormAttrs, infer=_group_norm_rel,
    ref=_group_norm_ref,
    doc="Normalize each sample's channel groups over (channels in group, spatial); per-channel scale/bias.")


# ---------------------------------------------------------------------------------------------
# layer and RMS normalization


@dataclass(frozen=True)
class LayerNormAttrs:
    axis: int = -1
    epsilon: float = 1e-5
    stash_type: str = "float32"


def _trailing_norm(attrs, types, params: tuple[str, ...]) -> tuple[TensorType, int | None]:
    """Checks of ops normalizing over axes [axis, rank): params broadcast to those trailing dims."""
    x = _float_input(types[0], "X")
    check_dtype(TensorType((), attrs.stash_type), FLOATS, "stash_type")
    axis = None if x.shape is None else norm_axis(attrs.axis, len(x.shape))
    for t, what in zip(types[1:], params):
        if t is None:
            continue
        p = tensor(t, what)
        check_dtype(p, (x.dtype,), what)
        if x.shape is not None and p.shape is not None and broadcast_shapes(x.shape, p.shape) != x.shape:
            raise TypeInferenceError(f"{what} {p} does not broadcast to X {x}")
    return x, axis


def _layer_norm_rel(attrs, types, values):
    x, axis = _trailing_norm(attrs, types, ("Scale", "B"))
    stat_shape = None if axis is None else x.shape[:axis] + (1,) * (len(x.shape) - axis)
    stat = TensorType(stat_shape, attrs.stash_type)
    return TupleType((x, stat, stat))


def _layer_norm_ref(attrs, x, scale, b=None):
    axes = tuple(range(attrs.axis % x.ndim, x.ndim))
    xw = _wide(x, attrs.stash_type)
    mean = xw.mean(axis=axes, keepdims=True)
    d = xw - mean
    inv = 1.0 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + attrs.epsilon)
    y = d * inv * _wide(scale, attrs.stash_type)
    if b is not None:
        y += _wide(b, attrs.stash_type)
    stash = dt.to_numpy(attrs.stash_type)
    return y.astype(x.dtype), mean.astype(stash), inv.astype(stash)


layer_normalization = define_op(
    "nn.layer_normalization", pattern=OPAQUE, inputs=(2, 3), attrs=LayerNormAttrs, infer=_layer_norm_rel,
    ref=_layer_norm_ref,
    doc="Normalize over axes [axis, rank); returns (Y, Mean, InvStdDev), statistics in stash_type.")


def _rms_norm_rel(attrs, types, values):
    return _trailing_norm(attrs, types, ("scale",))[0]


def _rms_norm_ref(attrs, x, scale):
    axes = tuple(range(attrs.axis % x.ndim, x.ndim))
    xw = _wide(x, attrs.stash_type)
    rms = np.sqrt((xw * xw).mean(axis=axes, keepdims=True) + attrs.epsilon)
    return (xw / rms * _wide(scale, attrs.stash_type)).astype(x.dtype)


rms_normalization = define_op(
    "nn.rms_normalization", pattern=OPAQUE, inputs=2, attrs=LayerNormAttrs, infer=_rms_norm_rel,
    ref=_rms_norm_ref, doc="x / sqrt(mean(x^2 over axes [axis, rank)) + epsilon) * scale.")


# ---------------------------------------------------------------------------------------------
# Lp and mean-variance normalization, LRN


@dataclass(frozen=True)
class LpNormAttrs:
    axis: int = -1
    p: int = 2


def _lp_norm_rel(attrs, types, values):
    x = _float_input(types[0], "input")
    if attrs.p not in (1, 2):
        raise TypeInferenceError(f"p must be 1 or 2, got {attrs.p}")
    norm_axis(attrs.axis, x.ndim)
    return x


def _lp_norm_ref(attrs, x):
    xw = _wide(x)
    norm = np.abs(xw) if attrs.p == 1 else xw * xw
    norm = norm.sum(axis=attrs.axis, keepdims=True)
    if attrs.p == 2:
        norm = np.sqrt(norm)
    return np.where(norm == 0, 0, xw / np.where(norm == 0, 1, norm)).astype(x.dtype)


lp_normalization = define_op(
    "nn.lp_normalization", pattern=OPAQUE, attrs=LpNormAttrs, infer=_lp_norm_rel, ref=_lp_norm_ref,
    doc="x divided by its L1/L2 norm along axis (a zero vector stays zero).")


@dataclass(frozen=True)
class MeanVarianceNormAttrs:
    axes: tuple[int, ...] = (0, 2, 3)


def _mvn_rel(attrs, types, values):
    x = _float_input(types[0], "X")
    axes = [norm_axis(a, x.ndim, "axes entry") for a in attrs.axes]
    if len(set(axes)) != len(axes):
        raise TypeInferenceError(f"axes {attrs.axes} repeat an axis")
    return x


def _mvn_ref(attrs, x):
    """(x - mean) / (std + 1e-9) over axes, the ONNX function's epsilon."""
    xw = _wide(x)
    axes = tuple(a % x.ndim for a in attrs.axes)
    d = xw - xw.mean(axis=axes, keepdims=True)
    return (d / (np.sqrt((d * d).mean(axis=axes, keepdims=True)) + 1e-9)).astype(x.dtype)


mean_variance_normalization = define_op(
    "nn.mean_variance_normalization", pattern=OPAQUE, attrs=MeanVarianceNormAttrs, infer=_mvn_rel,
    ref=_mvn_ref, doc="Zero mean, unit variance over the given axes.")


@dataclass(frozen=True)
class LRNAttrs:
    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0


def _lrn_rel(attrs, types, values):
    x = _float_input(types[0], "X", 2)
    if attrs.size < 1:
        raise TypeInferenceError(f"size must be >= 1, got {attrs.size}")
    return x


def _lrn_ref(attrs, x):
    """Divide by (bias + alpha/size * sum of squares over the `size` nearest channels)^beta."""
    xw = _wide(x)
    before = (attrs.size - 1) // 2
    sq = np.pad(xw * xw, [(0, 0), (before, attrs.size - 1 - before)] + [(0, 0)] * (x.ndim - 2))
    total = sliding_window_view(sq, attrs.size, axis=1).sum(axis=-1)
    return (xw / (attrs.bias + attrs.alpha / attrs.size * total) ** attrs.beta).astype(x.dtype)


lrn = define_op("nn.lrn", pattern=OPAQUE, attrs=LRNAttrs, infer=_lrn_rel, ref=_lrn_ref,
                doc="Local response normalization across channels.")
