"""Scales and zero points against direct numpy computations."""

import numpy as np
import pytest

from kiln.quantization.params import activation_params, bias_fitting_scale, quantize_bias, quantize_weight, weight_scale


def test_activation_params_cover_the_range_and_zero():
    p = activation_params(-1.0, 3.0)
    assert p.scale == pytest.approx(4.0 / 255) and p.zero_point == round(1.0 / p.scale)
    relu = activation_params(0.5, 2.0)  # widened to [0, 2]: zero is exact
    assert relu.zero_point == 0 and relu.scale == pytest.approx(2.0 / 255)
    assert activation_params(0.0, 0.0).scale == 1.0


def test_fake_quantize_round_trips_within_half_a_step():
    p = activation_params(-2.0, 2.0)
    x = np.linspace(-2, 2, 1001).astype(np.float32)
    assert np.abs(p.fake_quantize(x) - x).max() <= p.scale / 2 + 1e-6


@pytest.mark.parametrize("axis", [0, 1, 3])
def test_per_channel_weight_scales_are_max_abs_over_127(axis):
    w = np.random.default_rng(0).standard_normal((4, 5, 3, 3)).astype(np.float32)
    scale = weight_scale(w, axis)
    other = tuple(i for i in range(4) if i != axis)
    np.testing.assert_allclose(scale, np.abs(w).max(axis=other) / 127, rtol=1e-6)
    q = quantize_weight(w, scale, axis)
    shaped = scale.reshape([-1 if i == axis else 1 for i in range(4)])
    np.testing.assert_array_equal(q.values, np.clip(np.rint(w / shaped), -127, 127).astype(np.int8))
    assert np.abs(q.values).max(axis=other).tolist() == [127] * w.shape[axis]


def test_per_tensor_scale_and_an_all_zero_channel():
    w = np.zeros((3, 4), np.float32)
    w[1] = [0.5, -1.27, 0.0, 0.1]
    assert weight_scale(w, None) == pytest.approx(0.01)
    np.testing.assert_allclose(weight_scale(w, 0), [1.0, 0.01, 1.0])


def test_bias_is_int32_at_input_scale_times_weight_scale():
    w_scale = np.array([0.01, 0.02], np.float32)
    values, scale = quantize_bias(np.array([0.3, -0.5], np.float32), 0.1, w_scale)
    np.testing.assert_allclose(scale, [0.001, 0.002])
    assert values.dtype == np.int32 and values.tolist() == [300, -250]


def test_a_bias_too_large_for_int32_raises_the_weight_scale():
    w_scale = np.array([1e-12, 0.5], np.float32)
    bias = np.array([10.0, 10.0], np.float32)
    fitted = bias_fitting_scale(w_scale, bias, 1e-3)
    assert fitted[0] > w_scale[0] and fitted[1] == w_scale[1]
    values, _ = quantize_bias(bias, 1e-3, fitted)
    assert np.abs(values.astype(np.int64)).max() <= 2**31 - 1
