"""Registry-test cases (te eval against the references) for MatMulInteger, QLinearConv, Binarizer,
ArrayFeatureExtractor, MelWeightMatrix and FlexAttention without modifiers (compiled variants:
test_last_numeric.py)."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def _full(shape, dtype: str, rng) -> np.ndarray:
    info = np.iinfo(dtype)
    return rand(shape, dtype, rng, int(info.min), int(info.max))


def _mat_mul_integer(rng):
    out = []
    for at, bt in (("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")):
        a, b = _full((3, 5), at, rng), _full((5, 7), bt, rng)
        out += [(None, [a, b], ()), (None, [a, b, _full((), at, rng), _full((7,), bt, rng)], ()),
                (None, [a, b, _full((3,), at, rng), _full((1,), bt, rng)], ()),
                (None, [_full((2, 1, 3, 5), at, rng), _full((4, 5, 2), bt, rng), _full((1,), at, rng)], ()),
                (None, [_full((5,), at, rng), b, _full((), at, rng)], ()),
                (None, [a, _full((5,), bt, rng), None, _full((), bt, rng)], ())]
    return out


def _qlinear_conv(rng):
    from tests.topi.cases import A

    out = []
    for xt, wt, yt in (("uint8", "uint8", "uint8"), ("int8", "int8", "int8"), ("uint8", "int8", "int8")):
        x, w = _full((1, 3, 5, 7), xt, rng), _full((4, 3, 3, 2), wt, rng)

        def scales(*shape):
            return rng.uniform(0.001, 0.05, shape).astype(np.float32)

        common = [scales(), _full((), xt, rng)]
        bias = rng.integers(-5000, 5000, 4).astype(np.int32)
        out += [(A("quant.qlinear_conv", pads=(1, 0, 1, 1), strides=(1, 2)),
                 [x] + common + [w, scales(4), _full((4,), wt, rng), np.float32(2.0) + scales(), _full((), yt, rng), bias], ()),
                (A("quant.qlinear_conv", group=3, dilations=(2, 1)),
                 [x] + common + [_full((3, 1, 2, 2), wt, rng), scales(), _full((), wt, rng),
                                 np.float32(0.5) + scales(), _full((), yt, rng)], ())]
    return out


def _binarizer(rng):
    from tests.topi.cases import A

    out = []
    for dtype in ("float32", "float64", "int32", "int64"):
        x = rand((3, 7), dtype, rng)
        out += [(A("ml.binarizer", threshold=0.5), [x], ()), (A("ml.binarizer", threshold=-3.0), [x[:1]], ())]
    out.append((A("ml.binarizer", threshold=0.1), [np.array([0.1, np.nan, np.inf, 0.100001], np.float32)], ()))
    return out


def _array_feature_extractor(rng):
    out = []
    for dtype in ("float32", "float64", "int32", "int64"):
        out += [(None, [rand((2, 3, 5), dtype, rng), np.array([4, 0, -1], np.int64)], ()),
                (None, [rand((7,), dtype, rng), np.array([[2], [6]], np.int64)], ()),
                (None, [rand((1, 1), dtype, rng), np.array(0, np.int64)], ())]
    return out


def _mel_weight_matrix(rng):
    from tests.topi.cases import A

    out = []
    for dtype, (bins, n, rate, lo, hi) in (("float32", (8, 64, 8000, 0.0, 4000.0)),
                                           ("float64", (5, 31, 16000, 100.0, 7000.0)),
                                           ("float16", (3, 17, 1000, 20.0, 500.0)),
                                           ("int32", (1, 8, 100, 0.0, 50.0))):
        args = [np.array(bins, np.int64), np.array(n, np.int64), np.array(rate, np.int32), np.array(lo, np.float32),
                np.array(hi, np.float32)]
        out.append((A("signal.mel_weight_matrix", output_datatype=dtype), args, (0, 1, 2, 3, 4)))
    return out


def _flex_attention(rng):
    from tests.topi.cases import A

    out = []
    for dtype in ("float32", "float64", "float16"):
        q, k, v = rand((2, 4, 3, 5), dtype, rng), rand((2, 2, 7, 5), dtype, rng), rand((2, 2, 7, 3), dtype, rng)
        out += [(A("nn.flex_attention"), [None, None, q, k, v], ()),
                (A("nn.flex_attention", scale=0.3), [None, None, q[:1, :1], k[:1, :1, :1], v[:1, :1, :1]], ())]
    return out


def LAST_NUMERIC_CASES() -> dict:
    return {"linalg.mat_mul_integer": _mat_mul_integer, "quant.qlinear_conv": _qlinear_conv,
            "ml.binarizer": _binarizer, "ml.array_feature_extractor": _array_feature_extractor,
            "signal.mel_weight_matrix": _mel_weight_matrix, "nn.flex_attention": _flex_attention}
