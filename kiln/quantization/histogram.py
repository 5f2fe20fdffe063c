"""A histogram over [-limit, limit] that grows to take any data without keeping the data.

When a batch falls outside, the limit doubles until it fits and each pair of neighbouring bins merges
into one: the old counts land exactly in the new bins (no re-binning error), so the histogram of a
stream of batches is the histogram of all of them at the final bin width.
"""

from __future__ import annotations

import numpy as np


class GrowingHistogram:
    """Counts of values in 2 * half_bins equal bins over [-limit, limit]."""

    def __init__(self, half_bins: int = 1024):
        if half_bins < 2 or half_bins & (half_bins - 1):
            raise ValueError(f"half_bins must be a power of two >= 2, got {half_bins}")
        self.half_bins = half_bins
        self.limit = 0.0
        self.counts = np.zeros(2 * half_bins, np.int64)

    def add(self, x: np.ndarray) -> None:
        values = np.asarray(x, np.float64).reshape(-1)
        values = values[np.isfinite(values)]
        if not values.size:
            return
        top = float(np.abs(values).max())
        if self.limit == 0.0:
            self.limit = top if top > 0 else 1.0
        while top > self.limit:
            self._double()
        counts, _ = np.histogram(values, bins=self.counts.size, range=(-self.limit, self.limit))
        self.counts += counts

    def _double(self) -> None:
        """Twice the range at half the resolution: bins (2i, 2i+1) merge and the old range fills the middle half."""
        merged = self.counts.reshape(-1, 2).sum(axis=1)
        quarter = self.half_bins // 2
        self.counts = np.concatenate([np.zeros(quarter, np.int64), merged, np.zeros(quarter, np.int64)])
        self.limit *= 2.0

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(-self.limit, self.limit, self.counts.size + 1)

    def magnitudes(self) -> np.ndarray:
        """Counts of |x| in half_bins bins over [0, limit] (bin j: |x| between j and j+1 bin widths)."""
        return self.counts[self.half_bins:] + self.counts[:self.half_bins][::-1]
