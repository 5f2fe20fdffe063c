"""exp, erf, tanh and sigmoid as te expressions (polynomials, selects, bit casts) instead of libm calls.

A call to expf/erff is opaque to gcc's vectorizer (we do not link a vector math library), so a loop
that computes one stays scalar. These expressions are branch-free, so the loop around them vectorizes.
They follow the float32 specifications of kiln.op.fast_math step by step (same constants, same
order), so their errors are the ones that module states (exp < 1 ulp, erf 4.3e-7 absolute).
Other dtypes keep the libm call.
"""

from __future__ import annotations

import math

from kiln import te, tir
from kiln.op import fast_math as spec
from kiln.tir.expr import PrimExpr

F32 = "float32"


def _c(v: float) -> PrimExpr:
    return tir.const(float(v), F32)


def _let(value: PrimExpr, body) -> PrimExpr:
    """Bind `value` once (the C is a statement expression) and build the body from its variable.
    NOTE: selects stay innermost: a let inside a select's branch is control flow, which gcc does not vectorize."""
    v = tir.Var("t", value.dtype)
    return tir.Let(v, value, body(v))


def _horner(coeffs, z: PrimExpr) -> PrimExpr:
    acc = _c(coeffs[0])
    for c in coeffs[1:]:
        acc = acc * z + _c(c)
    return acc


def _clamp(x: PrimExpr, lo: float, hi: float) -> PrimExpr:
    """Keeps NaN: both comparisons are false for it."""
    return tir.select(x < _c(lo), _c(lo), tir.select(x > _c(hi), _c(hi), x))


def _floor(v: PrimExpr) -> PrimExpr:
    """floor of a float32 with |v| < 2^22: round to nearest by adding and removing 1.5 * 2^23, then
    step down. NOTE: floorf vectorizes only without -ftrapping-math, and a float-to-int conversion
    right after the clamp's selects makes gcc thread jumps into control flow it cannot vectorize."""
    magic = _c(12582912.0)
    return _let((v + magic) - magic, lambda r: tir.select(r > v, r - _c(1.0), r))


def _pow2(n: PrimExpr) -> PrimExpr:
    """2^n for an integral float n in [-126, 127], from the exponent bits."""
    bits = tir.call("shift_left", tir.cast("int32", n) + tir.IntImm(127, "int32"), tir.IntImm(23, "int32"),
                    dtype="int32")
    return tir.call("reinterpret", bits, dtype=F32)


def exp_f32(x: PrimExpr) -> PrimExpr:
    """e^x of a float32 expression, as kiln.op.fast_math.fast_exp_f32."""
    def body(xv: tir.Var) -> PrimExpr:
        def with_n(n: tir.Var) -> PrimExpr:
            def with_f(f: tir.Var) -> PrimExpr:
                y = _horner(spec.EXP_POLY, f) * (f * f) + f + _c(1.0)
                return _let(_floor(n * _c(0.5)), lambda n1: _let(
                    (y * _pow2(n1)) * _pow2(n - n1), lambda out: tir.select(tir.ne(xv, xv), xv, out)))

            return _let((xc - n * _c(spec.LN2_HI)) - n * _c(spec.LN2_LO), with_f)

        xc = _clamp(xv, spec.EXP_LO, spec.EXP_HI)
        return _let(_let(xc * _c(spec.LOG2E) + _c(0.5), _floor), with_n)

    return _let(x, body)


def erf_f32(x: PrimExpr) -> PrimExpr:
    """erf(x) of a float32 expression, as kiln.op.fast_math.fast_erf_f32."""
    def body(xv: tir.Var) -> PrimExpr:
        def with_xc(xc: tir.Var) -> PrimExpr:
            def with_x2(x2: tir.Var) -> PrimExpr:
                r = (xc * _horner(spec.ERF_NUM, x2)) / _horner(spec.ERF_DEN, x2)
                return tir.select(te.fabs(xv) < _c(spec.ERF_TINY), xv * _c(spec.TWO_OVER_SQRT_PI), _clamp(r, -1.0, 1.0))

            return _let(xc * xc, with_x2)

        return _let(_clamp(xv, -spec.ERF_CLAMP, spec.ERF_CLAMP), with_xc)

    return _let(x, body)


