"""kiln.te.eval semantics the operator tests lean on."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import te, tir
from kiln.te.eval import evaluate


def test_division_semantics():
    a = te.placeholder((4,), "int32", "a")
    b = te.placeholder((4,), "int32", "b")
    ops = [tir.TruncDiv, tir.TruncMod, tir.FloorDiv, tir.FloorMod]
    outs = [te.compute((4,), lambda i, op=op: op(a(i), b(i))) for op in ops]
    x, y = np.array([7, -7, 7, -7], np.int32), np.array([2, 2, -2, -2], np.int32)
    got = evaluate(outs, {a: x, b: y})
    want = [np.trunc(x / y), np.fmod(x, y), x // y, x % y]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.astype(np.int32))


def test_symbolic_dims_and_guarded_select():
    n = tir.Var("n")
    x = te.placeholder((n,), "float32", "x")
    shifted = te.compute((n,), lambda i: tir.select(i > 0, x(i - 1), tir.const(0.0)))
    v = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(evaluate(shifted, {x: v}, {n: 5}), [0, 0, 1, 2, 3])
    unguarded = te.compute((n,), lambda i: x(i - 1))
    with pytest.raises(IndexError):
        evaluate(unguarded, {x: v}, {n: 5})


def test_reducers():
    x = te.placeholder((3, 4), "float32", "x")
    k = te.reduce_axis(4)
    s = te.compute((3,), lambda i: te.sum(x(i, k), k, where=k.var < 2))
    idx, val = te.compute((3,), lambda i: te.argmax((k.var, x(i, k)), k))
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    got = evaluate([s, idx, val], {x: a})
    np.testing.assert_allclose(got[0], a[:, :2].sum(1), rtol=1e-6)
    np.testing.assert_array_equal(got[1], a.argmax(1))
    np.testing.assert_array_equal(got[2], a.max(1))
