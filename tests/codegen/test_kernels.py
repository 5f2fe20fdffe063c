"""Hand-built tir kernels compiled to C and compared with numpy."""

import numpy as np
import pytest

from kiln.codegen import generate
from kiln.tir import (
    Allocate,
    Buffer,
    BufferStore,
    Cast,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IntImm,
    PrimFunc,
    Ramp,
    TruncDiv,
    TruncMod,
    Var,
    seq,
)

from .conftest import requires_gcc

pytestmark = requires_gcc
rng = np.random.default_rng(0)


def loop(i, n, body, kind=ForKind.SERIAL, **ann):
    return For(i, IntImm(0), n if not isinstance(n, int) else IntImm(n), kind, body, tuple(ann.items()))


def test_elementwise_add_with_symbolic_size(compile_fn):
    n, i = Var("n"), Var("i")
    A, B, C = (Buffer(x, (n,), "float32") for x in "ABC")
    f = compile_fn(PrimFunc("add", (A, B, C, n), loop(i, n, BufferStore(C, A[i] + B[i], (i,)), ForKind.PARALLEL)))
    for size in (1, 37, 1000):
        a, b = rng.random(size, np.float32), rng.random(size, np.float32)
        c = np.empty_like(a)
        f(a, b, c, size)
        np.testing.assert_array_equal(c, a + b)


def _matmul(M, N, K, flat: bool):
    """C = A @ B: parallel rows, a reduction over k with init, a vectorized inner j loop.
    `flat` indexes 1-D (as after storage flattening) instead of 2-D."""
    i, j, k = Var("i"), Var("j"), Var("k")
    shape = (lambda *d: (IntImm(int(np.prod(d))),)) if flat else (lambda *d: tuple(IntImm(x) for x in d))
    A, B, C = Buffer("A", shape(M, K), "float32"), Buffer("B", shape(K, N), "float32"), Buffer("C", shape(M, N), "float32")
    at = (lambda buf, r, c, w: buf[r * w + c]) if flat else (lambda buf, r, c, w: buf[r, c])
    idx = (lambda r, c, w: (r * w + c,)) if flat else (lambda r, c, w: (r, c))
    body = seq(
        loop(j, N, BufferStore(C, FloatImm(0.0), idx(i, j, N))),
        loop(k, K, loop(j, N, BufferStore(C, at(C, i, j, N) + at(A, i, k, K) * at(B, k, j, N), idx(i, j, N)),
                        ForKind.VECTORIZED)))
    return PrimFunc("matmul", (A, B, C), loop(i, M, body, ForKind.PARALLEL), (("noalias", True),))


@pytest.mark.parametrize("flat", [False, True])
def test_matmul_parallel_vectorized(compile_fn, flat):
    f = compile_fn(_matmul(33, 40, 17, flat))
    a, b = rng.random((33, 17), np.float32), rng.random((17, 40), np.float32)
    c = np.empty((33, 40), np.float32)
    f(a, b, c)  # a flattened buffer takes any C-contiguous array of its size
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_row_sum_reduction_with_init(compile_fn):
    n, m, i, k = Var("n"), Var("m"), Var("i"), Var("k")
    A, B = Buffer("A", (n, m), "float64"), Buffer("B", (n,), "float64")
    body = loop(i, n, seq(BufferStore(B, FloatImm(0.0, "float64"), (i,)),
                          loop(k, m, BufferStore(B, B[i] + A[i, k], (i,)))))
    f = compile_fn(PrimFunc("rowsum", (A, B, n, m), body))
    a = rng.random((5, 9))
    b = np.empty(5)
    f(a, b, 5, 9)
    np.testing.assert_allclose(b, a.sum(1))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "float32"])
