"""Registry-test cases for nn.rotary_embedding, vision.grid_sample, quant.qlinear_matmul and
signal.dft (deeper variants live in test_more2_computes.py)."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def _rotary(rng):
    from tests.topi.cases import A

    b, h, s, d = 2, 3, 4, 8
    cos, sin = rand((b, s, d // 2), "float32", rng), rand((b, s, d // 2), "float32", rng)
    out = [(A("nn.rotary_embedding", interleaved=i), [rand((b, h, s, d), "float32", rng), cos, sin], ())
           for i in (0, 1)]
    pos = rand((b, s), "int64", rng, 0, 5)
    cache = [rand((6, 2), "float32", rng) for _ in range(2)]
    out.append((A("nn.rotary_embedding", num_heads=h, rotary_embedding_dim=4, interleaved=1),
                [rand((b, s, h * d), "float32", rng), *cache, pos], ()))
    return out


def _grid_sample(rng):
    from tests.topi.cases import A

    out = []
    for mode in ("linear", "nearest"):
        for pad in ("zeros", "border"):
            for ac in (0, 1):
                grid = (rng.random((2, 3, 4, 2)) * 2.6 - 1.3).astype(np.float32)
                out.append((A("vision.grid_sample", mode=mode, padding_mode=pad, align_corners=ac),
                            [rand((2, 3, 4, 5), "float32", rng), grid], ()))
    grid = (rng.random((1, 5, 1)) * 2.6 - 1.3).astype(np.float32)
    out.append((A("vision.grid_sample", mode="linear"), [rand((1, 2, 6), "float32", rng), grid], ()))
    return out


def _qlinear_matmul(rng):
    def params(dt, n=1):
        return [np.array(rng.random(n) * 0.05 + 0.01, np.float32).reshape(() if n == 1 else (n,)),
                rand(() if n == 1 else (n,), dt, rng, 0, 10)]

    out = []
    for dt in ("uint8", "int8"):
        a, b = rand((2, 3, 4), dt, rng), rand((4, 5), dt, rng)
        out.append((None, [a, *params(dt), b, *params(dt), *params(dt)], ()))
    a, b = rand((3, 4), "uint8", rng), rand((4, 2), "uint8", rng)
    out.append((None, [a, *params("uint8", 3), b, *params("uint8", 2), *params("uint8")], ()))
    return out


def _dft(rng):
    from tests.topi.cases import A

    out = []
    for inv, one, n, ax, last in ((0, 0, None, -2, 1), (0, 1, None, 1, 2), (0, 0, 6, 1, 2), (0, 1, 4, -2, 1),
                                  (1, 1, None, 1, 2), (1, 1, 8, 1, 1)):
        x = rand((2, 5, 3, last), "float32", rng)
        length = None if n is None else np.array(n, np.int64)
        out.append((A("signal.dft", inverse=inv, onesided=one), [x, length, np.array(ax, np.int64)], (1, 2)))
    return out


def MORE2_CASES() -> dict:
    return {"nn.rotary_embedding": _rotary, "vision.grid_sample": _grid_sample,
            "quant.qlinear_matmul": _qlinear_matmul, "signal.dft": _dft}
