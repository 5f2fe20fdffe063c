"""Quotient and remainder terms of one dividend merge back: k*c*(y // c) + k*(y % c) -> k*y, with y // c as
the simplifier spells it under the bounds (x // 204 for (16x + j) // 3264, 0 <= j < 16), and
c*(q % b) + z % c -> (c*q + z % c) % (c*b) when c*q + z % c cannot wrap (always for q = z // c), each taken
only when it leaves fewer divisions. The flat offset of a reshape's unraveled index is then its plain
loop index."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tir import expr as E
from kiln.tir.arith import simplify
from kiln.tir.eval import eval_expr
from kiln.tir.functor import walk

X, J = E.Var("x", "int64"), E.Var("j", "int64")


def _c(v: int) -> E.IntImm:
    return E.IntImm(v, "int64")


def _divmods(e: E.PrimExpr) -> int:
    return sum(isinstance(n, (E.FloorDiv, E.FloorMod)) for n in walk(e))


def _reshape_offset(y: E.PrimExpr, hi: E.PrimExpr) -> E.PrimExpr:
    """[1,24,48,68] -> [1,6,13056] read at flat index y = 16x + j: the input index, flattened again."""
    return E.Add(E.Add(E.Mul(hi, _c(3264)), E.Mul(E.FloorMod(E.FloorDiv(y, _c(68)), _c(48)), _c(68))),
                 E.FloorMod(y, _c(68)))


def _same_values(a: E.PrimExpr, b: E.PrimExpr, xs, is_) -> None:
    for x, i in itertools.product(xs, is_):
        env = {X: x, J: i}
        assert eval_expr(a, env) == eval_expr(b, env), (x, i)


Y = E.Add(E.Mul(X, _c(16)), J)


def test_reshape_offset_is_the_flat_index_under_loop_bounds():
    e = _reshape_offset(Y, E.FloorDiv(X, _c(204)))
    for x_range in ((0, 4895), (-400, 4895)):  # floor division keeps the rule for negative x
        s = simplify(e, {X: x_range, J: (0, 15)})
        assert s == simplify(Y), s
        _same_values(s, e, (x_range[0], -1, 0, 203, 204, 4895), range(16))


def test_nested_remainders_merge_without_bounds():
    y = E.Var("y", "int64")
    e = E.Add(E.Mul(E.FloorMod(E.FloorDiv(y, _c(68)), _c(48)), _c(68)), E.FloorMod(y, _c(68)))
    assert simplify(e) == E.FloorMod(y, _c(3264))
    scaled = E.Add(E.Mul(e, _c(5)), _c(7))
    assert simplify(scaled) == simplify(E.Add(E.Mul(E.FloorMod(y, _c(3264)), _c(5)), _c(7)))


def test_lane_reaching_the_next_block_is_not_merged():
    e = _reshape_offset(Y, E.FloorDiv(X, _c(204)))
    s = simplify(e, {X: (0, 4895), J: (0, 16)})  # j == 16 crosses into x + 1's block: not 16x + j
    assert _divmods(s) > 0
    _same_values(s, e, (0, 203, 204, 4895), range(17))


def test_negative_lane_is_not_merged():
    e = _reshape_offset(Y, E.FloorDiv(X, _c(204)))
    s = simplify(e, {X: (0, 4895), J: (-1, 14)})
    assert _divmods(s) > 0
    _same_values(s, e, (0, 203, 204, 4895), range(-1, 15))


def test_remainder_spelled_apart_from_its_dividend_merges():
    """(8x + j) % 4 is spelled j % 4 and (8x + j) // 4 as 2x + j // 4: their sum still merges."""
    e = E.Add(E.Mul(E.FloorMod(E.Add(E.Mul(X, _c(2)), E.FloorDiv(J, _c(4))), _c(5)), _c(4)), E.FloorMod(J, _c(4)))
    s = simplify(e, {X: (0, 100), J: (0, 7)})
    assert s == E.FloorMod(simplify(E.Add(E.Mul(X, _c(8)), J)), _c(20)), s
    _same_values(s, e, (0, 1, 4, 5, 99, 100), range(8))


def test_remainder_merge_that_may_wrap_is_left_alone():
    e = E.Add(E.Mul(E.FloorMod(E.Add(E.Mul(X, _c(2)), E.FloorDiv(J, _c(4))), _c(5)), _c(4)), E.FloorMod(J, _c(4)))
    s = simplify(e, {J: (0, 7)})  # 8x wraps for unbounded x: (8x + j) % 20 is not 4 * ((2x + j // 4) % 5) + j % 4
    assert _divmods(s) == 3
    _same_values(s, e, (2 ** 61 + 3, 2 ** 62 + 1, -(2 ** 62) - 7), range(8))


def test_mismatched_coefficient_is_not_merged():
    y = E.Var("y", "int64")
    e = E.Add(E.Mul(E.FloorMod(E.FloorDiv(y, _c(68)), _c(48)), _c(67)), E.FloorMod(y, _c(68)))
    s = simplify(e)
    assert _divmods(s) == 3
    e2 = _reshape_offset(Y, E.FloorDiv(X, _c(205)))  # a different quotient than (16x + j) // 3264
    s2 = simplify(e2, {X: (0, 4895), J: (0, 15)})
    assert _divmods(s2) > 0
    _same_values(s2, e2, (0, 204, 205, 4895), range(16))


def test_wrapping_dividend_is_not_merged():
    """16x wraps for unbounded x: (16x + j) // 3264 is then not x // 204, and the sum must stay."""
    e = _reshape_offset(Y, E.FloorDiv(X, _c(204)))
    s = simplify(e, {J: (0, 15)})
    assert _divmods(s) > 0
    _same_values(s, e, (2 ** 60 + 5, 2 ** 62 - 1, -(2 ** 61) - 3), range(16))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 5, 7, 13, 16]), min_size=1, max_size=3), st.integers(1, 8),
       st.integers(-5, 5), st.integers(-3, 3))
def test_unravel_then_ravel_keeps_value(dims, lanes, k, lo_shift):
    """Any row-major unravel of y = lanes*x + j over dims, raveled back, is y when 0 <= j < lanes and
    y >= 0; with the lane range or x's range shifted, the value is still kept."""
    size = 1
    for d in dims:
        size *= d
    xs = max(size // lanes, 1)
    x_lo = min(lo_shift, 0) * 7
    i_hi = lanes - 1 + max(lo_shift, 0)
    y = E.Add(E.Mul(X, _c(lanes)), J)
    index, stride = [], 1
    for d in reversed(dims):
        index.append(E.Mul(E.FloorMod(E.FloorDiv(y, _c(stride)), _c(d)), _c(stride)))
        stride *= d
    flat = index[0]
    for t in index[1:]:
        flat = E.Add(flat, t)
    e = E.Add(E.Mul(flat, _c(k)), E.Mul(E.FloorDiv(y, _c(size)), _c(size * k)))
    bounds = {X: (x_lo, xs - 1), J: (0, i_hi)}
    s = simplify(e, bounds)
    if x_lo == 0 and i_hi < lanes:
        assert s == simplify(E.Mul(y, _c(k)), bounds), s
    for x in range(x_lo, xs):
        for i in range(i_hi + 1):
            env = {X: x, J: i}
            assert eval_expr(s, env) == eval_expr(e, env) == k * (lanes * x + i), (x, i)
