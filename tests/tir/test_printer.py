"""Printer smoke tests: readable, minimally parenthesized, used by str()."""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir.printer import func_str
from tests.tir import nests


def test_expressions():
    a, b, c = E.Var("a"), E.Var("b"), E.Var("c")
    assert str((a + b) * c) == "(a + b) * c"
    assert str(a - (b - c)) == "a - (b - c)"
    assert str(a - b - c) == "a - b - c"
    assert str(E.FloorDiv(a, E.IntImm(8)) + E.FloorMod(a, E.IntImm(8))) == "a // 8 + a % 8"
    assert str(E.TruncDiv(a, b)) == "truncdiv(a, b)"
    assert str(E.And(a < b, E.Not(E.eq(b, c)))) == "a < b && !(b == c)"
    assert str(E.select(a < b, 1.0, 2.0)) == "select(a < b, 1.0f, 2.0f)"
    assert str(E.cast("float32", E.IntImm(3, "int8"))) == "float32(int8(3))"
    assert str(E.Ramp(a, E.IntImm(1), 8)) == "ramp(a, 1, 8)"
    assert str(E.Broadcast(E.FloatImm(0.5, "float16"), 4)) == "broadcast(float16(0.5), 4)"


def test_loop_nest():
    A, B, C = nests.buf("A", 64), nests.buf("B", 64), nests.buf("C", 64)
    i = E.Var("i")
    f = nests.PrimFunc("add", (A, B, C), nests.loop(i, 64, nests.BufferStore(C, A[i] + B[i], (i,)), nests.P))
    assert str(f) == func_str(f) == (
        "func add(A: float32[64], B: float32[64], C: float32[64]) {\n"
        "  for (i, 0, 64) parallel {\n"
        "    C[i] = A[i] + B[i]\n"
        "  }\n"
        "}")
    assert str(f.body).startswith("for (i, 0, 64) parallel {")


def test_every_nest_prints():
    for make in nests.NESTS.values():
        text = str(make())
        assert text.startswith("func ") and text.endswith("}")
    assert "if (io * 8 + ii < 100) {" in str(nests.split_guard())
    assert "allocate acc: float32[1] local {" in str(nests.row_sum_local())
