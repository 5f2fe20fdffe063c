"""Bound inference of index expressions: a floormod by c drops the linear terms c divides, so a
blocked index (block * c + lane) % c bounds to its lane, and a compute_at producer read through it
covers one block per iteration, not all of them."""

import itertools

from kiln.te.bound import bound, canon
from kiln.tir import eval as tir_eval
from kiln.tir.expr import FloorMod, IntImm, Var

i, j, lane = Var("i"), Var("j"), Var("lane")
DOM = {i: (IntImm(0), IntImm(5)), j: (IntImm(0), IntImm(3))}


def _values(e, fixed: dict) -> list[int]:
    return [tir_eval.eval_expr(e, {i: a, j: b, **fixed}) for a, b in itertools.product(range(6), range(4))]


def test_terms_the_divisor_divides_drop_out():
    e = FloorMod((i * IntImm(6) + j) * IntImm(8) + lane + IntImm(17), IntImm(8))
    lo, hi = bound(e, DOM)
    assert canon(hi - lo) == IntImm(0)  # one value per lane, whatever i and j are
    for v in range(8):
        assert set(_values(e, {lane: v})) == {tir_eval.eval_expr(lo, {lane: v})} == {(v + 17) % 8}


def test_other_terms_keep_the_whole_range():
    assert bound(FloorMod(i * IntImm(3) + lane, IntImm(8)), DOM) == (IntImm(0), IntImm(7))
    lo, hi = bound(FloorMod(i * IntImm(16) - IntImm(5), IntImm(8)), DOM)
    assert (tir_eval.eval_expr(lo, {}), tir_eval.eval_expr(hi, {})) == (3, 3)
    assert set(_values(FloorMod(i * IntImm(16) - IntImm(5), IntImm(8)), {})) == {3}
