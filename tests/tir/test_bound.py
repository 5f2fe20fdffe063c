"""Bound analysis is sound: every evaluated value lies in the computed interval."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import expr as E
from kiln.tir.bound import bound, dtype_range
from kiln.tir.eval import eval_expr
from tests.tir.exprs import DTYPES, int_exprs, points, var_bounds


@st.composite
def bound_case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    bounds = draw(var_bounds(dtype))
    return draw(int_exprs(dtype)), bounds, draw(points(dtype, bounds))


@settings(max_examples=200, deadline=None)
@given(bound_case())
def test_bound_is_sound(case):
    e, bounds, envs = case
    lo, hi = bound(e, bounds)
    for env in envs:
        assert lo <= int(eval_expr(e, env)) <= hi, f"{e} at {env} outside [{lo}, {hi}]"


def test_bound_examples():
    i, j = E.Var("i"), E.Var("j")
    b = {i: (0, 15), j: (0, 7)}
    assert bound(i * 8 + j, b) == (0, 127)
    assert bound(E.FloorMod(i * 8 + j, E.IntImm(8)), b) == (0, 7)
    assert bound(E.FloorDiv(i - 20, E.IntImm(4)), b) == (-5, -2)
    assert bound(E.Ramp(i, E.IntImm(2), 4), b) == (0, 21)
    x = E.Var("x", "int8")
    assert bound(x * 2, {x: (0, 100)}) == dtype_range("int8")  # may wrap