def test_trunc_vs_floor_division(compile_fn, dtype):
    i = Var("i")
    A, B = Buffer("A", (IntImm(8),), dtype), Buffer("B", (IntImm(8),), dtype)
    outs = [Buffer(f"O{k}", (IntImm(8),), dtype) for k in range(4)]
    ops = (TruncDiv, TruncMod, FloorDiv, FloorMod)
    body = loop(i, 8, seq(*(BufferStore(o, op(A[i], B[i]), (i,)) for o, op in zip(outs, ops))))
    f = compile_fn(PrimFunc("divs", (A, B, *outs), body))
    a = np.array([7, -7, 7, -7, 0, -8, 9, -1], dtype)
    b = np.array([2, 2, -2, -2, 3, 3, -4, 5], dtype)
    got = [np.empty(8, dtype) for _ in range(4)]
    f(a, b, *got)
    if dtype == "float32":
        expect = [np.trunc(a / b), np.fmod(a, b), np.floor(a / b), np.mod(a, b)]
    else:
        expect = [np.fix(a / b).astype(dtype), np.fmod(a, b), np.floor_divide(a, b), np.mod(a, b)]
    for g, e in zip(got, expect):
        np.testing.assert_array_equal(g, e)


def test_allocate_stack_and_heap(compile_fn):
    """A constant-size temp (stack), a symbolic-size one (heap) and a per-thread temp in a parallel loop."""
    n, i, j = Var("n"), Var("i"), Var("j")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    T = Buffer("T", (n,), "float32", scope="local")
    S = Buffer("S", (IntImm(4),), "float32", scope="local")
    rev = Allocate(T, seq(loop(i, n, BufferStore(T, A[i] * 2.0, (i,))),
                          loop(i, n, BufferStore(B, T[n - 1 - i], (i,)))))
    per_thread = loop(i, n, Allocate(S, seq(loop(j, 4, BufferStore(S, B[i] + Cast("float32", j), (j,))),
                                            BufferStore(B, S[0] + S[3], (i,)))), ForKind.PARALLEL)
    f = compile_fn(PrimFunc("temps", (A, B, n), seq(rev, per_thread)))
    a = rng.random(50, np.float32)
    b = np.empty_like(a)
    f(a, b, 50)
    np.testing.assert_allclose(b, 2 * (2 * a[::-1]) + 3, rtol=1e-6)


def test_scalar_params_and_boundary_checks(compile_fn):
    from kiln.errors import InputError

    n, i, alpha = Var("n"), Var("i"), Var("alpha", "float32")
    A, B = Buffer("A", (n, IntImm(3)), "float32"), Buffer("B", (n, IntImm(3)), "float32")
    j = Var("j")
    f = compile_fn(PrimFunc("scale", (A, B, alpha, n),
                            loop(i, n, loop(j, 3, BufferStore(B, A[i, j] * alpha, (i, j))))))
    a = rng.random((4, 3), np.float32)
    b = np.empty_like(a)
    f(a, b, 0.5, 4)
    np.testing.assert_allclose(b, a * 0.5)
    bad = [((a.astype(np.float64), b, 0.5, 4), "dtype float32"), ((a, b, 0.5, 5), "size n = 5"),
           ((a[:, :2], b[:, :2], 0.5, 4), "size 3"), ((a.T.copy().T, b, 0.5, 4), "C-contiguous"),
           ((a, b, "x", 4), "must be a number"), ((a, b, 0.5), "takes 4 arguments"), ((a, b, 0.5, 4.0), "integer")]
    for args, msg in bad:
        with pytest.raises(InputError, match=msg):
            f(*args)


def test_heap_allocation_failure_is_an_error(compile_fn):
    from kiln.codegen import KernelError

    n, i = Var("n"), Var("i")
    A = Buffer("A", (IntImm(1),), "float32")
    T = Buffer("T", (n,), "float32", scope="local")
    f = compile_fn(PrimFunc("huge", (A, n), Allocate(T, loop(i, n, BufferStore(T, A[0], (i,))))))
    with pytest.raises(KernelError, match="out of memory"):
        f(np.zeros(1, np.float32), 2 ** 60)


