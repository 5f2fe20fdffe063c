"""Hypothesis strategies: random integer tir expressions over a few Vars, bounds and points."""

from __future__ import annotations

from hypothesis import strategies as st

from kiln.tir import expr as E
from kiln.tir.bound import dtype_range
from kiln.tir.eval import wrap_int

DTYPES = ("int64", "int32", "int8", "uint8")
VARS = {dt: tuple(E.Var(n, dt) for n in "xyz") for dt in DTYPES}


def _imm(v: int, dtype: str) -> E.IntImm:
    return E.IntImm(wrap_int(v, dtype), dtype)


def _int_exprs(dtype: str, max_leaves: int = 12) -> st.SearchStrategy[E.PrimExpr]:
    leaves = st.one_of(st.sampled_from(VARS[dtype]), st.integers(-20, 20).map(lambda v: _imm(v, dtype)))
    divisors = st.sampled_from([1, 2, 3, 4, 7, 8, 16, -1, -3, -8]).map(lambda v: _imm(v, dtype))

    def extend(kids):
        arith = st.builds(lambda op, a, b: op(a, b), st.sampled_from([E.Add, E.Sub, E.Mul, E.Min, E.Max]), kids, kids)
        div = st.builds(lambda op, a, b: op(a, b),
                        st.sampled_from([E.FloorDiv, E.FloorMod, E.TruncDiv, E.TruncMod]), kids, divisors)
        sel = st.builds(lambda op, a, b, t, f: E.Select(op(a, b), t, f),
                        st.sampled_from([E.LT, E.LE, E.EQ, E.NE, E.GT, E.GE]), kids, kids, kids, kids)
        return st.one_of(arith, arith, div, div, sel)

    return st.recursive(leaves, extend, max_leaves=max_leaves)


_STRATEGIES = {dt: _int_exprs(dt) for dt in DTYPES}


def int_exprs(dtype: str) -> st.SearchStrategy[E.PrimExpr]:
    """Random expressions of `dtype`: + - * min max, div/mod by constants, selects on comparisons."""
    return _STRATEGIES[dtype]


@st.composite
def var_bounds(draw, dtype: str) -> dict:
    """Either no bound, or a narrow interval, for each Var of `dtype`."""
    lo_t, hi_t = dtype_range(dtype)
    out = {}
    for v in VARS[dtype]:
        if draw(st.booleans()):
            lo = draw(st.integers(max(lo_t, -40), min(hi_t, 40)))
            out[v] = (lo, min(hi_t, lo + draw(st.integers(0, 30))))
    return out


@st.composite
def points(draw, dtype: str, bounds: dict, n: int = 6) -> list[dict]:
    """Values of every Var of `dtype` inside `bounds` (the dtype's range, extremes favoured)."""
    lo_t, hi_t = dtype_range(dtype)
    out = []
    for _ in range(n):
        env = {}
        for v in VARS[dtype]:
            lo, hi = bounds.get(v, (lo_t, hi_t))
            env[v] = draw(st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, max(lo, min(hi, 0))])))
        out.append(env)
    return out
