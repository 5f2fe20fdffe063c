"""The simplifier keeps meaning (hypothesis), reaches canonical forms, and applies div/mod,
min/max and comparison rules only where bounds allow, integer wraparound included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import expr as E
from kiln.tir.arith import Simplifier, prove, simplify
from kiln.tir.eval import eval_expr
from tests.tir.exprs import DTYPES, VARS, int_exprs, points, var_bounds


@st.composite
def expr_case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    bounds = draw(var_bounds(dtype))
    return draw(int_exprs(dtype)), bounds, draw(points(dtype, bounds))


@settings(max_examples=200, deadline=None)
@given(expr_case())
def test_simplify_keeps_value(case):
    e, bounds, envs = case
    s = simplify(e, bounds)
    assert s.dtype == e.dtype
    for env in envs:
        assert eval_expr(s, env) == eval_expr(e, env), f"{e}  ->  {s}  at {env}"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(("int64", "int32")), st.lists(st.integers(-9, 9), min_size=3, max_size=3),
       st.permutations(range(3)), st.integers(-50, 50))
def test_linear_sums_are_canonical(dtype, coeffs, order, const):
    x = VARS[dtype]
    terms = [E.Mul(x[k], E.IntImm(coeffs[k], dtype)) for k in range(3)]
    e1 = E.Add(terms[0] + terms[1], terms[2] + const)
    e2 = E.IntImm(const, dtype)
    for k in order:  # another order, coefficients on the other side
        e2 = E.Add(E.Mul(E.IntImm(coeffs[k], dtype), x[k]), e2)
    assert simplify(e1) == simplify(e2)
    assert simplify(e1 - e2) == E.IntImm(0, dtype)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 16), st.integers(1, 40), st.integers(1, 5))
def test_divmod_identities(c, hi, a):
    i, j, x = E.Var("i"), E.Var("j"), E.Var("x")
    b = {i: (0, hi), j: (0, c - 1)}
    e = i * c + j
    assert simplify(E.FloorDiv(e, E.IntImm(c)), b) == i
    assert simplify(E.FloorMod(e, E.IntImm(c)), b) == (j if c > 1 else E.IntImm(0))
    assert simplify(E.FloorDiv(x, E.IntImm(c)) * c + E.FloorMod(x, E.IntImm(c))) == x
    assert simplify(E.FloorDiv(E.FloorDiv(x, E.IntImm(a)), E.IntImm(c))) == simplify(E.FloorDiv(x, E.IntImm(a * c)))
    assert simplify(E.FloorMod(E.FloorMod(x, E.IntImm(a * c)), E.IntImm(c))) == simplify(E.FloorMod(x, E.IntImm(c)))


def test_canonical_examples():
    i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
    assert simplify((i * 4 + j) - (j + i * 4)) == E.IntImm(0)
    assert simplify((i + 1) * (j + 2) - i * j) == simplify(j + i * 2 + 2)
    assert str(simplify(k - (k // 8) * 8)) == "k % 8"
    assert str(simplify((i * 16 + j * 2) // 4, {i: (0, 99), j: (0, 7)})) == "i * 4 + j // 2"


def test_bounds_decide_min_max_compare_select():
    i, j = E.Var("i"), E.Var("j")
    b = {i: (0, 15), j: (0, 7)}
    assert simplify(E.min_(i, 20), b) == i
    assert simplify(E.max_(i * 8 + j, 127), b) == E.IntImm(127)
    assert prove(i * 8 + j < 128, b) and not prove(i * 8 + j < 127, b)
    assert simplify(E.eq(i - i, 0)) == E.IntImm(1, "bool")
    assert simplify(E.select(i < 16, 1.0, 2.0), b) == E.FloatImm(1.0)
    assert simplify(E.min_(i // 4, (i + 3) // 4), b) == simplify(i // 4)


def test_truncdiv_becomes_floordiv_when_nonnegative():
    i = E.Var("i")
    assert simplify(E.TruncDiv(i * 4 + 3, E.IntImm(4)), {i: (0, 9)}) == i
    assert isinstance(simplify(E.TruncDiv(i * 4 + 3, E.IntImm(4)), {i: (-9, 9)}), E.TruncDiv)


def test_wraparound_left_alone():
    x = E.Var("x", "int32")
    assert not isinstance(simplify(x + 1 > x), E.IntImm)  # false at INT32_MAX
    e = E.FloorDiv(x * 8 + 1, E.IntImm(8, "int32"))
    assert simplify(e) != x  # x * 8 may wrap
    assert eval_expr(simplify(e), {x: 2**30}) == eval_expr(e, {x: 2**30})
    assert simplify(E.FloorDiv(x * 8 + 1, E.IntImm(8, "int32")), {x: (0, 1000)}) == x


@pytest.mark.parametrize("dtype,a,b,op,expected", [
    ("int8", 127, 1, E.Add, -128), ("uint8", 0, 1, E.Sub, 255), ("int32", -7, 2, E.TruncDiv, -3),
    ("int32", -7, 2, E.FloorDiv, -4), ("int32", -7, 2, E.TruncMod, -1), ("int32", -7, 2, E.FloorMod, 1),
    ("int64", 2**62, 4, E.Mul, 0), ("int16", 300, 300, E.Mul, 24464),
])
def test_integer_folding(dtype, a, b, op, expected):
    assert simplify(op(E.IntImm(a, dtype), E.IntImm(b, dtype))) == E.IntImm(expected, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_float_folding_matches_evaluator(dtype):
    a, b = E.FloatImm(0.1, dtype), E.FloatImm(3.3, dtype)
    for e in (a + b, a * b, a / b, a - b, E.min_(a, b), E.call("exp", b), E.cast("int32", b * 10.0), a < b):
        s = simplify(e)
        assert isinstance(s, (E.FloatImm, E.IntImm)) and s.dtype == e.dtype
        assert np.asarray(eval_expr(s)).tobytes() == np.asarray(eval_expr(e)).tobytes()


def test_division_by_zero_not_folded():
    e = E.FloorDiv(E.IntImm(1), E.IntImm(0))
    assert simplify(e) == e


def test_vector_algebra():
    i = E.Var("i")
    r = E.Ramp(i * 8, E.IntImm(1), 8)
    assert simplify(r + E.Broadcast(E.IntImm(3), 8)) == E.Ramp(i * 8 + 3, E.IntImm(1), 8)
    assert simplify(r * E.Broadcast(E.IntImm(2), 8)) == E.Ramp(i * 16, E.IntImm(2), 8)
    b = {i: (0, 99)}
    assert simplify(E.FloorDiv(r, E.Broadcast(E.IntImm(8), 8)), b) == E.Broadcast(i, 8)
    assert simplify(E.FloorMod(r, E.Broadcast(E.IntImm(8), 8)), b) == E.Ramp(E.IntImm(0), E.IntImm(1), 8)


def test_a_decided_select_never_simplifies_its_other_branch(monkeypatch):
    """An unrolled tile picks one of many sums by a select on a constant index: only that sum is worked on."""
    from kiln.tir.arith import Simplifier
    from kiln.tir.functor import free_vars
    i, dead = E.Var("i"), E.Var("dead")
    seen = []
    real = Simplifier._rewrite
    monkeypatch.setattr(Simplifier, "_rewrite", lambda self, e: seen.append(e) or real(self, e))
    e = E.select(E.eq(E.IntImm(0) * 4 + 2, 2), (i + 1) * 1 - 1, dead * 2 + dead)
    assert simplify(e) == i
    assert seen and all(dead not in free_vars(x) for x in seen)


def test_a_scope_has_its_own_memo_and_the_outer_one_comes_back_after_it():
    """One node simplified outside, inside and again outside a scope that bounds its var: each answer
    is the one its bounds give (the memo of a scope never answers outside it)."""
    i = E.Var("i")
    e = E.FloorDiv(i, E.IntImm(4))
    sim = Simplifier()
    assert sim(e) == e
    with sim.scope(i, (0, 3)):
        assert sim(e) == E.IntImm(0)
        with sim.scope(i, (4, 7)):
            assert sim(e) == E.IntImm(1)
        assert sim(e) == E.IntImm(0)
    assert sim(e) == e
