"""Cosine-sum windows (Hann, Hamming, Blackman; kiln/op/signal.py): w[n] = sum_k (-1)^k a_k cos(k 2 pi n / N),
evaluated in float64 as the reference does, then cast to output_datatype.

The size input decides the output length, so it must be a constant: when a model feeds it as a graph
input, run-time specialization (kiln/runtime/specialize.py) makes it one.
"""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.topi.registry import ComputeError, register_compute

F64 = "float64"
# NOTE: the same coefficients as kiln/op/signal.py's references (which keep them in closures)
COEFFS = {"hann_window": (0.5, 0.5), "hamming_window": (25 / 46, 21 / 46), "blackman_window": (0.42, 0.5, 0.08)}


def cosine_window(n: int, coeffs: tuple[float, ...], periodic: bool, dtype: str, name: str) -> te.Tensor:
    period = n if periodic else n - 1
    if not period:  # a 1-point symmetric window is [1], as the reference defines it
        return te.compute((n,), lambda i: tir.const(1, dtype), name=name)

    def f(i):
        phase = tir.const(2 * math.pi, F64) * tir.cast(F64, i) / tir.const(float(period), F64)
        w = tir.const(coeffs[0], F64) * te.cos(tir.const(0.0, F64) * phase)
        for k, a in enumerate(coeffs[1:], 1):
            term = tir.const(a, F64) * te.cos(tir.const(float(k), F64) * phase)
            w = w - term if k % 2 else w + term
        return tir.cast(dtype, w)

    return te.compute((n,), f, name=name)


def _register(name: str) -> None:
    @register_compute(f"signal.{name}")
    def compute(attrs, inputs, out_type, consts):
        if consts[0] is None:
            raise ComputeError(f"signal.{name}: the size must be a constant to generate code")
        n = int(consts[0].reshape(-1)[0])
        return cosine_window(n, COEFFS[name], bool(attrs.periodic), attrs.output_datatype, name)


for _name in COEFFS:
    _register(_name)
