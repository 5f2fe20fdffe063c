"""The clipping threshold that loses the least information (TensorRT's entropy calibration).

For each candidate threshold t (a bin edge of the |x| histogram), P is the histogram up to t with the
counts beyond it folded into the last bin, and Q is P squeezed into 128 levels and spread back over
the non-empty bins; t with the smallest KL(P || Q) wins. Heavy tails get clipped, since the resolution
the bulk gains outweighs the few values cut.
"""

from __future__ import annotations

import numpy as np

LEVELS = 128  # the levels one sign of an 8-bit value has


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) of two unnormalised histograms; bins where p is zero contribute nothing."""
    p = p / p.sum()
    q = q / q.sum()
    nz = p > 0
    if np.any(q[nz] == 0):
        return float("inf")
    return float(np.sum(p[nz] * np.log(p[nz] / q[nz])))


def squeezed(counts: np.ndarray, nonzero: np.ndarray, levels: int) -> np.ndarray:
    """counts quantized to `levels` groups of bins, each group's total spread evenly over its `nonzero` bins."""
    sizes = np.full(levels, counts.size // levels)
    sizes[:counts.size % levels] += 1
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    totals = np.add.reduceat(counts, starts)
    filled = np.add.reduceat(nonzero.astype(np.int64), starts)
    per_bin = np.where(filled > 0, totals / np.maximum(filled, 1), 0.0)
    return np.repeat(per_bin, sizes) * nonzero


def entropy_threshold(magnitudes: np.ndarray, limit: float, levels: int = LEVELS) -> float:
    """The |x| clipping threshold from a histogram of |x| over [0, limit] (see the module doc)."""
    counts = magnitudes.astype(np.float64)
    bins = counts.size
    # NOTE: ReLU outputs put half their values exactly at 0; that spike would dominate the divergence
    # and pull the threshold far down, so the first bin counts as its neighbour (as NVIDIA's
    # pytorch-quantization does)
    counts[0] = counts[1]
    if counts.sum() == 0:
        return limit
    last = int(np.nonzero(counts)[0][-1]) + 1
    if last <= levels:
        return limit * last / bins
    best, best_bins = float("inf"), last
    for i in range(levels, last + 1):
        p = counts[:i].copy()
        p[-1] += counts[i:].sum()
        divergence = kl_divergence(p, squeezed(counts[:i], p > 0, levels))
        if divergence < best:
            best, best_bins = divergence, i
    return limit * best_bins / bins
