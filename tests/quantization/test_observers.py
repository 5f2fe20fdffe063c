"""Each observer on synthetic data with a known answer, and the growing histogram it rests on."""

import numpy as np
import pytest

from kiln.errors import QuantizeError
from kiln.quantization.entropy import entropy_threshold
from kiln.quantization.histogram import GrowingHistogram
from kiln.quantization.observers import make_observer


def test_minmax_is_exact_over_batches():
    o = make_observer("minmax")
    o.add(np.array([0.5, -2.25, 1.0], np.float32))
    o.add(np.array([[3.5, 0.0]], np.float32))
    o.add(np.array([np.inf, np.nan], np.float32))  # non-finite values say nothing about the range
    assert o.range() == (-2.25, 3.5)


def test_an_observer_that_saw_nothing_gives_an_empty_range():
    assert make_observer("minmax").range() == (0.0, 0.0)
    assert make_observer("entropy").range() == (0.0, 0.0)


def test_percentile_of_a_normal_distribution():
    x = np.random.default_rng(0).standard_normal(1_000_000)
    o = make_observer("percentile", 99.9)
    for part in np.array_split(x, 10):
        o.add(part)
    low, high = o.range()
    # the 0.1% and 99.9% points of N(0, 1) are -/+3.0902; one bin of the histogram is ~0.005
    assert high == pytest.approx(3.0902, abs=0.02)
    assert low == pytest.approx(-3.0902, abs=0.02)


def test_percentile_100_is_the_whole_range_up_to_a_bin():
    x = np.random.default_rng(1).uniform(-1, 2, 10_000)
    o = make_observer("percentile", 100.0)
    o.add(x)
    low, high = o.range()
    assert low == pytest.approx(x.min(), abs=0.01) and high == x.max()


def test_entropy_clips_a_heavy_tail_below_the_max():
    x = np.random.default_rng(2).standard_t(2, 500_000)  # Student t, 2 degrees of freedom: heavy tails
    o = make_observer("entropy")
    o.add(x)
    low, high = o.range()
    assert high < 0.5 * np.abs(x).max() and -low == high
    assert high > np.percentile(np.abs(x), 95)  # it clips the tail, not the bulk


def test_entropy_keeps_the_range_of_a_uniform_distribution():
    x = np.random.default_rng(3).uniform(-1, 1, 200_000)
    o = make_observer("entropy")
    o.add(x)
    low, high = o.range()
    assert high > 0.9 and low < -0.9


def test_entropy_keeps_the_zero_side_of_a_one_signed_tensor():
    x = np.abs(np.random.default_rng(4).standard_normal(100_000))
    o = make_observer("entropy")
    o.add(x)
    low, high = o.range()
    assert low == pytest.approx(x.min()) and 0 < high <= x.max()


def test_entropy_threshold_of_few_bins_is_their_end():
    counts = np.zeros(1024, np.int64)
    counts[:10] = 5
    assert entropy_threshold(counts, 1024.0) == 10.0


def test_the_growing_histogram_equals_numpy_at_its_final_width():
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal(1000) * s for s in (0.1, 1.0, 7.0)]
    h = GrowingHistogram(half_bins=64)
    for b in batches:
        h.add(b)
    assert h.limit >= 7 * 3  # it grew
    want, _ = np.histogram(np.concatenate(batches), bins=128, range=(-h.limit, h.limit))
    assert np.array_equal(h.counts, want)
    assert h.magnitudes().sum() == 3000


def test_an_unknown_method_or_percentile_is_an_error():
    with pytest.raises(QuantizeError, match="unknown calibration method 'kl'"):
        make_observer("kl")
    with pytest.raises(QuantizeError, match="percentile must be in"):
        make_observer("percentile", 20.0)


def test_entropy_keeps_the_range_of_a_tensor_of_few_values():
    x = np.random.default_rng(6).standard_t(2, 500)
    o = make_observer("entropy")
    o.add(x)
    assert o.range() == (x.min(), x.max())
