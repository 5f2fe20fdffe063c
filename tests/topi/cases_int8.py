"""Registry-test cases for quant.qgemm and quant.im2col on the te evaluator (the compiled micro-kernels:
tests/topi/test_qgemm_x86.py)."""

from __future__ import annotations

import numpy as np

from kiln.op.qgemm import KERNELS, pack_weight
from tests.topi.harness import rand


def qgemm_inputs(rng, a_shape, n: int, a_dtype: str, kernel: str, per_channel: bool = True,
                 weight_range: int = 127) -> list[np.ndarray]:
    """A, packed W, wsum, a_zero_point, a_scale, col_scale, col_bias for a random [K, n] int8 weight."""
    k = a_shape[-1]
    w = rng.integers(-weight_range - (weight_range == 127), weight_range + 1, (k, n)).astype(np.int8)
    lo, hi = (0, 255) if a_dtype == "uint8" else (-128, 127)
    a = rng.integers(lo, hi + 1, a_shape).astype(a_dtype)
    zp = np.asarray(rng.integers(lo, hi + 1), a_dtype)
    scale = (rng.random(n if per_channel else 1) * 0.02 + 0.001).astype(np.float32)
    return [a, pack_weight(w, KERNELS[kernel][0]), w.astype(np.int32).sum(0).astype(np.int32), zp,
            np.float32(0.05), np.broadcast_to(scale, (n,)).astype(np.float32), rand((n,), "float32", rng)]


def _qgemm(rng):
    from tests.topi.cases import A

    out = []
    for a_shape, n, a_dtype, kernel, out_dtype, relu in (
            ((3, 5), 7, "uint8", "avx2_split", "int32", False), ((1, 1), 1, "int8", "avx2_split", "float32", True),
            ((2, 3, 13), 17, "uint8", "vnni", "uint8", True), ((9, 8), 33, "int8", "avx2", "int8", False)):
        attrs = A("quant.qgemm", units=n, depth=a_shape[-1], out_dtype=out_dtype, relu=relu, kernel=kernel,
                  y_zero_point=3)
        out.append((attrs, qgemm_inputs(rng, a_shape, n, a_dtype, kernel, weight_range=63), (1, 2, 5, 6)))
    return out


def _im2col(rng):
    from tests.topi.cases import A

    return [(A("quant.im2col", kernel=k, strides=s, dilations=d, pads=p),
             [rand(shape, dt, rng), np.asarray(7, dt)], ())
            for shape, k, s, d, p, dt in (((1, 5, 5, 3), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), "uint8"),
                                          ((2, 7, 6, 2), (2, 3), (2, 1), (1, 2), (0, 2, 1, 0), "int8"),
                                          ((1, 1, 1, 1), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), "uint8"))]


def INT8_CASES() -> dict:
    return {"quant.qgemm": _qgemm, "quant.im2col": _im2col}
