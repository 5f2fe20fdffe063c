"""Observers: what a tensor's values looked like over the calibration data, reduced to a range to quantize.

min-max keeps the extremes (exact, but one outlier costs every other value resolution); percentile
clips to the p-th percentile of each sign; entropy clips |x| where the KL divergence between the
histogram and its 8-bit quantization is smallest (TensorRT's and ONNX Runtime's "entropy").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.errors import QuantizeError
from kiln.quantization.entropy import entropy_threshold
from kiln.quantization.histogram import GrowingHistogram

ENTROPY_MIN_PER_BIN = 4


class MinMaxObserver:
    """The smallest and largest value seen."""

    def __init__(self) -> None:
        self.low, self.high = np.inf, -np.inf

    def add(self, x: np.ndarray) -> None:
        values = np.asarray(x)
        values = values[np.isfinite(values)]
        if values.size:
            self.low, self.high = min(self.low, float(values.min())), max(self.high, float(values.max()))

    def range(self) -> tuple[float, float]:
        return (0.0, 0.0) if self.low > self.high else (self.low, self.high)


class HistogramObserver:
    """The extremes and a histogram of every value; `pick` turns them into a range."""

    def __init__(self, pick: Callable[[GrowingHistogram, float, float], tuple[float, float]]):
        self.extremes, self.histogram, self.pick = MinMaxObserver(), GrowingHistogram(), pick

    def add(self, x: np.ndarray) -> None:
        self.extremes.add(x)
        self.histogram.add(x)

    def range(self) -> tuple[float, float]:
        low, high = self.extremes.range()
        if low == high:
            return low, high
        return self.pick(self.histogram, low, high)


def percentile_range(hist: GrowingHistogram, low: float, high: float, percentile: float) -> tuple[float, float]:
    """The values below which `percentile` % of the data lies, and above which the same share lies."""
    cumulative = np.cumsum(hist.counts) / hist.counts.sum()
    edges = hist.edges
    tail = 1.0 - percentile / 100.0
    top = edges[1:][np.searchsorted(cumulative, 1.0 - tail)]
    bottom = edges[1:][np.searchsorted(cumulative, tail)]
    return max(low, float(bottom)), min(high, float(top))


def entropy_range(hist: GrowingHistogram, low: float, high: float) -> tuple[float, float]:
    """The range clipped to the entropy threshold of |x| (a one-signed tensor keeps its zero side).

    A tensor of fewer values than ENTROPY_MIN_PER_BIN per bin (a pooled vector over a few feeds) keeps
    its whole range: a divergence over a histogram that sparse measures noise, and clips real values."""
    if hist.counts.sum() < ENTROPY_MIN_PER_BIN * hist.half_bins:
        return low, high
    threshold = entropy_threshold(hist.magnitudes(), hist.limit)
    return max(low, -threshold), min(high, threshold)


def make_observer(method: str, percentile: float = 99.99) -> MinMaxObserver | HistogramObserver:
    """A new observer for `method` (one of OBSERVER_METHODS)."""
    if method == "minmax":
        return MinMaxObserver()
    if method == "percentile":
        if not 50.0 < percentile <= 100.0:
            raise QuantizeError(f"percentile must be in (50, 100], got {percentile}")
        return HistogramObserver(lambda h, lo, hi: percentile_range(h, lo, hi, percentile))
    if method == "entropy":
        return HistogramObserver(entropy_range)
    raise QuantizeError(f"unknown calibration method '{method}'; expected one of {', '.join(OBSERVER_METHODS)}")


OBSERVER_METHODS = ("minmax", "percentile", "entropy")
