"""MelWeightMatrix (kiln/op/signal.py): triangular filters between DFT-bin edges.

The edges are floor()s of transcendental expressions of the five scalar inputs, and the inputs also decide
the output shape, so all five must be constants (run-time specialization, kiln/runtime/specialize.py, makes
them ones when a model feeds them as graph inputs). The edges are computed here with the reference's own
numpy arithmetic, so they match it bit for bit; the kernel evaluates the triangles in float64 from them.
"""

from __future__ import annotations

import numpy as np

from kiln import te, tir
from kiln.op.signal import hz_to_mel, mel_to_hz
from kiln.tir import select
from kiln.topi.ngram import const_table
from kiln.topi.registry import ComputeError, register_compute

NAME = "signal.mel_weight_matrix"
F64 = "float64"
_INPUTS = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def mel_edges(consts) -> tuple[int, int, list[int]]:
    """(num_mel_bins, dft_length, the num_mel_bins + 2 edges in DFT bins), as the reference computes them."""
    for v, what in zip(consts, _INPUTS):
        if v is None:
            raise ComputeError(f"{NAME}: {what} must be a constant to generate code")
    bins, n, rate = (int(np.asarray(v).reshape(-1)[0]) for v in consts[:3])
    lo, hi = (hz_to_mel(float(np.asarray(v).reshape(-1)[0])) for v in consts[3:5])
    mel = lo + np.arange(bins + 2) * (hi - lo) / (bins + 2)
    with np.errstate(all="ignore"):
        edges = np.floor((n + 1) * mel_to_hz(mel) / rate)
    if not np.all(np.isfinite(edges)):
        raise ComputeError(f"{NAME}: the mel edges are not finite (sample_rate {rate})")
    return bins, n, [int(e) for e in edges.astype(np.int64)]


@register_compute(NAME)
def _mel_weight_matrix(attrs, inputs, out_type, consts):
    bins, n, edges = mel_edges(consts)
    table = const_table(edges, "int64", "mel_edges")
    one, zero, unit = tir.const(1.0, F64), tir.const(0.0, F64), tir.const(1, "int64")

    def f(j, b):
        left, center, right = table(b), table(b + 1), table(b + 2)
        jj = tir.cast("int64", j)
        rise = select(center > left, tir.cast(F64, jj - left) / tir.cast(F64, tir.max_(center - left, unit)), one)
        fall = tir.cast(F64, right - jj) / tir.cast(F64, tir.max_(right - center, unit))
        v = select((jj >= left) & (jj <= center), rise, select((jj > center) & (jj < right), fall, zero))
        return tir.cast(attrs.output_datatype, v)

    return te.compute((n // 2 + 1, bins), f, name="mel_weight_matrix")