def test_strided_buffer(compile_fn):
    """A buffer with explicit strides reads a column-major view."""
    i, j = Var("i"), Var("j")
    A = Buffer("A", (IntImm(3), IntImm(4)), "float32", strides=(IntImm(1), IntImm(3)))
    B = Buffer("B", (IntImm(3), IntImm(4)), "float32")
    f = compile_fn(PrimFunc("copy", (A, B), loop(i, 3, loop(j, 4, BufferStore(B, A[i, j], (i, j))))))
    a = np.asfortranarray(rng.random((3, 4), np.float32))
    b = np.empty((3, 4), np.float32)
    f(a, b)
    np.testing.assert_array_equal(b, a)


def test_vector_ramp_broadcast(compile_fn):
    """Contiguous, strided (2-D first index) and gathered vector loads; vector stores; Broadcast."""
    from kiln.tir import Broadcast, Max, Select, Sub

    i = Var("i")
    A, B = Buffer("A", (IntImm(8), IntImm(8)), "float32"), Buffer("B", (IntImm(64),), "float32")
    C, D = Buffer("C", (IntImm(8), IntImm(8)), "float32"), Buffer("D", (IntImm(64),), "float16")
    row = Ramp(i * 8, IntImm(1), 8)
    col = Ramp(IntImm(0), IntImm(1), 8)
    two = Broadcast(FloatImm(2.0), 8)
    v = A[i, col] * two + B[row]                       # contiguous 2-D and 1-D
    v = v + A[col, Broadcast(i, 8)]                    # strided: a column of A
    v = Max(v, Broadcast(FloatImm(1.5), 8))            # lanewise helper
    v = Select(B[row] > two * Broadcast(FloatImm(0.25), 8), v, Sub(Broadcast(FloatImm(0.0), 8), v))
    body = loop(i, 8, seq(BufferStore(C, v, (i, col)), BufferStore(D, Cast("float16x8", v), (row,))))
    f = compile_fn(PrimFunc("vec", (A, B, C, D), body))
    a, b = rng.random((8, 8), np.float32), rng.random(64, np.float32)
    c, d = np.empty((8, 8), np.float32), np.empty(64, np.float16)
    f(a, b, c, d)
    e = np.maximum(a * 2 + b.reshape(8, 8) + a.T, 1.5)
    e = np.where(b.reshape(8, 8) > 0.5, e, -e)
    np.testing.assert_allclose(c, e, rtol=1e-6)
    np.testing.assert_array_equal(d, e.astype(np.float16).reshape(-1))


def test_control_flow_lets_unroll_and_extern_calls(compile_fn):
    """IfThenElse, LetStmt, Let, Select, an unrolled loop with a nonzero start, and a C library
    function called through an extern prototype."""
    from kiln.tir import Call, Evaluate, IfThenElse, Let, LetStmt, Select, eq

    i, t, u = Var("i"), Var("t"), Var("u")
    A, B = Buffer("A", (IntImm(10),), "int64"), Buffer("B", (IntImm(10),), "int64")
    body = LetStmt(t, A[i] * 3, seq(
        Evaluate(Call("int64", "labs", (t,))),
        IfThenElse(eq(FloorMod(i, IntImm(2)), 0),
                   BufferStore(B, Call("int64", "labs", (t,)), (i,)),
                   BufferStore(B, Let(u, t + 1, Select(u > 0, u, -u)), (i,)))))
    fn = PrimFunc("ctl", (A, B), For(i, IntImm(2), IntImm(8), ForKind.UNROLLED, body))
    f = compile_fn(fn)
    a = np.arange(-5, 5, dtype=np.int64)
    b = np.zeros(10, np.int64)
    f(a, b)
    e = np.where(np.arange(10) % 2 == 0, np.abs(3 * a), np.abs(3 * a + 1))
    e[:2] = 0  # the loop runs i = 2 .. 9
    np.testing.assert_array_equal(b, e)


