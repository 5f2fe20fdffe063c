"""Hand-built tir loop nests for pass tests, each with a way to make its arguments."""

from __future__ import annotations

import numpy as np

from kiln.tir import Allocate, Buffer, BufferStore, FloatImm, For, ForKind, IfThenElse, IntImm, PrimFunc, Var, seq
from kiln.tir import expr as E

S, P, V, U = ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED


def loop(v: Var, n, body, kind=S, lo=0) -> For:
    return For(v, IntImm(lo) if isinstance(lo, int) else lo, IntImm(n) if isinstance(n, int) else n, kind, body)


def buf(name: str, *shape, dtype: str = "float32", **kw) -> Buffer:
    return Buffer(name, tuple(IntImm(d) if isinstance(d, int) else d for d in shape), dtype, **kw)


def copy2d(kind=V) -> PrimFunc:
    A, B = buf("A", 8, 16), buf("B", 8, 16)
    i, j = Var("i"), Var("j")
    return PrimFunc("copy", (A, B), loop(i, 8, loop(j, 16, BufferStore(B, A[i, j] + 1.0, (i, j)), kind), P))


def transpose(kind=V) -> PrimFunc:
    A, B = buf("A", 8, 16), buf("B", 16, 8)
    i, j = Var("i"), Var("j")
    return PrimFunc("transpose", (A, B), loop(i, 16, loop(j, 8, BufferStore(B, A[j, i], (i, j)), kind)))


def matmul(inner=V, kkind=U) -> PrimFunc:
    """C = A @ B with the reduction initialised in place; k unrolled by 4 inside a serial ko loop."""
    A, B, C = buf("A", 8, 12), buf("B", 12, 16), buf("C", 8, 16)
    i, j, ko, ki = Var("i"), Var("j"), Var("ko"), Var("ki")
    k = ko * 4 + ki
    init = loop(j, 16, BufferStore(C, FloatImm(0.0), (i, j)), inner)
    upd = BufferStore(C, C[i, j] + A[i, k] * B[k, j], (i, j))
    return PrimFunc("matmul", (A, B, C), loop(i, 8, seq(init, loop(ko, 3, loop(ki, 4, loop(j, 16, upd, inner), kkind)))))


def row_sum_local(kind=V) -> PrimFunc:
    """out[i] = sum_j A[i, j] through a local accumulator; the vectorized j loop reduces (scalar)."""
    A, out = buf("A", 6, 10), buf("out", 6)
    acc = buf("acc", 1, scope="local")
    i, j = Var("i"), Var("j")
    body = Allocate(acc, seq(BufferStore(acc, FloatImm(0.0), (IntImm(0),)),
                             loop(j, 10, BufferStore(acc, acc[0] + A[i, j], (IntImm(0),)), kind),
                             BufferStore(out, acc[0], (i,))))
    return PrimFunc("row_sum", (A, out), loop(i, 6, body, P))


def split_guard(n: int = 100, factor: int = 8, kind=V, outer=P) -> PrimFunc:
    """B[x] = A[x] * 2 over x < n, split by `factor` with a tail guard."""
    A, B = buf("A", n), buf("B", n)
    io, ii = Var("io"), Var("ii")
    x = io * factor + ii
    body = IfThenElse(x < n, BufferStore(B, A[x] * 2.0, (x,)))
    return PrimFunc("scale", (A, B), loop(io, -(-n // factor), loop(ii, factor, body, kind), outer))


def split_guard_symbolic(factor: int = 4) -> PrimFunc:
    """The same over a symbolic length n (a parameter and the buffers' dimension)."""
    n = Var("n")
    A, B = buf("A", n), buf("B", n)
    io, ii = Var("io"), Var("ii")
    x = io * factor + ii
    body = IfThenElse(x < n, BufferStore(B, A[x] + 1.0, (x,)))
    return PrimFunc("scale_n", (A, B, n), loop(io, (n + factor - 1) // factor, loop(ii, factor, body, V)))


def strided_copy() -> PrimFunc:
    """Reads a column-major view through explicit strides."""
    A = buf("A", 4, 6, strides=(IntImm(1), IntImm(4)))
    B = buf("B", 4, 6)
    i, j = Var("i"), Var("j")
    return PrimFunc("strided", (A, B), loop(i, 4, loop(j, 6, BufferStore(B, A[i, j], (i, j)), U)))


def vector_ops() -> PrimFunc:
    """Selects, casts of the (int32) loop index and intrinsics inside a vectorized loop."""
    A, B = buf("A", 4, 8), buf("B", 4, 8)
    i, j = Var("i", "int32"), Var("j", "int32")
    x = A[i, j]
    val = E.select(x > 0.0, E.call("exp", x), E.cast("float32", i * 8 + j) * 0.5)
    return PrimFunc("vector_ops", (A, B), loop(i, 4, loop(j, 8, BufferStore(B, val, (i, j)), V, lo=E.IntImm(0, "int32")),
                                               lo=E.IntImm(0, "int32")))


def trivial_loops() -> PrimFunc:
    """A loop of extent 1, an empty loop and decided conditionals, for simplify to remove."""
    A = buf("A", 4)
    i, k, z = Var("i"), Var("k"), Var("z")
    body = seq(loop(k, 1, BufferStore(A, A[k] + 1.0, (k,))),
               loop(z, 0, BufferStore(A, FloatImm(9.0), (z,))),
               loop(i, 4, IfThenElse(i < 4, BufferStore(A, A[i] * 2.0, (i,)), BufferStore(A, FloatImm(7.0), (i,)))),
               loop(i, 4, IfThenElse(i > 9, BufferStore(A, FloatImm(5.0), (i,)))))
    return PrimFunc("trivial", (A,), body)


NESTS = {"vector_ops": vector_ops, "trivial_loops": trivial_loops, "copy2d": copy2d, "transpose": transpose, "matmul": matmul, "row_sum_local": row_sum_local,
         "split_guard": split_guard, "split_guard_7": lambda: split_guard(7, 4),
         "split_guard_serial": lambda: split_guard(100, 8, V, S),
         "split_guard_symbolic": split_guard_symbolic, "strided_copy": strided_copy}


def make_args(func: PrimFunc, rng: np.random.Generator, n: int = 10) -> list:
    """Random inputs for every buffer parameter; `n` for a scalar size parameter."""
    shapes = {}
    for p in func.params:
        if isinstance(p, Buffer):
            dims = [d.value if isinstance(d, IntImm) else n for d in p.shape]
            shapes[p] = dims
    return [rng.standard_normal(shapes[p]).astype(p.dtype) if isinstance(p, Buffer) else n for p in func.params]
