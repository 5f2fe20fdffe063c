"""The reference evaluator: C and floor division, wraparound, half types, vectors, memory."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kiln.tir import expr as E
from kiln.tir.eval import eval_expr, run
from tests.tir import nests


@pytest.mark.parametrize("a,b", [(7, 2), (-7, 2), (7, -2), (-7, -2)])
def test_division_semantics(a, b):
    x, y = E.IntImm(a, "int32"), E.IntImm(b, "int32")
    assert eval_expr(E.TruncDiv(x, y)) == int(a / b)
    assert eval_expr(E.TruncMod(x, y)) == a - int(a / b) * b
    assert eval_expr(E.FloorDiv(x, y)) == a // b
    assert eval_expr(E.FloorMod(x, y)) == a % b
    assert eval_expr(E.Div(x, y)) == int(a / b)  # Div on integers is C's


def test_integer_wraparound_and_dtypes():
    x = E.Var("x", "int8")
    assert eval_expr(x + 1, {x: 127}) == -128
    assert eval_expr(E.IntImm(300, "int8")) == 44
    u = E.Var("u", "uint8")
    assert eval_expr(u - 1, {u: 0}) == 255
    assert eval_expr(E.cast("int8", E.IntImm(200, "int32"))) == -56


def test_half_types_round_each_op():
    for dt, npdt in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        a, b = E.FloatImm(1.0, dt), E.FloatImm(1e-3, dt)
        out = eval_expr(a + b)
        assert out.dtype == np.dtype(npdt) and out == npdt(1.0) + npdt(1e-3)
        assert eval_expr(E.call("exp", b)).dtype == np.dtype(npdt)


def test_vectors():
    i = E.Var("i")
    r = E.Ramp(i * 4, E.IntImm(2), 4)
    np.testing.assert_array_equal(eval_expr(r, {i: 1}), [4, 6, 8, 10])
    np.testing.assert_array_equal(eval_expr(r + E.Broadcast(E.IntImm(1), 4), {i: 0}), [1, 3, 5, 7])
    assert E.lanes_of((r < E.Broadcast(E.IntImm(5), 4)).dtype) == 4


def test_intrinsics_follow_c():
    assert eval_expr(E.call("round", E.FloatImm(2.5))) == 3.0  # half away from zero, unlike numpy
    assert eval_expr(E.call("nearbyint", E.FloatImm(2.5))) == 2.0
    assert abs(eval_expr(E.call("erf", E.FloatImm(0.5, "float64"))) - 0.5204998778) < 1e-9


def test_run_checks_arguments_and_bounds():
    f = nests.copy2d()
    with pytest.raises(TypeError, match="A must be a C-contiguous float32"):
        run(f, np.zeros((8, 16), np.float64), np.zeros((8, 16), np.float32))
    with pytest.raises(ValueError, match="needs 128"):
        run(f, np.zeros(10, np.float32), np.zeros((8, 16), np.float32))
    A = nests.buf("A", 4)
    i = E.Var("i")
    bad = nests.PrimFunc("bad", (A,), nests.loop(i, 5, nests.BufferStore(A, E.FloatImm(1.0), (i,))))
    with pytest.raises(IndexError, match="out of bounds of A"):
        run(bad, np.zeros(4, np.float32))


def test_run_computes():
    f = nests.copy2d()
    a, b = nests.make_args(f, np.random.default_rng(0))
    run(f, a, b)
    np.testing.assert_array_equal(b, a + np.float32(1.0))


def test_all_of_is_the_conjunction():
    i = E.Var("i", "int64")
    conds = [i > 1, i < 5, E.ne(i, 3)]
    for v in range(-1, 8):
        assert bool(eval_expr(E.all_of(conds), {i: v})) == (1 < v < 5 and v != 3)
    assert bool(eval_expr(E.all_of([]), {}))