def test_reinterpret(compile_fn):
    from kiln.tir import Call

    i = Var("i")
    A, B = Buffer("A", (IntImm(4),), "float32"), Buffer("B", (IntImm(4),), "int32")
    H, G = Buffer("H", (IntImm(4),), "uint16"), Buffer("G", (IntImm(4),), "float16")
    body = For(i, IntImm(0), IntImm(4), ForKind.SERIAL, seq(
        BufferStore(B, Call("int32", "reinterpret", (A[i],)), (i,)),
        BufferStore(G, Call("float16", "reinterpret", (H[i],)), (i,))))
    f = compile_fn(PrimFunc("bits", (A, B, H, G), body))
    a, h = np.array([1.5, -0.0, np.inf, 3e-40], np.float32), np.array([0x3c00, 0x8001, 0x7c00, 0x7bff], np.uint16)
    b, g = np.empty(4, np.int32), np.empty(4, np.float16)
    f(a, b, h, g)
    np.testing.assert_array_equal(b, a.view(np.int32))
    np.testing.assert_array_equal(g.view(np.uint16), h)


def test_vector_gather_scatter_and_unsimplified_ramps(compile_fn):
    """Vector indices that are not ramps (gather/scatter), a sum of Broadcasts and a Ramp (still a
    contiguous load), and a negative-stride ramp store."""
    from kiln.tir import Add, Broadcast, Mul

    i = Var("i")
    B, G = Buffer("B", (IntImm(64),), "float32"), Buffer("G", (IntImm(64),), "float32")
    R, P = Buffer("R", (IntImm(64),), "float32"), Buffer("P", (IntImm(64),), "float32")
    lanes = Ramp(IntImm(0), IntImm(1), 8)
    unsimplified = Add(Mul(Broadcast(i, 8), Broadcast(IntImm(8), 8)), lanes)
    gather = FloorDiv(Ramp(i * 8, IntImm(1), 8), Broadcast(IntImm(2), 8))
    scatter = FloorMod(Ramp(i * 8 + 3, IntImm(1), 8), Broadcast(IntImm(64), 8))
    body = For(i, IntImm(0), IntImm(8), ForKind.SERIAL, seq(
        BufferStore(G, B[gather] + B[unsimplified], (unsimplified,)),
        BufferStore(R, B[unsimplified], (Ramp(i * 8 + 7, IntImm(-1), 8),)),
        BufferStore(P, B[unsimplified], (scatter,))))
    fn = PrimFunc("gs", (B, G, R, P), body)
    f = compile_fn(fn)
    src = generate([fn]).code
    assert src.count("__builtin_memcpy(&_k") >= 3  # the unsimplified ramp loads stay contiguous
    b = rng.random(64, np.float32)
    g, r, p = (np.empty(64, np.float32) for _ in range(3))
    f(b, g, r, p)
    np.testing.assert_array_equal(g, b[np.arange(64) // 2] + b)
    np.testing.assert_array_equal(r, b.reshape(8, 8)[:, ::-1].reshape(-1))
    np.testing.assert_array_equal(p, np.roll(b, 3))


def test_pragmas_only_outermost_parallel_and_simd(compile_fn):
    i, j, k = Var("i"), Var("j"), Var("k")
    A = Buffer("A", (IntImm(4), IntImm(4), IntImm(8)), "int32")
    store = BufferStore(A, Cast("int32", i * 100 + j * 10 + k), (i, j, k))
    inner = loop(k, 8, store, ForKind.SERIAL, simd=True)
    fn = PrimFunc("nest", (A,), loop(i, 4, loop(j, 4, inner, ForKind.PARALLEL), ForKind.PARALLEL))
    src = generate([fn]).code
    assert src.count("#pragma omp parallel for") == 1 and src.count("#pragma omp simd") == 1
    a = np.empty((4, 4, 8), np.int32)
    compile_fn(fn)(a)
    np.testing.assert_array_equal(a, np.add.outer(np.add.outer(np.arange(4) * 100, np.arange(4) * 10), np.arange(8)))
