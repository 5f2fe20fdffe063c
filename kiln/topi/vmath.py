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


def vsigmoid(x: PrimExpr) -> PrimExpr:
    """1 / (1 + e^-x) that vectorizes for float32, as kiln.op.fast_math.fast_sigmoid_f32 (1.5e-7
    relative); kiln_sigmoid (libm) otherwise."""
    return _c(1.0) / (_c(1.0) + exp_f32(-x)) if x.dtype == F32 else te.sigmoid(x)