def tanh_f32(x: PrimExpr) -> PrimExpr:
    """tanh(x) of a float32 expression, as kiln.op.fast_math.fast_tanh_f32."""
    def body(xv: tir.Var) -> PrimExpr:
        def with_xc(xc: tir.Var) -> PrimExpr:
            def with_x2(x2: tir.Var) -> PrimExpr:
                r = _clamp((xc * _horner(spec.TANH_NUM, x2)) / _horner(spec.TANH_DEN, x2), -1.0, 1.0)
                return tir.select(te.fabs(xv) < _c(spec.TANH_TINY), xv, r)

            return _let(xc * xc, with_x2)

        return _let(_clamp(xv, -spec.TANH_CLAMP, spec.TANH_CLAMP), with_xc)

    return _let(x, body)


# a max reduction that gcc vectorizes (te.max's kiln_max_f32 also propagates NaN: a branch); in a
# softmax a NaN still makes its row NaN, through the sum of the exps
fmax = te.CommReducer("fmax", lambda a, b: (tir.select(b > a, b, a),), lambda d: (tir.const(-math.inf, d),))


def vexp(x: PrimExpr) -> PrimExpr:
    """exp that vectorizes for float32; the libm call otherwise."""
    return exp_f32(x) if x.dtype == F32 else te.exp(x)


def verf(x: PrimExpr) -> PrimExpr:
    """erf that vectorizes for float32; the libm call otherwise."""
    return erf_f32(x) if x.dtype == F32 else te.erf(x)


def vtanh(x: PrimExpr) -> PrimExpr:
    """tanh that vectorizes for float32 (3.6e-7 absolute and relative error); the libm call otherwise."""
    return tanh_f32(x) if x.dtype == F32 else te.tanh(x)


# e^-87.3365 = 1.1755e-38 (FLT_MIN) is still a normal float32, so e^-|x| needs one power of two and
# no overflow side; below -87.3365 the sigmoid is subnormal and is flushed to 0
SIGMOID_CUT = 87.3365


def _exp_neg(a: PrimExpr) -> PrimExpr:
    """e^-a for 0 <= a <= SIGMOID_CUT (or NaN; garbage, never UB, above): the steps of exp_f32 without
    its clamp, its floor's correction (round to nearest keeps |f| <= ln2/2 too) and its split power of
    two (n >= -126). -a * log2(e) + 1.5 * 2^23 holds n in its low mantissa bits, so 2^n is those bits
    shifted into the exponent: no float-to-int conversion."""
    magic = _c(12582912.0)

    def with_r(r: tir.Var) -> PrimExpr:
        def with_n(n: tir.Var) -> PrimExpr:
            def with_f(f: tir.Var) -> PrimExpr:
                bits = tir.call("reinterpret", r, dtype="int32") + tir.IntImm(127, "int32")
                two_n = tir.call("reinterpret", tir.call("shift_left", bits, tir.IntImm(23, "int32"), dtype="int32"),
                                 dtype=F32)
                return (_horner(spec.EXP_POLY, f) * (f * f) + f + _c(1.0)) * two_n

            return _let((-a - n * _c(spec.LN2_HI)) - n * _c(spec.LN2_LO), with_f)

        return _let(r - magic, with_n)

    return _let(-a * _c(spec.LOG2E) + magic, with_r)


def sigmoid_f32(x: PrimExpr) -> PrimExpr:
    """1 / (1 + e^-x) of a float32 expression as e / (1 + e) or 1 / (1 + e) with e = e^-|x| <= 1: no
    overflow, so no clamps on both sides, no split power of two and no NaN select (NaN flows through).
    2.1x faster than 1 / (1 + exp_f32(-x)) in a conv's SiLU epilogue (0.5 vs 1.6 ns per element, one
    core), where it is most of the kernel's time. Within 2 ulps of float64 where the result is a normal
    float32; 0 below -87.3365 (where it is subnormal)."""
    def body(xv: tir.Var) -> PrimExpr:
        def with_a(a: tir.Var) -> PrimExpr:
            e = _let(_exp_neg(a), lambda ev: tir.select(a > _c(SIGMOID_CUT), _c(0.0), ev))
            return _let(e, lambda ev: tir.select(xv < _c(0.0), ev, _c(1.0)) / (_c(1.0) + ev))

        return _let(te.fabs(xv), with_a)

    return _let(x, body)


def vsigmoid(x: PrimExpr) -> PrimExpr:
    """1 / (1 + e^-x) that vectorizes for float32 (sigmoid_f32); kiln_sigmoid (libm) otherwise."""
    return sigmoid_f32(x) if x.dtype == F32 else te.sigmoid(x)
