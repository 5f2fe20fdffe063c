"""Fast approximations of exp, tanh, erf, sigmoid and gelu (what the `fast-math` pass inserts).

Each reference is the specification of the generated code: float32 arithmetic in exactly the
order written (Horner polynomials, no fused multiply-add), so compiled kernels can match it bit
for bit. Narrow float inputs are computed in float32 and rounded once at the end.
Max errors below are measured against float64 math by tests/transform/test_fast_math.py.
"""

from __future__ import annotations

import numpy as np

from kiln.op.elemwise import GeluAttrs, check_choice, unary_rel
from kiln.op.registry import ELEMWISE, define_op

F32 = np.float32
FAST_DTYPES = ("float16", "bfloat16", "float32")

# exp: Cody-Waite range reduction x = n ln2 + f, |f| <= ln2/2; Cephes expf polynomial for e^f
EXP_LO, EXP_HI = F32(-104.0), F32(89.0)  # e^x rounds to 0 below / overflows to inf above
LOG2E = F32(1.44269504088896341)
LN2_HI, LN2_LO = F32(0.693359375), F32(-2.12194440e-4)
EXP_POLY = tuple(F32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))

# tanh: odd/even rational minimax on [-9, 9] (Eigen's ptanh_float); tanh(x) == x for tiny |x|
TANH_CLAMP, TANH_TINY = F32(9.0), F32(4e-4)
TANH_NUM = tuple(F32(c) for c in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                  5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                  4.89352455891786e-03))
TANH_DEN = tuple(F32(c) for c in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                                  4.89352518554385e-03))

# erf: odd/even rational on [-4, 4] (Eigen's perf_float); erf(x) is +-1 in float32 beyond;
# erf(x) == 2x/sqrt(pi) for tiny |x| (the rational would underflow on subnormals)
ERF_CLAMP, ERF_TINY, TWO_OVER_SQRT_PI = F32(4.0), F32(1e-4), F32(1.12837916709551257)
ERF_NUM = tuple(F32(c) for c in (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                                 -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                                 -1.60960333262415e-02))
ERF_DEN = tuple(F32(c) for c in (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                                 -7.37332916720468e-03, -1.42647390514189e-02))

SQRT_HALF = F32(0.70710678118654752)
GELU_TANH_C, GELU_TANH_K = F32(0.79788456080286536), F32(0.044715)


def _horner(coeffs: tuple, z: np.ndarray) -> np.ndarray:
    acc = np.full_like(z, coeffs[0])
    for c in coeffs[1:]:
        acc = acc * z + c
    return acc


def _clamp(x: np.ndarray, lo, hi) -> np.ndarray:
    """min/max that keep NaN (the generated code must select, not use fminf/fmaxf)."""
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


def _pow2(n: np.ndarray) -> np.ndarray:
    """2^n for integral float n in [-126, 127], built from the exponent bits."""
    return ((n.astype(np.int32) + 127) << 23).astype(np.int32).view(F32)


def fast_exp_f32(x: np.ndarray) -> np.ndarray:
    """e^x; 2^n is applied as two factors so results overflow to inf and underflow through
    the subnormals to 0 with one rounding, like expf."""
    xc = _clamp(x, EXP_LO, EXP_HI)
    n = np.floor(xc * LOG2E + F32(0.5))
    f = xc - n * LN2_HI
    f = f - n * LN2_LO
    y = _horner(EXP_POLY, f) * (f * f) + f + F32(1.0)
    n1 = np.floor(n * F32(0.5))
    out = (y * _pow2(n1)) * _pow2(n - n1)
    return np.where(np.isnan(x), x, out)


def fast_tanh_f32(x: np.ndarray) -> np.ndarray:
    xc = _clamp(x, -TANH_CLAMP, TANH_CLAMP)
    x2 = xc * xc
    r = _clamp((xc * _horner(TANH_NUM, x2)) / _horner(TANH_DEN, x2), F32(-1.0), F32(1.0))
    return np.where(np.abs(x) < TANH_TINY, x, r)


def fast_erf_f32(x: np.ndarray) -> np.ndarray:
    xc = _clamp(x, -ERF_CLAMP, ERF_CLAMP)
    x2 = xc * xc
    r = _clamp((xc * _horner(ERF_NUM, x2)) / _horner(ERF_DEN, x2), F32(-1.0), F32(1.0))
    return np.where(np.abs(x) < ERF_TINY, x * TWO_OVER_SQRT_PI, r)


def fast_sigmoid_f32(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x): keeps relative accuracy in the far negative tail (where it goes to 0)."""
    return F32(1.0) / (F32(1.0) + fast_exp_f32(-x))


def fast_gelu_f32(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        inner = GELU_TANH_C * (x + GELU_TANH_K * (x * x * x))
        return F32(0.5) * x * (F32(1.0) + fast_tanh_f32(inner))
    return F32(0.5) * x * (F32(1.0) + fast_erf_f32(x * SQRT_HALF))


def _ref(fn):
    def ref(attrs, x):
        with np.errstate(all="ignore"):
            return np.asarray(fn(attrs, np.asarray(x, F32))).astype(x.dtype, copy=False)

    return ref


def _op(name: str, fn, doc: str, attrs: type | None = None, check=None):
    return define_op(name, pattern=ELEMWISE, attrs=attrs, infer=unary_rel(FAST_DTYPES, check=check),
                     ref=_ref(fn), doc=doc)


fast_exp = _op("math.fast_exp", lambda a, x: fast_exp_f32(x),
               "e^x, range-reduced polynomial. Max relative error 8.1e-8 (< 1 ulp) where e^x is a "
               "normal float32, absolute 1.1e-45 below; overflows to inf, -inf -> 0, NaN -> NaN.")
fast_tanh = _op("math.fast_tanh", lambda a, x: fast_tanh_f32(x),
                "tanh(x), rational approximation on [-9, 9]. Max absolute and relative error 3.6e-7; "
                "never beyond [-1, 1]; +-inf -> +-1, NaN -> NaN.")
fast_erf = _op("math.fast_erf", lambda a, x: fast_erf_f32(x),
               "erf(x), rational approximation on [-4, 4]. Max absolute error 4.3e-7, relative 4.3e-7 "
               "for normal x; never beyond [-1, 1]; +-inf -> +-1, NaN -> NaN.")
fast_sigmoid = _op("nn.fast_sigmoid", lambda a, x: fast_sigmoid_f32(x),
                   "1 / (1 + fast_exp(-x)). Max relative error 1.5e-7 where the result is a normal "
                   "float32, absolute 8.9e-8 everywhere; +inf -> 1, -inf -> 0, NaN -> NaN.")
fast_gelu = _op("nn.fast_gelu", lambda a, x: fast_gelu_f32(x, a.approximate),
                "0.5 x (1 + fast_erf(x / sqrt 2)), or with fast_tanh when approximate='tanh'. Max absolute "
                "error 1.1e-6 where |gelu| < 1, relative 2.7e-7 above; inf/NaN as nn.gelu.",
                GeluAttrs, check=lambda a: check_choice(a.approximate, ("none", "tanh"), "approximate"))
