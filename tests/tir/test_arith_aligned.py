"""floordiv/floormod of g * q + r with 0 <= r < g and g dividing the divisor: (g*q + r) // c == q // (c/g)
and (g*q + r) % c == g * (q % (c/g)) + r. The flat index of a vectorized run (8 * i + j with j < 8) then
divides without j, so a reshape's loads stay contiguous in j."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import expr as E
from kiln.tir.arith import simplify
from kiln.tir.eval import eval_expr
from kiln.tir.functor import uses_var

IV, JV = E.Var("i", "int64"), E.Var("j", "int64")


def _c(v: int) -> E.IntImm:
    return E.IntImm(v, "int64")


def _uses(e: E.PrimExpr, v: E.Var) -> bool:
    return uses_var(e, v)


def test_flat_index_of_a_vector_run_divides_without_the_lane():
    flat = E.Add(E.Mul(IV, _c(8)), JV)
    bounds = {IV: (0, 9455), JV: (0, 7)}
    div = simplify(E.FloorDiv(flat, _c(384)), bounds)
    mod = simplify(E.FloorMod(flat, _c(384)), bounds)
    assert div == simplify(E.FloorDiv(IV, _c(48)), bounds)
    assert not _uses(div, JV)
    for i, j in itertools.product((0, 1, 47, 48, 95, 9455), range(8)):
        env = {IV: i, JV: j}
        assert eval_expr(div, env) == (8 * i + j) // 384
        assert eval_expr(mod, env) == (8 * i + j) % 384


def test_a_lane_that_may_reach_the_block_is_left_alone():
    flat = E.Add(E.Mul(IV, _c(8)), JV)
    div = simplify(E.FloorDiv(flat, _c(384)), {IV: (0, 100), JV: (0, 8)})
    assert _uses(div, JV)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.integers(-3, 5), st.integers(1, 7), st.integers(-20, 20), st.integers(0, 6),
       st.integers(1, 5), st.integers(-30, 30))
def test_aligned_divmod_keeps_value(g_exp, k, cmul, const, jhi, ilen, ilo):
    g = 2 ** (g_exp % 4 + 1)
    c = g * cmul
    jhi = min(jhi, g - 1)
    e = E.Add(E.Add(E.Mul(IV, _c(g * k)), JV), _c(const * g))
    bounds = {IV: (ilo, ilo + ilen), JV: (0, jhi)}
    for op, ref in ((E.FloorDiv, lambda a: a // c), (E.FloorMod, lambda a: a % c)):
        s = simplify(op(e, _c(c)), bounds)
        for i in range(ilo, ilo + ilen + 1):
            for j in range(jhi + 1):
                assert eval_expr(s, {IV: i, JV: j}) == ref(g * k * i + j + const * g), (op, s)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_both_index_dtypes(dtype):
    i, j = E.Var("i", dtype), E.Var("j", dtype)
    s = simplify(E.FloorDiv(E.Add(E.Mul(i, E.IntImm(16, dtype)), j), E.IntImm(64, dtype)), {i: (0, 99), j: (0, 15)})
    assert not _uses(s, j)
