"""Scales and zero points: uint8 asymmetric activations, int8 symmetric weights (per channel or per
tensor) and int32 biases whose scale is the input's scale times the weight's, as the integer kernels need.

Rounding is numpy's rint (half to even), the rounding ONNX's QuantizeLinear uses, so a value quantized
here and by QuantizeLinear at run time agrees bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT8_LIMIT = 127  # weights use [-127, 127]: symmetric, and no -128 for the u8 x s8 kernels to saturate on
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class ActivationParams:
    """Per-tensor uint8 quantization of an activation: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int

    def fake_quantize(self, x: np.ndarray) -> np.ndarray:
        """x quantized to uint8 and back: the value a DequantizeLinear after a QuantizeLinear gives."""
        q = np.clip(np.rint(x.astype(np.float64) / self.scale) + self.zero_point, 0, 255)
        return ((q - self.zero_point) * self.scale).astype(np.float32)


def activation_params(low: float, high: float) -> ActivationParams:
    """The uint8 parameters covering [low, high], widened to contain 0 so that 0 is exact (padding, ReLU)."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    if high - low <= 0.0 or not np.isfinite(high - low):
        return ActivationParams(1.0, 0)
    scale = float(np.float32((high - low) / 255.0))
    zero_point = int(np.clip(np.rint(-low / scale), 0, 255))
    return ActivationParams(scale, zero_point)


@dataclass(frozen=True)
class WeightParams:
    """A weight quantized to int8 symmetrically: scale has one element per channel along `axis`, or is a scalar."""

    values: np.ndarray  # int8, the weight's shape
    scale: np.ndarray  # float32, [channels] or []
    axis: int | None  # None: per tensor


def weight_scale(w: np.ndarray, axis: int | None) -> np.ndarray:
    """max |w| / 127 per channel (axis) or over the whole tensor; an all-zero channel gets scale 1."""
    if axis is None:
        top = np.abs(w).max(initial=0.0)
    else:
        top = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1, initial=0.0)
    scale = np.asarray(top / INT8_LIMIT, np.float32)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


def quantize_weight(w: np.ndarray, scale: np.ndarray, axis: int | None) -> WeightParams:
    """int8 values of w for the given scale (per channel along axis, or a scalar)."""
    shaped = scale if axis is None else scale.reshape([-1 if i == axis else 1 for i in range(w.ndim)])
    q = np.clip(np.rint(w.astype(np.float64) / shaped), -INT8_LIMIT, INT8_LIMIT).astype(np.int8)
    return WeightParams(q, np.asarray(scale, np.float32), axis)


def bias_fitting_scale(w_scale: np.ndarray, bias: np.ndarray, x_scale: float) -> np.ndarray:
    """The weight scale, raised where x_scale * w_scale is too small to hold the bias in int32.

    NOTE: a tiny weight channel next to a large bias would overflow int32; ONNX Runtime's quantizer
    raises that channel's weight scale the same way."""
    need = np.abs(bias.astype(np.float64)) / (INT32_LIMIT * x_scale)
    if w_scale.ndim == 0:
        need = need.max(initial=0.0)
    return np.maximum(w_scale.astype(np.float64), need).astype(np.float32)


def quantize_bias(bias: np.ndarray, x_scale: float, w_scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 values, float32 scale) of a bias added to an accumulator of x_scale * w_scale units."""
    scale = (np.float32(x_scale) * w_scale.astype(np.float32)).astype(np.float32)
    q = np.clip(np.rint(bias.astype(np.float64) / scale), -INT32_LIMIT, INT32_LIMIT).astype(np.int32)
    return q, scale
